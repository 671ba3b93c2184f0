package report

import (
	"os"
	"path/filepath"
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
