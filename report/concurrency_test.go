package report

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// Four configured sessions whose turns are in flight a quarter of the window
// (failed turns backing off, say) held one turn in flight on average: results.csv
// says so client side (from turns.jsonl) and server side (running + waiting from
// series.csv), and summary.md warns that the stage ran below the level it was
// configured for.
func TestAchievedConcurrencyIsReportedAndWarned(t *testing.T) {
	m := &loadgen.Manifest{
		RunID: "concurrency", Scenario: testScenario([]int{4}, time.Minute), Replicas: []string{"r0", "r1"},
		Variants: []loadgen.Variant{{Name: "off", Complete: true, Stages: []loadgen.StageWindow{
			{Sessions: 4, Start: 0, End: sec(60), Complete: true, Started: 4, Completed: 4},
		}}},
	}
	var results []loadgen.Result
	for i := range 4 { // each in flight over [10i, 10i+15): 4 x 15 s in a 60 s window
		results = append(results, okTurn("off", int64(i), 0, "r0", float64(10*i), 1, float64(10*i+15), 50))
	}
	var series []loadgen.SeriesSample
	for ts := 0.0; ts < 60; ts++ {
		for _, rep := range []string{"r0", "r1"} {
			s := sample(rep, ts, 0, 0, 0)
			if rep == "r0" {
				s.Running, s.Waiting = 1, 0.5
			}
			series = append(series, s)
		}
	}
	dir := t.TempDir()
	writeRunDir(t, dir, m, results, series)
	row := readResultsCSV(t, dir)
	if row["turns_in_flight_mean"] != "1.0000" || row["concurrency_pct"] != "25.0000" || row["engine_requests_mean"] != "1.5000" {
		t.Errorf("turns_in_flight_mean %q, concurrency_pct %q, engine_requests_mean %q; want 1.0000, 25.0000, 1.5000",
			row["turns_in_flight_mean"], row["concurrency_pct"], row["engine_requests_mean"])
	}
	md, err := os.ReadFile(filepath.Join(dir, SummaryMDFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "1.00 turns in flight on average, 25 % of the 4.00 the loop can hold (below 90 %)") {
		t.Errorf("summary.md has no achieved-concurrency warning:\n%s", md)
	}
}

// A stream that hangs until it times out holds its session on the wire: the
// target's turn time counts it, so the stage reads 100 %, not 300 % (the old
// target took the turn time from OK turns only). A turn still hanging at the
// window's end is not in the turn time: the stage reads above 100 % and gets
// a note saying why.
func TestConcurrencyWithHungStreams(t *testing.T) {
	sc := testScenario([]int{2}, time.Minute)
	sc.ThinkTime = 10 * time.Second
	window := loadgen.StageWindow{Sessions: 2, Start: 0, End: sec(60), Complete: true, Started: 6, Completed: 5, Failed: 1}
	m := &loadgen.Manifest{RunID: "hung", Scenario: sc, Replicas: []string{"r0"},
		Variants: []loadgen.Variant{{Name: "on", Affinity: true, Stages: []loadgen.StageWindow{window}}}}
	var results []loadgen.Result
	for i := range 5 { // session 0: 2 s turns, 10 s think: 10 s on the wire
		results = append(results, okTurn("on", 0, i, "r0", float64(12*i), 0.5, float64(12*i+2), 10))
	}
	hung := okTurn("on", 1, 0, "r0", 0, 0, 50, 0) // session 1: one stream hung 50 s, then timed out
	hung.Status, hung.Err, hung.FirstToken = 200, "timeout", 0
	results = append(results, hung)
	s := loadSummaries(t, m, results, nil)[0]
	// In flight: (10 + 50) s / 60 s = 1.0; turn time (10 + 50) / 6 = 10 s, target 2 x 10 / 20 = 1.0.
	if c := s.Concurrency; !approx(c.TurnsInFlightMean, 1) || !approx(c.Target, 1) || !approx(c.Pct, 100) {
		t.Errorf("in flight %v, target %v, pct %v; want 1, 1, 100", c.TurnsInFlightMean, c.Target, c.Pct)
	}
	for _, n := range s.Notes {
		if strings.Contains(n, "concurrency_pct") {
			t.Errorf("unexpected note: %s", n)
		}
	}

	// Session 1's stream still hangs at the window's end: in flight, no record.
	window.Failed, window.Started, window.InFlight, window.UnrecordedInFlight = 0, 6, 1, 60*time.Second
	m.Variants[0].Stages[0] = window
	s = loadSummaries(t, m, results[:5], nil)[0]
	if s.Concurrency.Pct <= MaxConcurrencyPct {
		t.Fatalf("pct %v: the fixture should read above %v", s.Concurrency.Pct, MaxConcurrencyPct)
	}
	if !slices.ContainsFunc(s.Notes, func(n string) bool {
		return strings.Contains(n, "above 110 %") && strings.Contains(n, "turns still in flight at the window's end (1")
	}) {
		t.Errorf("no note explaining concurrency above 100 %%: %q", s.Notes)
	}
}
