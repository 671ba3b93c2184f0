package report

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// File names inside a results directory (docs/DESIGN-NOTES.md, "Results directory"),
// as loadgen writes them.
const (
	ManifestFile = loadgen.ManifestFile // loadgen.Manifest
	TurnsFile    = loadgen.TurnsFile    // one loadgen.Result per line
	SeriesFile   = loadgen.SeriesFile   // one loadgen.SeriesSample per row
)

// seriesHeader names the series.csv columns report needs (loadgen.SeriesHeader).
var seriesHeader = loadgen.SeriesHeader

// Run is the content of one results directory as report reads it.
type Run struct {
	Dir      string
	Manifest loadgen.Manifest
	Results  []loadgen.Result       // turns.jsonl in file order
	Series   []loadgen.SeriesSample // series.csv in file order; nil if the file is absent
}

// Load reads manifest.json, turns.jsonl and series.csv from dir. It never runs
// anything. manifest.json and turns.jsonl must exist; a missing series.csv gives a
// Run without samples (the series columns then read "n/a", never 0). Errors name the
// file and, for turns.jsonl and series.csv, the line.
func Load(dir string) (*Run, error) {
	run := &Run{Dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	if err := json.Unmarshal(b, &run.Manifest); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", ManifestFile, err)
	}

	f, err := os.Open(filepath.Join(dir, TurnsFile))
	if err != nil {
		return nil, fmt.Errorf("reading turns: %w", err)
	}
	run.Results, err = readTurns(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", TurnsFile, err)
	}

	f, err = os.Open(filepath.Join(dir, SeriesFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		// No series: series columns become NaN ("n/a").
	case err != nil:
		return nil, fmt.Errorf("reading series: %w", err)
	default:
		run.Series, err = readSeries(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", SeriesFile, err)
		}
	}
	return run, nil
}

// readTurns decodes JSON lines into Results. Blank lines are skipped.
func readTurns(r io.Reader) ([]loadgen.Result, error) {
	var out []loadgen.Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var res loadgen.Result
		if err := json.Unmarshal([]byte(text), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, res)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}

// maxSeriesSeconds bounds t_s so that it converts to a time.Duration (about 292
// years) without overflow.
const maxSeriesSeconds = 9e9

// readSeries decodes series.csv. Columns are found by header name, so extra columns
// are ignored and order does not matter; a missing column is an error. A series the
// scrape did not find reads as NaN, never as 0: loadgen writes "NaN", and an empty
// cell is accepted too.
func readSeries(r io.Reader) ([]loadgen.SeriesSample, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("empty file: no header")
	}
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := make(map[string]int, len(header))
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, h := range seriesHeader {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("header: missing column %q", h)
		}
	}
	var out []loadgen.SeriesSample
	line := 1
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		line++
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if len(rec) < len(header) {
			return nil, fmt.Errorf("line %d: %d fields, header has %d", line, len(rec), len(header))
		}
		var perr error
		num := func(name string) float64 {
			s := strings.TrimSpace(rec[col[name]])
			if s == "" {
				return math.NaN()
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("line %d: column %s: %w", line, name, err)
			}
			return v
		}
		ts := num("t_s")
		s := loadgen.SeriesSample{
			Variant:          rec[col["variant"]],
			Replica:          rec[col["replica"]],
			Running:          num("running"),
			Waiting:          num("waiting"),
			KVUsage:          num("kv_usage"),
			PrefixQueries:    num("prefix_queries"),
			PrefixHits:       num("prefix_hits"),
			PromptTokens:     num("prompt_tokens"),
			GenerationTokens: num("generation_tokens"),
			Preemptions:      num("preemptions"),
		}
		if perr != nil {
			return nil, perr
		}
		if math.IsNaN(ts) {
			return nil, fmt.Errorf("line %d: column t_s: empty", line)
		}
		if math.IsInf(ts, 0) || math.Abs(ts) > maxSeriesSeconds {
			return nil, fmt.Errorf("line %d: column t_s: %v out of range", line, ts)
		}
		s.T = time.Duration(math.Round(ts * float64(time.Second)))
		out = append(out, s)
	}
}
