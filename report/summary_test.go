package report

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// hdrClose reports whether got is within the HDR histogram's resolution (3
// significant digits: relative error <= 0.1 %) of want.
func hdrClose(got, want float64) bool { return math.Abs(got-want) <= want*1e-3 }

func approx(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) }

func loadSummaries(t *testing.T, m *loadgen.Manifest, results []loadgen.Result, series []loadgen.SeriesSample) []Summary {
	t.Helper()
	dir := t.TempDir()
	writeRunDir(t, dir, m, results, series)
	run, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	sums, err := Summarize(run)
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	return sums
}

// turnsFixture: two stages of one variant; the second has a 10 s warm-up.
func turnsFixture() (*loadgen.Manifest, []loadgen.Result) {
	m := &loadgen.Manifest{
		RunID: "turns", Scenario: testScenario([]int{2, 4}, time.Minute), Replicas: []string{"r0", "r1", "r2", "r3"},
		Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{
			{Sessions: 2, Start: 0, End: sec(60), Complete: true, Started: 7, Completed: 6, Failed: 1},
			{Sessions: 4, Start: sec(60), End: sec(120), Warmup: sec(10), Complete: true, Started: 3, Completed: 1, InFlight: 1},
		}}},
	}
	failed := okTurn("off", 2, 0, "r3", 45, 0, 50, 0)
	failed.Status, failed.Err, failed.FirstToken, failed.OutputTokens = 502, "bad gateway", 0, 0
	lastOfS1 := okTurn("off", 1, 1, "r2", 40, 10, 59.999, 100)
	lastOfS1.LastTurn = true
	lateLast := okTurn("off", 0, 4, "r0", 60, 0.5, 80, 100)
	lateLast.LastTurn = true
	cachedA := okTurn("off", 0, 1, "r0", 10, 2, 20, 100)
	cachedA.CachedTokens = 600
	cachedB := okTurn("off", 0, 2, "r1", 20, 3, 30, 100)
	cachedB.CachedTokens = 0
	return m, []loadgen.Result{
		okTurn("off", 0, 0, "r0", 0, 1, 10, 100), // placed on r0
		cachedA,                                  // stayed
		cachedB,                                  // moved to r1
		okTurn("off", 1, 0, "r2", 0, 4, 40, 100), // placed on r2
		lastOfS1,                                 // stayed, session done just before the boundary
		failed,                                   // failed turn: counted, not in TTFB
		okTurn("off", 0, 3, "r0", 30, 1, 60, 100), // done exactly at the boundary: stage 1, inside its warm-up
		lateLast, // stage 1 measured window
		okTurn("off", 3, 0, "r1", 100, 1, 130, 100), // done after the last stage: nowhere
	}
}

