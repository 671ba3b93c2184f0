package agent

import (
	"math"
	"testing"
)

// Compare sums up each side by nearest-rank p50, p90 and max; a ratio is
// synth / trace, NaN where the trace has none; Add over trees gives what
// Measure does.
func TestCompareRows(t *testing.T) {
	var trees []*Tree
	var added Figures
	for i := range 20 {
		tr := Generate(SynthParams{}, 3, i)
		trees = append(trees, tr)
		added.Add(tr)
	}
	synth := Measure(trees)
	if len(added.Prompt) != len(synth.Prompt) || added.Spawns != synth.Spawns || added.Sessions != 20 {
		t.Fatalf("Add: %d prompts, %d spawns; Measure %d, %d", len(added.Prompt), added.Spawns, len(synth.Prompt), synth.Spawns)
	}
	trace := Figures{Sessions: 4, ParentCalls: []float64{1, 2, 3, 10}, Prompt: make([]float64, 8), Spawns: 2}
	rows := Compare(&trace, &added)
	if len(rows) != len(FigureDefs()) {
		t.Fatalf("%d rows, %d defs", len(rows), len(FigureDefs()))
	}
	by := map[string]FigureRow{}
	for _, r := range rows {
		by[r.Name] = r
	}
	calls := by["calls per session"]
	if calls.Trace.P50 != 2 || calls.Trace.P90 != 10 || calls.Trace.Max != 10 || calls.Trace.N != 4 {
		t.Errorf("calls per session %+v, want p50 2, p90 10, max 10 of 4", calls.Trace)
	}
	if p50, _, _ := calls.Ratios(); p50 != calls.Synth.P50/2 {
		t.Errorf("ratio p50 %g, want %g / 2", p50, calls.Synth.P50)
	}
	if s := by["spawn share"]; s.Trace.Value != 0.25 || s.Trace.N != 8 || !s.Single {
		t.Errorf("spawn share %+v, want 2 of 8", s.Trace)
	}
	if _, _, v := by["spawn share"].Ratios(); v != float64(added.Spawns)/float64(len(added.Prompt))/0.25 {
		t.Errorf("spawn share ratio %g", v)
	}
	if o := by["output"]; !math.IsNaN(o.Trace.P50) || o.Trace.N != 0 {
		t.Errorf("output of no calls %+v, want NaN", o.Trace)
	} else if p50, p90, m := o.Ratios(); !math.IsNaN(p50) || !math.IsNaN(p90) || !math.IsNaN(m) {
		t.Errorf("ratios over no trace figure: %g %g %g, want NaN", p50, p90, m)
	}
}
