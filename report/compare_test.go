package report

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

func TestParseGate(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Gate
		wantErr bool
	}{
		{in: "output_tokens_per_min:-5%", want: Gate{Metric: MetricOutputTokensPerMin, Direction: -1, Limit: 5, Relative: true}},
		{in: "ttfb_p95_s:+20%", want: Gate{Metric: MetricTTFBP95S, Direction: 1, Limit: 20, Relative: true}},
		{in: "on/prefix_hits_pct:-3", want: Gate{Variant: "on", Metric: MetricPrefixHitsPct, Direction: -1, Limit: 3}},
		{in: "ttfb_p50_s:+0.25", want: Gate{Metric: MetricTTFBP50S, Direction: 1, Limit: 0.25}},
		{in: "ttfb_p50_s:20%", wantErr: true},   // no sign: direction unknown
		{in: "bogus:+1%", wantErr: true},        // unknown metric
		{in: "ttfb_p50_s", wantErr: true},       // no limit
		{in: "ttfb_p50_s:+abc%", wantErr: true}, // not a number
		{in: "ttfb_p50_s:+-5%", wantErr: true},  // negative magnitude
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseGate(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Errorf("no error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.String() != tc.in {
				t.Errorf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

// scaledRun returns the synthetic run with every turn's output tokens scaled by
// f (f < 1: a throughput regression).
func scaledRun(f float64) (*loadgen.Manifest, []loadgen.Result, []loadgen.SeriesSample) {
	m, results, series := syntheticRun()
	for i := range results {
		results[i].OutputTokens = int(float64(results[i].OutputTokens) * f)
	}
	return m, results, series
}

func TestCompare(t *testing.T) {
	dirA := t.TempDir()
	m, r, s := syntheticRun()
	writeRunDir(t, dirA, m, r, s)
	dirB := t.TempDir()
	m, r, s = scaledRun(0.9) // 10 % fewer output tokens
	writeRunDir(t, dirB, m, r, s)

	gate := func(s string) Gate {
		th, err := ParseGate(s)
		if err != nil {
			t.Fatal(err)
		}
		return th
	}
	for _, tc := range []struct {
		name       string
		failOn     []string
		violations int
		checks     int // gate checks counted (Comparison.GateChecks)
	}{
		{"no gates", nil, 0, 0},
		{"loose gate passes", []string{"output_tokens_per_min:-15%"}, 0, 6},
		{"tight gate fails every stage of both variants", []string{"output_tokens_per_min:-5%"}, 6, 6},
		{"variant filter", []string{"on/output_tokens_per_min:-5%"}, 3, 3},
		{"rise gate ignores a drop", []string{"output_tokens_per_min:+5%"}, 0, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts CompareOptions
			for _, g := range tc.failOn {
				opts.FailOn = append(opts.FailOn, gate(g))
			}
			var out bytes.Buffer
			c, err := Compare(dirA, dirB, &out, opts)
			if tc.violations == 0 && err != nil {
				t.Fatalf("Compare: %v", err)
			}
			if tc.violations > 0 && !errors.Is(err, ErrThresholdExceeded) {
				t.Fatalf("Compare error %v, want ErrThresholdExceeded", err)
			}
			if c == nil || len(c.Violations) != tc.violations {
				t.Fatalf("violations %v, want %d", c.Violations, tc.violations)
			}
			if len(c.Stages) != 6 {
				t.Errorf("%d stage comparisons, want 6", len(c.Stages))
			}
			if tc.violations > 0 && !strings.Contains(out.String(), "FAIL ") {
				t.Errorf("output does not show the failure:\n%s", out.String())
			}
			if c.GateChecks != tc.checks {
				t.Errorf("%d gate checks, want %d", c.GateChecks, tc.checks)
			}
			passed := strings.Contains(out.String(), fmt.Sprintf("gates: %d check(s) of %d gate(s), all passed", tc.checks, len(tc.failOn)))
			if want := len(tc.failOn) > 0 && tc.violations == 0; passed != want {
				t.Errorf("\"all passed\" line shown: %v, want %v:\n%s", passed, want, out.String())
			}
		})
	}

	t.Run("a gate naming a variant in neither run is a usage error", func(t *testing.T) {
		_, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{FailOn: []Gate{gate("On/output_tokens_per_min:-5%")}})
		if err == nil || errors.Is(err, ErrThresholdExceeded) || !strings.Contains(err.Error(), `variant "On" is in neither run (variants: off, on)`) {
			t.Fatalf("Compare: %v; want a usage error naming the variants", err)
		}
	})

	t.Run("delta values", func(t *testing.T) {
		c, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range c.Stages {
			d := sc.Deltas[1] // output_tokens_per_min
			// int(x * 0.9) truncates, so the drop is a little over 10 %.
			if d.Metric != MetricOutputTokensPerMin || d.RelPct > -10 || d.RelPct < -10.5 {
				t.Errorf("%s/%d: %s change %v%%, want about -10%%", sc.Variant, sc.Sessions, d.Metric, d.RelPct)
			}
			if p := sc.Deltas[2]; p.Diff != 0 || p.Noise != WithinNoise {
				t.Errorf("%s/%d: TTFB p50 changed (%v, %s) although only tokens did", sc.Variant, sc.Sessions, p.Diff, p.Noise)
			}
		}
	})
}

// A virtual run and an HTTP run of one scenario are refused, naming both modes,
// unless Force; two HTTP modes (http, http-sim) are one world.
func TestCompareWorldMismatch(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	m, r, s := syntheticRun()
	m.Mode = "virtual"
	writeRunDir(t, dirA, m, r, s)
	m.Mode = "http-sim"
	writeRunDir(t, dirB, m, r, s)
	_, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
	if !errors.Is(err, ErrWorldMismatch) {
		t.Fatalf("virtual vs http-sim: error %v, want ErrWorldMismatch", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `virtual world (mode "virtual")`) || !strings.Contains(msg, `http world (mode "http-sim")`) {
		t.Errorf("error does not name both worlds: %v", err)
	}
	if _, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{Force: true}); err != nil {
		t.Errorf("with Force: %v", err)
	}
	m.Mode = "http"
	writeRunDir(t, dirA, m, r, s)
	if _, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{}); err != nil {
		t.Errorf("http vs http-sim (one world): %v", err)
	}
}

