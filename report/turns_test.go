package report

import (
	"bytes"
	"encoding/csv"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// byTurnFixture: one variant, two stages; the second has a 10 s warm-up, so its
// measured window is [70 s, 120 s).
func byTurnFixture() (*loadgen.Manifest, []loadgen.Result) {
	m := &loadgen.Manifest{
		RunID: "by-turn", Scenario: testScenario([]int{4, 4}, time.Minute), Replicas: []string{"r0"},
		Variants: []loadgen.Variant{{Name: "on", Affinity: true, Stages: []loadgen.StageWindow{
			{Sessions: 4, Start: 0, End: sec(60), Complete: true},
			{Sessions: 4, Start: sec(60), End: sec(120), Warmup: sec(10), Complete: true},
		}}},
	}
	turn := func(session int64, turn int, sent, ttfb, done float64, prompt, cached int) loadgen.Result {
		r := okTurn("on", session, turn, "r0", sent, ttfb, done, 10)
		r.PromptTokens, r.CachedTokens = prompt, cached
		return r
	}
	failed := func(r loadgen.Result) loadgen.Result {
		r.Status, r.Err = 502, "upstream reset"
		return r
	}
	side := turn(0, 1, 16, 40, 26, 500, 500)
	side.Side = true
	noToken := turn(0, 2, 30, 0, 40, 1500, 1500)
	noToken.FirstToken, noToken.FirstEvent = 0, 0
	return m, []loadgen.Result{
		// Stage 0, turn 0: two OK turns (TTFB 1 and 3 s) and a failed one whose
		// stream had started (a 50 s TTFB that must not count).
		turn(0, 0, 0, 1, 10, 1000, 0),
		turn(1, 0, 0, 3, 12, 1000, 0),
		failed(turn(2, 0, 0, 50, 55, 1000, 0)),
		// Stage 0, turn 1: cached share is sum/sum, 900 of 4000 = 22.5 % (the mean
		// of per-turn ratios would be 45 %); the turn without cached tokens in its
		// usage counts for the prompt mean only.
		turn(0, 1, 15, 2, 25, 1000, 900),
		turn(1, 1, 15, 4, 30, 3000, 0),
		turn(3, 1, 20, 6, 35, 2000, -1),
		side, // a side request beside turn 1, with a 40 s TTFB: left out
		// Stage 0, turn 2: OK but no token (e.g. an empty answer): counted, no TTFB.
		noToken,
		// Done exactly at 60 s: stage 1, inside its warm-up; counted nowhere.
		turn(1, 2, 35, 1, 60, 1500, 0),
		// Stage 1: a turn done in the warm-up, one in the window, one after the end.
		turn(0, 3, 50, 1, 65, 1700, 0),
		turn(0, 4, 70, 0.5, 80, 1900, 1800),
		turn(1, 3, 110, 1, 130, 1700, 0),
		// Stage 1, turn 0: only a failed turn: the index is listed, figures n/a.
		failed(turn(4, 0, 80, 0, 90, 1000, 0)),
	}
}

func TestSummarizeByTurn(t *testing.T) {
	m, results := byTurnFixture()
	sums := loadSummaries(t, m, results, nil)
	if len(sums) != 2 {
		t.Fatalf("got %d summaries, want 2", len(sums))
	}
	nan := math.NaN()
	t.Run("indices", func(t *testing.T) {
		for stage, want := range [][]int{{0, 1, 2}, {0, 4}} {
			var got []int
			ok, failed := 0, 0
			for _, ts := range sums[stage].ByTurn {
				got = append(got, ts.Turn)
				ok += ts.TurnsOK
				failed += ts.TurnsFailed
			}
			if !slices.Equal(got, want) {
				t.Errorf("stage %d: turn indices %v, want %v", stage, got, want)
			}
			// The breakdown covers exactly the turns of the stage's summary.
			if s := sums[stage]; ok != s.TurnsOK || failed != s.TurnsFailed {
				t.Errorf("stage %d: by turn %d ok / %d failed, summary %d / %d", stage, ok, failed, s.TurnsOK, s.TurnsFailed)
			}
		}
	})
	for _, tc := range []struct {
		name  string
		stage int
		want  TurnStats
	}{
		// Nearest rank over {1, 3}: p50 1, p95 3.
		{"failed turn counted, not in TTFB", 0, TurnStats{Turn: 0, TurnsOK: 2, TurnsFailed: 1,
			TTFBMeanS: 2, TTFBP50S: 1, TTFBP95S: 3, PromptTokensMean: 1000, CachedTokensMean: 0, UsageCachedPct: 0}},
		{"side request left out, cached sum over sum", 0, TurnStats{Turn: 1, TurnsOK: 3,
			TTFBMeanS: 4, TTFBP50S: 4, TTFBP95S: 6, PromptTokensMean: 2000, CachedTokensMean: 450, UsageCachedPct: 22.5}},
		{"OK turn without a token", 0, TurnStats{Turn: 2, TurnsOK: 1,
			TTFBMeanS: nan, TTFBP50S: nan, TTFBP95S: nan, PromptTokensMean: 1500, CachedTokensMean: 1500, UsageCachedPct: 100}},
		{"only a failed turn", 1, TurnStats{Turn: 0, TurnsFailed: 1,
			TTFBMeanS: nan, TTFBP50S: nan, TTFBP95S: nan, PromptTokensMean: nan, CachedTokensMean: nan, UsageCachedPct: nan}},
		// Turns 3 (warm-up, after the end) and 2 (done at the boundary) are absent.
		{"window after warm-up", 1, TurnStats{Turn: 4, TurnsOK: 1,
			TTFBMeanS: 0.5, TTFBP50S: 0.5, TTFBP95S: 0.5, PromptTokensMean: 1900, CachedTokensMean: 1800, UsageCachedPct: 100 * 1800.0 / 1900}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := slices.IndexFunc(sums[tc.stage].ByTurn, func(ts TurnStats) bool { return ts.Turn == tc.want.Turn })
			if i < 0 {
				t.Fatalf("stage %d has no turn %d: %+v", tc.stage, tc.want.Turn, sums[tc.stage].ByTurn)
			}
			got, want := sums[tc.stage].ByTurn[i], tc.want
			same := func(g, w float64, close func(float64, float64) bool) bool {
				return math.IsNaN(g) && math.IsNaN(w) || !math.IsNaN(w) && close(g, w)
			}
			if got.TurnsOK != want.TurnsOK || got.TurnsFailed != want.TurnsFailed ||
				!same(got.TTFBMeanS, want.TTFBMeanS, approx) ||
				!same(got.TTFBP50S, want.TTFBP50S, hdrClose) || !same(got.TTFBP95S, want.TTFBP95S, hdrClose) ||
				!same(got.PromptTokensMean, want.PromptTokensMean, approx) ||
				!same(got.CachedTokensMean, want.CachedTokensMean, approx) ||
				!same(got.UsageCachedPct, want.UsageCachedPct, approx) {
				t.Errorf("stage %d turn %d:\n got %+v\nwant %+v", tc.stage, want.Turn, got, want)
			}
		})
	}
}

