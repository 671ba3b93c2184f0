package report

import (
	"encoding/csv"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// readResultsCSV runs Generate on dir and returns results.csv's header and its
// first data row as a map.
func readResultsCSV(t *testing.T, dir string) map[string]string {
	t.Helper()
	if err := Generate(dir, io.Discard); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	f, err := os.Open(filepath.Join(dir, ResultsCSVFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("results.csv: %d records, %v", len(recs), err)
	}
	row := map[string]string{}
	for i, h := range recs[0] {
		row[h] = recs[1][i]
	}
	return row
}

// An OK turn without a single content, reasoning or tool-call delta (FirstToken
// 0) has no TTFB: it is counted apart in results.csv and said in summary.md's
// notes, instead of vanishing from TTFB while counting as an OK turn.
func TestTurnsWithNoOutputAreCountedApart(t *testing.T) {
	m := &loadgen.Manifest{
		RunID: "no-output", Scenario: testScenario([]int{2}, time.Minute), Replicas: []string{"r0"},
		Variants: []loadgen.Variant{{Name: "off", Complete: true, Stages: []loadgen.StageWindow{
			{Sessions: 2, Start: 0, End: sec(60), Complete: true, Started: 4, Completed: 4},
		}}},
	}
	var results []loadgen.Result
	for i := range 4 {
		r := okTurn("off", int64(i), 0, "r0", float64(10*i), 1, float64(10*i+5), 50)
		if i >= 1 { // three of four OK turns stream nothing
			r.FirstEvent, r.FirstToken, r.LastToken, r.OutputTokens = 0, 0, 0, 0
		}
		results = append(results, r)
	}
	dir := t.TempDir()
	writeRunDir(t, dir, m, results, nil)
	row := readResultsCSV(t, dir)
	if row["turns_ok"] != "4" || row["turns_no_output"] != "3" {
		t.Errorf("turns_ok %q, turns_no_output %q; want 4, 3 (header %v)", row["turns_ok"], row["turns_no_output"], slices.Sorted(maps.Keys(row)))
	}
	md, err := os.ReadFile(filepath.Join(dir, SummaryMDFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "3 of 4 OK turns (75.0 %) produced no output token") {
		t.Errorf("summary.md has no note on the turns without output:\n%s", md)
	}
}