func TestSummarizeTurns(t *testing.T) {
	m, results := turnsFixture()
	sums := loadSummaries(t, m, results, nil)
	if len(sums) != 2 {
		t.Fatalf("got %d summaries, want 2", len(sums))
	}
	s0, s1 := sums[0], sums[1]
	t.Run("stage0", func(t *testing.T) {
		if s0.TurnsOK != 5 || s0.TurnsFailed != 1 {
			t.Errorf("turns ok/failed = %d/%d, want 5/1", s0.TurnsOK, s0.TurnsFailed)
		}
		if s0.SessionsCompleted != 1 || !approx(s0.SessionsPerH, 60) {
			t.Errorf("sessions completed %d, per h %v; want 1, 60", s0.SessionsCompleted, s0.SessionsPerH)
		}
		if !approx(s0.OutputTokensPerMin, 500) {
			t.Errorf("output tokens/min = %v, want 500", s0.OutputTokensPerMin)
		}
		// TTFBs 1, 2, 3, 4, 10 s: nearest rank p50 = 3 s, p95 = 10 s.
		if !hdrClose(s0.TTFBP50S, 3) || !hdrClose(s0.TTFBP95S, 10) {
			t.Errorf("TTFB p50/p95 = %v/%v, want 3/10", s0.TTFBP50S, s0.TTFBP95S)
		}
		if s0.StayedTurns != 2 || s0.MovedTurns != 1 || !approx(s0.StayedPct, 200.0/3) {
			t.Errorf("stayed %d moved %d pct %v; want 2, 1, 66.67", s0.StayedTurns, s0.MovedTurns, s0.StayedPct)
		}
		// Only two turns reported cached tokens: 600 of 2000 prompt tokens.
		if !approx(s0.UsageCachedPct, 30) {
			t.Errorf("usage cached = %v, want 30", s0.UsageCachedPct)
		}
		if !approx(s0.PromptTokensMean, 1000) || !approx(s0.NominalPromptTokensMean, 900) {
			t.Errorf("prompt mean %v nominal %v; want 1000, 900", s0.PromptTokensMean, s0.NominalPromptTokensMean)
		}
		if s0.SubWindows != 1 || !math.IsNaN(s0.OutputTokensPerMinStdErr) || !math.IsNaN(s0.TTFBP50StdErrS) {
			t.Errorf("one-minute window: sub-windows %d, stderr %v/%v; want 1, NaN, NaN",
				s0.SubWindows, s0.OutputTokensPerMinStdErr, s0.TTFBP50StdErrS)
		}
		if !s0.Accounting.Balanced {
			t.Errorf("accounting 7 = 6 + 1 + 0 reported unbalanced")
		}
	})
	t.Run("stage1", func(t *testing.T) {
		if s1.WindowStart != sec(70) || s1.WindowEnd != sec(120) {
			t.Errorf("window [%v, %v), want [70s, 120s)", s1.WindowStart, s1.WindowEnd)
		}
		// The turn done at 60 s lies in the warm-up; the one at 130 s after the end.
		if s1.TurnsOK != 1 || s1.TurnsFailed != 0 {
			t.Errorf("turns ok/failed = %d/%d, want 1/0", s1.TurnsOK, s1.TurnsFailed)
		}
		if !approx(s1.SessionsPerH, 72) || !approx(s1.OutputTokensPerMin, 120) {
			t.Errorf("sessions/h %v tokens/min %v; want 72, 120 (50 s window)", s1.SessionsPerH, s1.OutputTokensPerMin)
		}
		if !hdrClose(s1.TTFBP50S, 0.5) || !approx(s1.StayedPct, 100) {
			t.Errorf("p50 %v stayed %v; want 0.5, 100", s1.TTFBP50S, s1.StayedPct)
		}
		if !math.IsNaN(s1.UsageCachedPct) {
			t.Errorf("usage cached = %v, want NaN (no turn reported cached tokens)", s1.UsageCachedPct)
		}
		if s1.Accounting.Balanced {
			t.Errorf("accounting 3 != 1 + 0 + 1 reported balanced")
		}
		if !slices.ContainsFunc(s1.Notes, func(n string) bool { return strings.Contains(n, "does not balance") }) {
			t.Errorf("no accounting note in %q", s1.Notes)
		}
	})
	t.Run("no series", func(t *testing.T) {
		for _, s := range sums {
			if !math.IsNaN(s.ReplicasBusy) || !math.IsNaN(s.PrefixHitsPct) {
				t.Errorf("stage %d: busy %v hits %v without series, want NaN", s.Stage, s.ReplicasBusy, s.PrefixHitsPct)
			}
			if !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "no series samples") }) {
				t.Errorf("stage %d: no note about missing series in %q", s.Stage, s.Notes)
			}
		}
	})
}

func sample(replica string, t, running, queries, hits float64) loadgen.SeriesSample {
	return loadgen.SeriesSample{Variant: "off", T: sec(t), Replica: replica, Running: running,
		PrefixQueries: queries, PrefixHits: hits, PromptTokens: queries}
}

