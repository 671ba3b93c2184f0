package report

import (
	"math"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// TestLoadLoadgenFormat writes a directory with loadgen's own ResultsWriter and reads
// it back, so the two stay in step (including NaN for a missing series).
func TestLoadLoadgenFormat(t *testing.T) {
	dir := t.TempDir()
	w, err := loadgen.CreateResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := okTurn("on", 1, 0, "r1", 1, 0.25, 3, 42)
	if err := w.WriteResult(&r); err != nil {
		t.Fatal(err)
	}
	samples := []loadgen.SeriesSample{
		{Variant: "on", T: 1500 * time.Millisecond, Replica: "r1", Running: 1, PrefixQueries: 100, PrefixHits: math.NaN()},
		{Variant: "on", T: 2 * time.Second, Replica: "r1", Running: 0, PrefixQueries: 300, PrefixHits: 150},
	}
	for _, s := range samples {
		if err := w.WriteSample(s); err != nil {
			t.Fatal(err)
		}
	}
	m := &loadgen.Manifest{RunID: "compat", Variants: []loadgen.Variant{{Name: "on", Affinity: true,
		Stages: []loadgen.StageWindow{{Sessions: 1, Start: 0, End: 5 * time.Second}}}}}
	if err := w.Close(m); err != nil {
		t.Fatal(err)
	}
	run, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(run.Results) != 1 || run.Results[0] != r {
		t.Errorf("turns: got %+v, want %+v", run.Results, r)
	}
	if len(run.Series) != 2 || run.Series[0].T != samples[0].T || !math.IsNaN(run.Series[0].PrefixHits) ||
		run.Series[1].PrefixQueries != 300 {
		t.Errorf("series: got %+v", run.Series)
	}
	if run.Manifest.RunID != "compat" {
		t.Errorf("manifest run id %q", run.Manifest.RunID)
	}
}

func TestPromptRates(t *testing.T) {
	s := func(replica string, t, queries, hits float64) loadgen.SeriesSample {
		return loadgen.SeriesSample{Variant: "on", Replica: replica, T: sec(t), PrefixQueries: queries, PrefixHits: hits}
	}
	series := []loadgen.SeriesSample{
		// r0: 1000 queries (600 hits) spread over 5..15 s: half in each 10 s bin.
		s("r0", 5, 0, 0), s("r0", 15, 1000, 600),
		// r1: a restart at 12 s: counts since the restart (50 queries, 10 hits) go
		// to the second bin.
		s("r1", 0, 500, 100), s("r1", 12, 50, 10),
		// r2: a missing counter: the interval is skipped.
		s("r2", 0, 0, 0), s("r2", 8, 999, math.NaN()),
	}
	got := PromptRates(series, nil, 10*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d bins, want 2", len(got))
	}
	want := []PromptRate{
		// bin 0: r0 500 q / 300 h; r1's 12 s interval, 10 of 12 s in bin 0.
		{Start: 0, End: sec(10), Cached: (300 + 10*10.0/12) / 10, Computed: (500 + 50*10.0/12 - 300 - 10*10.0/12) / 10},
		{Start: sec(10), End: sec(20), Cached: (300 + 10*2.0/12) / 10, Computed: (500 + 50*2.0/12 - 300 - 10*2.0/12) / 10},
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Start != w.Start || g.End != w.End || !approx(g.Cached, w.Cached) || !approx(g.Computed, w.Computed) {
			t.Errorf("bin %d: got %+v, want %+v", i, g, w)
		}
	}
}

// A llama.cpp replica has no prefix-cache counters: its computed tokens come
// from the computed-prompt counter (prompt_computed_tokens), its cached ones
// from the responses' usage at each request's end.
func TestPromptRatesWithoutPrefixCounters(t *testing.T) {
	nan := math.NaN()
	s := func(t, computed float64) loadgen.SeriesSample {
		return loadgen.SeriesSample{Variant: "on", Replica: "r0", T: sec(t), PrefixQueries: nan, PrefixHits: nan, PromptComputedTokens: computed}
	}
	series := []loadgen.SeriesSample{s(0, 100), s(20, 500)} // 400 computed over 0..20 s
	cachedTurn := okTurn("on", 0, 1, "r0", 10, 1, 15, 10)
	cachedTurn.CachedTokens = 300
	other := cachedTurn
	other.Replica = "r9" // not a replica of the series: ignored
	got := PromptRates(series, []loadgen.Result{cachedTurn, other}, 10*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d bins, want 3", len(got))
	}
	want := [][2]float64{{0, 20}, {30, 20}, {0, 0}} // tokens/s: cached, computed
	for i, w := range want {
		if !approx(got[i].Cached, w[0]) || !approx(got[i].Computed, w[1]) {
			t.Errorf("bin %d: cached %v computed %v, want %v %v", i, got[i].Cached, got[i].Computed, w[0], w[1])
		}
	}
}