func TestCompareScenarioMismatch(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	m, r, s := syntheticRun()
	writeRunDir(t, dirA, m, r, s)
	m.Scenario.Seed = 8
	m.Scenario.TurnTokens = 500
	writeRunDir(t, dirB, m, r, s)
	_, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
	if !errors.Is(err, ErrScenarioMismatch) {
		t.Fatalf("error %v, want ErrScenarioMismatch", err)
	}
	if !strings.Contains(err.Error(), "turn_tokens (400 vs 500)") || strings.Contains(err.Error(), "seed") {
		t.Errorf("error does not name exactly the differing fields (seeds are not compared): %v", err)
	}
	if _, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{Force: true}); err != nil {
		t.Errorf("with Force: %v", err)
	}

	// A trace on one side reads as its fields, not as Go's pointer syntax.
	m, r, s = syntheticRun()
	m.Scenario.Trace = &loadgen.TraceSpec{File: "conv.jsonl", Mode: loadgen.TraceSession, Sample: 0.1}
	writeRunDir(t, dirB, m, r, s)
	_, err = Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
	if want := "trace (none vs file conv.jsonl, mode session, sample 0.1)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}

	// Two seeds of one scenario compare (gauging noise), with a note.
	m, r, s = syntheticRun()
	m.Scenario.Seed = 8
	writeRunDir(t, dirB, m, r, s)
	c, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
	if err != nil {
		t.Fatalf("runs differing only by seed: %v", err)
	}
	if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, "different seeds (7 vs 8)") }) {
		t.Errorf("no note about the seeds: %q", c.Notes)
	}

	// An empty model (a virtual run: "the server's model") matches a resolved one;
	// durations are named in Go's format.
	m, r, s = syntheticRun()
	m.Scenario.Model = ""
	writeRunDir(t, dirA, m, r, s)
	m.Scenario.Model = "qwen3-4b-dp4"
	m.Scenario.StageDuration *= 2
	writeRunDir(t, dirB, m, r, s)
	_, err = Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
	if err == nil || strings.Contains(err.Error(), "model") {
		t.Errorf("empty vs resolved model: error %v, want only the stage duration named", err)
	}
	if want := (m.Scenario.StageDuration / 2).String() + " vs " + m.Scenario.StageDuration.String(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not show durations as %q", err, want)
	}
}