func TestSummarizeSeries(t *testing.T) {
	m := &loadgen.Manifest{RunID: "series", Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{
		{Sessions: 4, Start: sec(100), End: sec(160), Complete: true},
	}}}}
	series := []loadgen.SeriesSample{
		// r0: polled before the window; the 160 s sample ends the counter window
		// (at or before the end) but is not a poll inside [100, 160).
		sample("r0", 90, 1, 1000, 500),
		sample("r0", 100, 2, 1200, 600),
		sample("r0", 110, 0, 1500, 700),
		sample("r0", 120, 1, 2000, 1000),
		sample("r0", 130, 0, 2200, 1200),
		sample("r0", 140, 3, 2500, 1500),
		sample("r0", 150, 0, 2800, 1800),
		sample("r0", 160, 5, 3000, 2000),
		// r1: no sample before the window (starts from its first one), and a
		// counter reset at 140 s.
		sample("r1", 120, 1, 50, 10),
		sample("r1", 130, 1, 80, 30),
		sample("r1", 140, 1, 20, 15),
		sample("r1", 150, 1, 40, 35),
		// r2: only after the window: contributes nothing.
		sample("r2", 170, 9, 99999, 99999),
	}
	s := loadSummaries(t, m, nil, series)[0]
	// Busy: r0 3 of 6 polls, r1 4 of 4.
	if !approx(s.ReplicasBusy, 1.5) {
		t.Errorf("replicas busy = %v, want 1.5", s.ReplicasBusy)
	}
	// r0: 3000-1200 queries, 2000-600 hits. r1: 30 + 20 (after reset) + 20 queries,
	// 20 + 15 + 20 hits.
	if !approx(s.PrefixQueriesTokens, 1870) || !approx(s.PrefixHitsTokens, 1455) {
		t.Errorf("queries %v hits %v; want 1870, 1455", s.PrefixQueriesTokens, s.PrefixHitsTokens)
	}
	if !approx(s.PrefixHitsPct, 100*1455.0/1870) {
		t.Errorf("prefix hits = %v%%, want %v", s.PrefixHitsPct, 100*1455.0/1870)
	}
}

func TestReplicasBusyAligned(t *testing.T) {
	// With all replicas polled at the same instants, the per-replica share summed
	// over replicas equals the mean over instants of the busy count:
	// instants 0, 10, 20, 30 with 2, 1, 0, 1 busy replicas -> 1.
	m := &loadgen.Manifest{Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{{Sessions: 1, Start: 0, End: sec(40)}}}}}
	running := map[string][]float64{"r0": {1, 1, 0, 0}, "r1": {2, 0, 0, 4}}
	var series []loadgen.SeriesSample
	for _, r := range []string{"r0", "r1"} {
		for i, v := range running[r] {
			series = append(series, sample(r, float64(10*i), v, 0, 0))
		}
	}
	s := loadSummaries(t, m, nil, series)[0]
	if !approx(s.ReplicasBusy, 1) {
		t.Errorf("replicas busy = %v, want 1", s.ReplicasBusy)
	}
	// No prefix query at all: the hit rate is undefined, not 0.
	if !math.IsNaN(s.PrefixHitsPct) {
		t.Errorf("prefix hits = %v with no queries, want NaN", s.PrefixHitsPct)
	}
}

func TestSummarizeMissingCounter(t *testing.T) {
	m := &loadgen.Manifest{Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{{Sessions: 1, Start: sec(10), End: sec(20)}}}}}
	series := []loadgen.SeriesSample{
		sample("r0", 10, 1, 100, 50),
		sample("r0", 20, 1, 200, math.NaN()), // hits series absent from this scrape
	}
	s := loadSummaries(t, m, nil, series)[0]
	if !math.IsNaN(s.PrefixHitsPct) {
		t.Errorf("prefix hits = %v with a missing counter, want NaN", s.PrefixHitsPct)
	}
	if !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "counters missing") }) {
		t.Errorf("no note about the missing counter in %q", s.Notes)
	}
}

