package loadgen

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestResultsRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results", "run-1")
	w, err := CreateResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	results := []Result{
		{Variant: "off", Session: 0, SessionKey: "k0", Turn: 0, Intended: time.Second, Sent: time.Second + 3, Headers: 2 * time.Second,
			FirstEvent: 3 * time.Second, FirstToken: 4 * time.Second, LastToken: 5 * time.Second, Done: 6 * time.Second,
			Status: 200, PromptTokens: 100, OutputTokens: 8, CachedTokens: -1, NominalPromptTokens: 90, Replica: "r0/rank1"},
		{Variant: "on", Session: 3, SessionKey: "k3", Turn: 5, LastTurn: true, Status: 200, Err: "stream error event: boom", PromptTokens: -1, CachedTokens: -1},
	}
	samples := []SeriesSample{
		{Variant: "off", T: 1500 * time.Millisecond, Replica: "r0", Running: 2, Waiting: 1, KVUsage: 0.25,
			PrefixQueries: 1e6, PrefixHits: 8e5, PromptTokens: 1e6, GenerationTokens: 4096, Preemptions: 0, PromptComputedTokens: 2e5},
		// A replica lacking a series: NaN, never 0 (docs/bench.md, failure case 4). A name with a comma is quoted.
		{Variant: "on", T: 2 * time.Second, Replica: "r,1", Running: 0, KVUsage: 0.5, PrefixQueries: math.NaN(), PrefixHits: math.NaN(), Preemptions: math.NaN(), PromptComputedTokens: math.NaN()},
	}
	for i := range results {
		if err := w.WriteResult(&results[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range samples {
		if err := w.WriteSample(s); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing under its final name before Close.
	if _, err := os.Stat(filepath.Join(dir, TurnsFile)); !os.IsNotExist(err) {
		t.Errorf("turns.jsonl visible before Close: %v", err)
	}
	m := &Manifest{RunID: "run-1", Mode: "http", Scenario: DefaultScenario(), Seed: 1, Speed: 6,
		Variants: []Variant{{Name: "off", Stages: []StageWindow{{Sessions: 4, Start: time.Second, End: 181 * time.Second, Started: 3, Completed: 2, InFlight: 1}}}}}
	if err := w.Close(m); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteResult(&results[0]); err == nil {
		t.Error("write after Close accepted")
	}
	gm, gr, gs, err := ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gr, results) {
		t.Errorf("turns differ:\n%+v\n%+v", gr, results)
	}
	if gm.RunID != "run-1" || gm.Speed != 6 || !reflect.DeepEqual(gm.Variants, m.Variants) ||
		gm.Scenario.StageDuration != 3*time.Minute || !reflect.DeepEqual(gm.Scenario.Stages, m.Scenario.Stages) {
		t.Errorf("manifest differs: %+v", gm)
	}
	if len(gs) != 2 || !reflect.DeepEqual(gs[0], samples[0]) || gs[1].Replica != "r,1" || !math.IsNaN(gs[1].PrefixHits) || gs[1].KVUsage != 0.5 {
		t.Errorf("series differ: %+v", gs)
	}
	head, _ := os.ReadFile(filepath.Join(dir, SeriesFile))
	if first, _, _ := strings.Cut(string(head), "\n"); first != "variant,t_s,replica,running,waiting,kv_usage,prefix_queries,prefix_hits,prompt_tokens,generation_tokens,preemptions,prompt_computed_tokens" {
		t.Errorf("series.csv header %q", first)
	}
}

// A series.csv written before prompt_computed_tokens was appended reads, with
// that column NaN (n/a), never 0.
func TestReadSeriesWithoutPromptComputed(t *testing.T) {
	in := "variant,t_s,replica,running,waiting,kv_usage,prefix_queries,prefix_hits,prompt_tokens,generation_tokens,preemptions\n" +
		"off,1.5,r0,2,1,0.25,100,80,100,10,0\n"
	got, err := ReadSeries(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PrefixHits != 80 || !math.IsNaN(got[0].PromptComputedTokens) {
		t.Errorf("samples %+v: want prefix hits 80, prompt computed NaN", got)
	}
}

func TestReadResultsRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := ReadResults(dir); err == nil {
		t.Fatal("empty dir accepted")
	}
	w, _ := CreateResults(dir)
	w.Close(&Manifest{RunID: "x"})
	os.WriteFile(filepath.Join(dir, SeriesFile), []byte("variant,t,replica\n"), 0o644)
	if _, _, _, err := ReadResults(dir); err == nil {
		t.Error("bad series header accepted")
	}
}