// A gate fires on a change past its limit only when the change is beyond the
// stage's noise or the noise is unknown; with strict gates, noise is ignored. A
// change that cannot be computed always fires.
func TestGateCheckRespectsNoise(t *testing.T) {
	gate, err := ParseGate("output_tokens_per_min:-5%")
	if err != nil {
		t.Fatal(err)
	}
	drop := func(noise Noise) Delta {
		return Delta{Metric: "output_tokens_per_min", Base: 1000, Value: 900, Diff: -100, RelPct: -10, Noise: noise}
	}
	tests := []struct {
		name   string
		d      Delta
		strict bool
		want   bool
	}{
		{"past the limit, beyond noise", drop(BeyondNoise), false, true},
		{"past the limit, within noise", drop(WithinNoise), false, false},
		{"past the limit, within noise, strict", drop(WithinNoise), true, true},
		{"past the limit, noise unknown", drop(NoiseUnknown), false, true},
		{"inside the limit", Delta{Base: 1000, Value: 980, Diff: -20, RelPct: -2, Noise: BeyondNoise}, false, false},
		{"cannot be computed", Delta{Base: 0, Value: 5, Diff: 5, RelPct: math.NaN(), Noise: WithinNoise}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := gate.check(tc.d, tc.strict); got != tc.want {
				t.Errorf("check = %v (%q), want %v", got, why, tc.want)
			}
		})
	}
}

// splitRun writes the synthetic run's "off" half to dirA and its "on" half to
// dirB, as warden bench --variants off and --variants on would (same turns and
// series files: Summarize reads only the manifest's variants).
func splitRun(t *testing.T, dirA, dirB string, edit func(a, b *loadgen.Manifest)) {
	t.Helper()
	m, r, s := syntheticRun()
	a, b := *m, *m
	sa, sb := *m.Scenario, *m.Scenario
	a.Scenario, b.Scenario = &sa, &sb
	a.Variants, b.Variants = m.Variants[:1], m.Variants[1:]
	sa.Variants, sb.Variants = []string{"off"}, []string{"on"}
	a.RunID, b.RunID = "half-off", "half-on"
	if edit != nil {
		edit(&a, &b)
	}
	writeRunDir(t, dirA, &a, r, s)
	writeRunDir(t, dirB, &b, r, s)
}