func TestNoiseAndDelta(t *testing.T) {
	// A 3-minute window: three one-minute sub-windows with 100, 200 and 300 output
	// tokens -> mean 200/min, sd 100, stderr 100/sqrt(3).
	mk := func(name string, tokens [3]int) *loadgen.Manifest {
		return &loadgen.Manifest{Variants: []loadgen.Variant{{Name: name, Stages: []loadgen.StageWindow{{Sessions: 1, Start: 0, End: sec(180)}}}}}
	}
	turns := func(name string, tokens [3]int) []loadgen.Result {
		var out []loadgen.Result
		for k, n := range tokens {
			out = append(out, okTurn(name, int64(k), 0, "r0", float64(60*k), 1, float64(60*k+30), n))
		}
		return out
	}
	base := loadSummaries(t, mk("off", [3]int{}), turns("off", [3]int{100, 200, 300}), nil)[0]
	se := 100 / math.Sqrt(3)
	if base.SubWindows != 3 || !approx(base.OutputTokensPerMin, 200) || !approx(base.OutputTokensPerMinStdErr, se) {
		t.Fatalf("sub-windows %d, tokens/min %v, stderr %v; want 3, 200, %v",
			base.SubWindows, base.OutputTokensPerMin, base.OutputTokensPerMinStdErr, se)
	}
	// Every sub-window has the same TTFB: zero spread.
	if !approx(base.TTFBP50StdErrS, 0) {
		t.Errorf("TTFB p50 stderr = %v, want 0", base.TTFBP50StdErrS)
	}
	half := z95 * math.Sqrt(2) * se // about 160 tokens/min
	for _, tc := range []struct {
		name   string
		tokens [3]int
		want   Noise
	}{
		{"beyond", [3]int{300, 400, 500}, BeyondNoise}, // +200 > 160
		{"within", [3]int{200, 300, 400}, WithinNoise}, // +100 < 160
	} {
		t.Run(tc.name, func(t *testing.T) {
			cand := loadSummaries(t, mk("on", tc.tokens), turns("on", tc.tokens), nil)[0]
			d, err := NewDelta(MetricOutputTokensPerMin, &base, &cand)
			if err != nil {
				t.Fatal(err)
			}
			if !approx(d.CIHalf, half) || d.Noise != tc.want {
				t.Errorf("ci half %v noise %q; want %v, %q", d.CIHalf, d.Noise, half, tc.want)
			}
		})
	}
	t.Run("no estimate", func(t *testing.T) {
		d, _ := NewDelta(MetricPrefixHitsPct, &base, &base)
		if d.Noise != NoiseUnknown {
			t.Errorf("noise %q, want unknown", d.Noise)
		}
	})
	t.Run("unknown metric", func(t *testing.T) {
		if _, err := NewDelta("bogus", &base, &base); err == nil {
			t.Error("no error for an unknown metric")
		}
	})
	// The same samples given directly (SampleDelta) get the same verdicts.
	for _, tc := range []struct {
		name  string
		value []float64
		want  Noise
	}{
		{"samples beyond", []float64{300, 400, 500}, BeyondNoise},
		{"samples within", []float64{200, 300, 400}, WithinNoise},
		{"one sample", []float64{1000}, NoiseUnknown}, // no spread to judge by
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := SampleDelta("x", []float64{100, 200, 300}, tc.value)
			if d.Noise != tc.want || (tc.want != NoiseUnknown && !approx(d.CIHalf, half)) {
				t.Errorf("ci half %v noise %q; want %v, %q", d.CIHalf, d.Noise, half, tc.want)
			}
		})
	}
}

func TestSummarizeEmptyManifest(t *testing.T) {
	if _, err := Summarize(&Run{}); err == nil {
		t.Error("no error for a manifest without variants")
	}
}

// TestSummarizeSendLag: send lag is Sent - Intended over every turn done in the
// window, failed ones too, and turns done outside the window do not count.
func TestSummarizeSendLag(t *testing.T) {
	m := &loadgen.Manifest{RunID: "lag", Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{
		{Sessions: 4, Start: sec(100), End: sec(160), Complete: true},
	}}}}
	var turns []loadgen.Result
	for i, lagMS := range []float64{0, 10, 10, 10, 250} {
		r := okTurn("off", int64(i), 1, "r0", 110, 1, 120, 10)
		r.Sent += time.Duration(lagMS * float64(time.Millisecond))
		if i == 4 {
			r.Status, r.Err = 500, "upstream error" // failed turns were sent late too
		}
		turns = append(turns, r)
	}
	late := okTurn("off", 9, 1, "r0", 150, 1, 170, 10) // done after the window
	late.Sent += 5 * time.Second
	turns = append(turns, late)
	s := loadSummaries(t, m, turns, nil)[0]
	if math.Abs(s.SendLagP50S-0.010) > 0.0001 || math.Abs(s.SendLagP99S-0.250) > 0.001 {
		t.Errorf("send lag p50 %v s, p99 %v s; want 0.010 and 0.250", s.SendLagP50S, s.SendLagP99S)
	}
	empty := loadSummaries(t, m, nil, nil)[0]
	if !math.IsNaN(empty.SendLagP50S) || !math.IsNaN(empty.SendLagP99S) {
		t.Errorf("no turns: send lag %v / %v, want NaN", empty.SendLagP50S, empty.SendLagP99S)
	}
}

