package report

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/lmwarden/warden/internal/atomicfile"
)

// Generate reads the results directory dir (manifest.json, turns.jsonl,
// series.csv; it never runs anything), computes the stage summaries and writes,
// each atomically (temporary file + rename), into dir:
//
//	results.csv         one row per variant x stage (CSVColumns)
//	turns_by_index.csv  one row per variant x stage x turn index (TurnsCSVColumns)
//	results.json        summaries (with their by-turn breakdown) and off -> on deltas (ResultsJSON)
//	summary.md          reference-style table and details (SummaryMarkdown)
//	trees.csv           agent-session replays only: one row per session tree (TreesCSVColumns)
//	*.png               figures (WritePlots)
//
// It then prints the reference-style table to w. Missing data never fails the
// report: it shows as "n/a" with a note. Errors come from reading the directory,
// an empty manifest, drawing or writing files.
func Generate(dir string, w io.Writer) error {
	run, err := Load(dir)
	if err != nil {
		return fmt.Errorf("generating report for %s: %w", dir, err)
	}
	sums, err := Summarize(run)
	if err != nil {
		return fmt.Errorf("generating report for %s: %w", dir, err)
	}
	agents, trees := SummarizeAgents(run)
	figures, err := WritePlots(dir, run, sums)
	if err != nil {
		return fmt.Errorf("generating report for %s: %w", dir, err)
	}
	csvData, err := ResultsCSV(sums)
	if err != nil {
		return fmt.Errorf("generating report for %s: %w", dir, err)
	}
	turnsData, err := TurnsByIndexCSV(sums)
	if err != nil {
		return fmt.Errorf("generating report for %s: %w", dir, err)
	}
	jsonData, err := ResultsJSON(&run.Manifest, sums)
	if err != nil {
		return fmt.Errorf("generating report for %s: %w", dir, err)
	}
	md := SummaryMarkdown(&run.Manifest, sums, agents, figures)
	files := []struct {
		name string
		data []byte
	}{{ResultsCSVFile, csvData}, {TurnsByIndexCSVFile, turnsData}, {ResultsJSONFile, jsonData}, {SummaryMDFile, md}}
	if len(run.Manifest.AgentTraces) > 0 {
		treesData, err := TreesCSV(trees)
		if err != nil {
			return fmt.Errorf("generating report for %s: %w", dir, err)
		}
		files = append(files, struct {
			name string
			data []byte
		}{TreesCSVFile, treesData})
	}
	for _, f := range files {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.data); err != nil {
			return fmt.Errorf("generating report for %s: %w", dir, err)
		}
	}
	return WriteTable(w, &run.Manifest, sums, agents)
}