// TestComparePair: two runs that are the off and on halves of one comparison
// give the off -> on deltas, noise verdicts and table of the one-run report,
// and a markdown table; runs differing in another scenario field, in engine
// kinds or in a column's source are refused with the field named.
func TestComparePair(t *testing.T) {
	full := t.TempDir()
	m, r, s := syntheticRun()
	writeRunDir(t, full, m, r, s)
	run, err := Load(full)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := Summarize(run)
	if err != nil {
		t.Fatal(err)
	}
	want := pairDeltas(&run.Manifest, sums)

	dirA, dirB := t.TempDir(), t.TempDir()
	splitRun(t, dirA, dirB, nil)
	var out, md bytes.Buffer
	c, err := Compare(dirA, dirB, &out, CompareOptions{Markdown: &md})
	if err != nil {
		t.Fatalf("Compare: %v", err)
	}
	if !slices.Equal(c.Pair, []string{"off", "on"}) || len(c.Stages) != len(want) || len(want) != 3 {
		t.Fatalf("pair %v, %d stages; want off -> on over %d stages", c.Pair, len(c.Stages), len(want))
	}
	for i, sc := range c.Stages {
		for j, d := range sc.Deltas {
			w := want[i].Deltas[j]
			same := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
			if !same(d.Diff, w.Diff) || !same(d.CIHalf, w.CIHalf) || d.Noise != w.Noise {
				t.Errorf("stage %d %s: pair %+v, one-run report %+v", sc.Sessions, d.Metric, d, w)
			}
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, &run.Manifest, sums, nil); err != nil {
		t.Fatal(err)
	}
	_, oneRun, _ := strings.Cut(table.String(), "\n") // the rows, without the run line
	oneRun, _, _ = strings.Cut(oneRun, "* within noise")
	if !strings.Contains(out.String(), oneRun) {
		t.Errorf("pair output lacks the one-run off -> on table:\n%s\nwant within it:\n%s", out.String(), oneRun)
	}
	for _, s := range []string{"off -> on across two runs: half-off", "off (A) -> on (B), per metric", "within noise"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if !strings.Contains(md.String(), "# off -> on across two runs") || !strings.Contains(md.String(), "| sessions |") || !strings.Contains(md.String(), " -> ") {
		t.Errorf("markdown:\n%s", md.String())
	}
	t.Logf("pair output:\n%s", out.String())

	refuse := []struct {
		name string
		edit func(a, b *loadgen.Manifest)
		is   error
		says string
	}{
		{"another scenario field", func(_, b *loadgen.Manifest) { b.Scenario.TurnTokens = 500 }, ErrScenarioMismatch, "turn_tokens (400 vs 500)"},
		{"replica count", func(_, b *loadgen.Manifest) { b.Replicas = b.Replicas[:2] }, ErrScenarioMismatch, "replicas (4 vs 2)"},
		{"engine kinds", func(a, b *loadgen.Manifest) {
			a.Engines = []loadgen.ReplicaEngine{{Replica: "r0", Kind: "llamacpp"}}
		}, ErrEngineMismatch, "engine kinds (llamacpp vs vllm)"},
		{"column source", func(a, b *loadgen.Manifest) {
			a.Engines = []loadgen.ReplicaEngine{{Replica: "r0", Kind: "llamacpp", Columns: []loadgen.ColumnSource{{Column: "running", Source: "llamacpp:requests_processing"}}}}
			b.Engines = []loadgen.ReplicaEngine{{Replica: "r0", Kind: "llamacpp", Columns: []loadgen.ColumnSource{{Column: "running", Missing: "metrics off"}}}}
		}, ErrEngineMismatch, "column running source (llamacpp:requests_processing vs n/a: metrics off)"},
	}
	for _, tc := range refuse {
		t.Run(tc.name, func(t *testing.T) {
			a, b := t.TempDir(), t.TempDir()
			splitRun(t, a, b, tc.edit)
			_, err := Compare(a, b, &bytes.Buffer{}, CompareOptions{})
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v, want %v naming %q", err, tc.is, tc.says)
			}
			if strings.Contains(err.Error(), "variants") {
				t.Errorf("error names the variants, which a pair may differ in: %v", err)
			}
		})
	}
}

// The same variants in another order compare (each variant starts fresh),
// with a note; other variants are still a scenario mismatch.
func TestCompareVariantsReordered(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	m, r, s := syntheticRun()
	writeRunDir(t, dirA, m, r, s)
	m.Scenario.Variants = []string{"on", "off"}
	m.Variants[0], m.Variants[1] = m.Variants[1], m.Variants[0]
	writeRunDir(t, dirB, m, r, s)
	c, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{})
	if err != nil {
		t.Fatalf("variants reordered: %v", err)
	}
	if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, "same variants in another order (off,on vs on,off)") }) {
		t.Errorf("no note on the order: %q", c.Notes)
	}
	m.Scenario.Variants = []string{"on"}
	writeRunDir(t, dirB, m, r, s)
	if _, err := Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{}); !errors.Is(err, ErrScenarioMismatch) {
		t.Errorf("other variants: %v, want ErrScenarioMismatch", err)
	}
}

// Equal values read "identical", not "within noise" or "unknown"; runs on
// fleets of another size or profile compare, with a note naming both.
func TestCompareIdenticalAndFleetNote(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	m, r, s := syntheticRun()
	writeRunDir(t, dirA, m, r, s)
	writeRunDir(t, dirB, m, r, s)
	var out bytes.Buffer
	c, err := Compare(dirA, dirB, &out, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "prefix_hits_pct") {
			rows++
			if !strings.Contains(line, "identical") {
				t.Errorf("a row of equal runs does not say identical: %s", line)
			}
		}
	}
	if rows == 0 {
		t.Fatalf("no prefix_hits_pct rows in:\n%s", out.String())
	}
	if slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, "fleets") }) {
		t.Errorf("a fleet note for one fleet: %q", c.Notes)
	}
	m.Replicas = m.Replicas[:3]
	m.Profile = "rtx5090-27b"
	writeRunDir(t, dirB, m, r, s)
	if c, err = Compare(dirA, dirB, &bytes.Buffer{}, CompareOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "the runs served different fleets (4 vs 3 replicas, profile " + cmp.Or(syntheticProfile(), "none (real servers)") + " vs rtx5090-27b)"
	if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, want) }) {
		t.Errorf("notes %q, want %q", c.Notes, want)
	}
}

// syntheticProfile is syntheticRun's simulator profile.
func syntheticProfile() string { m, _, _ := syntheticRun(); return m.Profile }