// TestSummarizeNotesReplicaWithoutMetrics: a replica whose scrapes stop (it died)
// or never land in the window is named in a note, since prefix hits and replicas
// busy then leave it out; replicas sampled to the end get no note.
func TestSummarizeNotesReplicaWithoutMetrics(t *testing.T) {
	m := &loadgen.Manifest{RunID: "dead", Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{
		{Sessions: 4, Start: sec(100), End: sec(160), Complete: true},
	}}}}
	var series []loadgen.SeriesSample
	for ts := 90.0; ts <= 160; ts++ {
		series = append(series, sample("r0", ts, 1, 100*ts, 50*ts))
		if ts <= 120 {
			series = append(series, sample("r1", ts, 1, 100*ts, 50*ts)) // dies at 120 s
		}
		if ts <= 95 {
			series = append(series, sample("r2", ts, 1, 100*ts, 50*ts)) // gone before the window
		}
	}
	s := loadSummaries(t, m, nil, series)[0]
	has := func(sub string) bool {
		return slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, sub) })
	}
	if !has("replica r1: /metrics samples stop 40 s before the window's end") {
		t.Errorf("no note for r1, which died 40 s before the end: %q", s.Notes)
	}
	if !has("replica r2: no /metrics sample in the window") {
		t.Errorf("no note for r2, never sampled in the window: %q", s.Notes)
	}
	if has("replica r0") {
		t.Errorf("note for r0, sampled to the end: %q", s.Notes)
	}
}

// Conversation completion time: from a session's first send (a failed first
// attempt and a router hold included) to its last turn's end, for the sessions
// whose last turn is done OK in the window.
func TestConversationCompletionTime(t *testing.T) {
	m := &loadgen.Manifest{
		RunID: "conv", Scenario: testScenario([]int{3}, time.Minute), Replicas: []string{"r0"},
		Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{
			{Sessions: 3, Start: 0, End: sec(60), Complete: true, Started: 6, Completed: 5, Failed: 1},
		}}},
	}
	aFailed := okTurn("off", 0, 0, "r0", 1, 0, 2, 0)
	aFailed.Status, aFailed.Err, aFailed.FirstToken = 502, "bad gateway", 0
	aFirst := okTurn("off", 0, 0, "r0", 5, 6, 15, 100)
	aFirst.Held = 4 * time.Second // held at the router: part of the wait
	aLast := okTurn("off", 0, 1, "r0", 20, 1, 41, 100)
	aLast.LastTurn = true
	bLast := okTurn("off", 1, 1, "r0", 25, 1, 30, 100)
	bLast.LastTurn = true
	results := []loadgen.Result{aFailed, aFirst, aLast,
		okTurn("off", 1, 0, "r0", 10, 1, 20, 100), bLast,
		okTurn("off", 2, 0, "r0", 12, 1, 50, 100), // not done: not counted
	}
	s := loadSummaries(t, m, results, nil)[0]
	// A: 1 s -> 41 s = 40 s; B: 10 s -> 30 s = 20 s. Nearest rank: p50 20, p95 40.
	if !hdrClose(s.ConversationP50S, 20) || !hdrClose(s.ConversationP95S, 40) {
		t.Errorf("conversation p50/p95 = %v/%v s, want 20/40", s.ConversationP50S, s.ConversationP95S)
	}
	for _, name := range []string{MetricConversationP50S, MetricConversationP95S} {
		if v, _, err := s.Metric(name); err != nil || math.IsNaN(v) {
			t.Errorf("metric %s: %v, %v", name, v, err)
		}
	}

	// No session done in the window: n/a, never 0.
	s = loadSummaries(t, m, results[:2], nil)[0]
	if !math.IsNaN(s.ConversationP50S) || !math.IsNaN(s.ConversationP95S) {
		t.Errorf("no session done: conversation p50/p95 = %v/%v, want NaN", s.ConversationP50S, s.ConversationP95S)
	}
}