// turns_by_index.csv has one row per stage and turn index with empty cells for
// NaN; summary.md's table lines the variants up per stage and turn, 0 turns and
// n/a where a variant has no turn of an index another variant has.
func TestTurnsByIndexOutput(t *testing.T) {
	m, results := byTurnFixture()
	sums := loadSummaries(t, m, results, nil)
	b, err := TurnsByIndexCSV(sums)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	want := [][]string{
		TurnsCSVColumns,
		{"on", "0", "4", "0", "2", "1", "2", "1", "3", "1000", "0", "0"},
		{"on", "0", "4", "1", "3", "0", "4", "4", "6", "2000", "450", "22.5"},
		{"on", "0", "4", "2", "1", "0", "", "", "", "1500", "1500", "100"},
		{"on", "1", "4", "0", "0", "1", "", "", "", "", "", ""},
		{"on", "1", "4", "4", "1", "0", "0.5", "0.5", "0.5", "1900", "1800", "94.7368"},
	}
	// Numbers within the HDR histogram's 0.1 % (and the 4 decimals written);
	// empty cells (NaN) and names exactly.
	cellOK := func(got, want string) bool {
		g, gerr := strconv.ParseFloat(got, 64)
		w, werr := strconv.ParseFloat(want, 64)
		if gerr != nil || werr != nil {
			return got == want
		}
		return math.Abs(g-w) <= w*1e-3+1e-4
	}
	if len(rows) != len(want) {
		t.Fatalf("turns_by_index.csv has %d lines, want %d:\n%s", len(rows), len(want), b)
	}
	for i := range want {
		if len(rows[i]) != len(want[i]) {
			t.Errorf("line %d: %q, want %q", i+1, rows[i], want[i])
			continue
		}
		for j := range want[i] {
			if !cellOK(rows[i][j], want[i][j]) {
				t.Errorf("line %d, %s = %q, want %q", i+1, TurnsCSVColumns[j], rows[i][j], want[i][j])
			}
		}
	}

	// A second variant ("off") with turn 1 only in stage 0, none in stage 1.
	m.Variants = append([]loadgen.Variant{{Name: "off", Stages: m.Variants[0].Stages}}, m.Variants...)
	results = append(results, okTurn("off", 0, 1, "r0", 10, 2.5, 20, 10))
	sums = loadSummaries(t, m, results, nil)
	md := string(SummaryMarkdown(m, sums, nil, nil))
	for _, row := range []string{
		"| sessions | turn | turns ok | TTFB mean (s) | TTFB p50 (s) | TTFB p95 (s) | prompt tokens | usage cached % |",
		"| 4 | 0 | 0 -> 2 | n/a -> 2.00 | n/a -> 1.00 | n/a -> 3.00 | n/a -> 1,000 | n/a -> 0.0 |",
		"|  | 1 | 1 -> 3 | 2.50 -> 4.00 | 2.50 -> 4.00 | 2.50 -> 6.00 | 1,000 -> 2,000 | n/a -> 22.5 |",
		"|  | 2 | 0 -> 1 | n/a -> n/a | n/a -> n/a | n/a -> n/a | n/a -> 1,500 | n/a -> 100.0 |",
		"| 4 | 0 | 0 -> 0 | n/a -> n/a |",
		"|  | 4 | 0 -> 1 | n/a -> 0.50 |",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("summary.md lacks the row %q:\n%s", row, md)
		}
	}
	if !strings.Contains(md, "## By turn index, off -> on") {
		t.Errorf("summary.md lacks the by-turn heading")
	}
}
