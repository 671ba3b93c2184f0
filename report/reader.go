package report

import (
	"github.com/lmwarden/warden/loadgen"
)

// File names inside a results directory (docs/DESIGN-NOTES.md, "Results directory"),
// as loadgen writes them.
const (
	ManifestFile = loadgen.ManifestFile // loadgen.Manifest
	TurnsFile    = loadgen.TurnsFile    // one loadgen.Result per line
	SeriesFile   = loadgen.SeriesFile   // one loadgen.SeriesSample per row
)

// Run is the content of one results directory as report reads it.
type Run struct {
	Dir      string
	Manifest loadgen.Manifest
	Results  []loadgen.Result       // turns.jsonl in file order
	Series   []loadgen.SeriesSample // series.csv in file order; nil if the file is absent
}

// Load reads manifest.json, turns.jsonl and series.csv from dir with
// loadgen.ReadResults (the one reader of the format). It never runs anything.
// manifest.json and turns.jsonl must exist; a missing series.csv gives a Run
// without samples (the series columns then read "n/a", never 0). Errors name the
// file and, for turns.jsonl and series.csv, the line.
func Load(dir string) (*Run, error) {
	m, results, series, err := loadgen.ReadResults(dir)
	if err != nil {
		return nil, err
	}
	return &Run{Dir: dir, Manifest: *m, Results: results, Series: series}, nil
}