// The computed-prompt counters' cross-check: prompt tokens the responses
// reported minus what the engines say they computed, over the window.
func TestComputedCachedPct(t *testing.T) {
	m := &loadgen.Manifest{
		RunID: "computed", Scenario: testScenario([]int{2}, time.Minute), Replicas: []string{"r0", "r1"},
		Variants: []loadgen.Variant{{Name: "on", Affinity: true, Stages: []loadgen.StageWindow{
			{Sessions: 2, Start: 0, End: sec(60), Complete: true, Started: 3, Completed: 3},
		}}},
	}
	results := []loadgen.Result{ // 1000 prompt tokens each (okTurn)
		okTurn("on", 0, 0, "r0", 1, 1, 10, 10), okTurn("on", 0, 1, "r0", 11, 1, 20, 10),
		okTurn("on", 1, 0, "r1", 1, 1, 30, 10),
	}
	nan := math.NaN()
	sample := func(rep string, at, computed float64) loadgen.SeriesSample {
		return loadgen.SeriesSample{Variant: "on", T: sec(at), Replica: rep, PrefixQueries: nan, PrefixHits: nan,
			PromptTokens: nan, Preemptions: nan, KVUsage: nan, PromptComputedTokens: computed}
	}
	series := []loadgen.SeriesSample{
		sample("r0", 0, 500), sample("r0", 30, 1700), sample("r0", 60, 1700), // +1200 on r0
		sample("r1", 0, 0), sample("r1", 30, 600), sample("r1", 60, 600), // +600 on r1
	}
	s := loadSummaries(t, m, results, series)[0]
	// 3000 reported, 1800 computed: 40 % cached.
	if s.ComputedPromptTokens != 1800 || !approx(s.ComputedCachedPct, 40) {
		t.Errorf("computed %v tokens, cached %v %%; want 1800, 40", s.ComputedPromptTokens, s.ComputedCachedPct)
	}
	series[4].PromptComputedTokens = nan // one replica without the counter: n/a
	s = loadSummaries(t, m, results, series)[0]
	if !math.IsNaN(s.ComputedCachedPct) {
		t.Errorf("a replica without the counter: cached %v %%, want NaN", s.ComputedCachedPct)
	}
}

// computed_cached_pct takes P over the requests whose first token fell in the
// window, as the engines count prompt tokens by source then: a turn that
// prefilled in this window (1,000 prompt tokens, 400 computed) and finished in
// the next is this window's, so the figure matches its 60 % usage share. Over
// the turns done in the window (the old rule) it read 0 % here and 100 % in
// the next window.
func TestComputedCachedCountsTurnsByFirstToken(t *testing.T) {
	s := time.Second
	results := []*loadgen.Result{
		{Status: 200, Sent: 1 * s, FirstToken: 2 * s, Done: 12 * s, PromptTokens: 1000, CachedTokens: 600},
	}
	reps := []replicaSeries{{name: "r0", samples: []loadgen.SeriesSample{
		{T: 0, PromptComputedTokens: 0}, {T: 10 * s, PromptComputedTokens: 400}, {T: 20 * s, PromptComputedTokens: 400},
	}}}
	first := Summary{WindowStart: 0, WindowEnd: 10 * s}
	summarizeComputed(&first, results, reps)
	next := Summary{WindowStart: 10 * s, WindowEnd: 20 * s}
	summarizeComputed(&next, results, reps)
	if math.Abs(first.ComputedCachedPct-60) > 1e-9 {
		t.Errorf("the window of the first token: computed cached %.1f %%, want 60", first.ComputedCachedPct)
	}
	if !math.IsNaN(next.ComputedCachedPct) {
		t.Errorf("the window it finished in: computed cached %.1f %%, want n/a (no first token there)", next.ComputedCachedPct)
	}
}
