package loadgen

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/atomicfile"
)

// Results directory files (DESIGN-NOTES "Results directory").
const (
	ManifestFile = "manifest.json"
	TurnsFile    = "turns.jsonl"
	SeriesFile   = "series.csv"
)

// SeriesHeader is the header row of series.csv. Columns added later are
// appended at the end and are optional when read (optionalSeriesColumns).
var SeriesHeader = []string{"variant", "t_s", "replica", "running", "waiting", "kv_usage",
	"prefix_queries", "prefix_hits", "prompt_tokens", "generation_tokens", "preemptions",
	"prompt_computed_tokens"}

// optionalSeriesColumns are the SeriesHeader columns a series.csv written
// before them lacks: read as NaN (n/a), never 0.
var optionalSeriesColumns = []string{"prompt_computed_tokens"}

// partialSuffix marks files still being written; they are renamed into place by Close.
const partialSuffix = ".partial"

// ResultsWriter writes a results directory: turns and series are appended as they
// come to "<name>.partial" files, and Close renames them into place and writes
// manifest.json atomically (temp file + rename), so a reader never sees a
// half-written file under its final name. Safe for concurrent use.
type ResultsWriter struct {
	dir string

	mu        sync.Mutex
	turnsF    *os.File
	turns     *bufio.Writer
	seriesF   *os.File
	seriesBuf *bufio.Writer
	series    *csv.Writer
	err       error
	closed    bool
}

// CreateResults creates dir (and parents) and opens its turn and series files.
func CreateResults(dir string) (*ResultsWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating results dir: %w", err)
	}
	w := &ResultsWriter{dir: dir}
	var err error
	if w.turnsF, err = os.Create(filepath.Join(dir, TurnsFile+partialSuffix)); err != nil {
		return nil, fmt.Errorf("creating results dir: %w", err)
	}
	if w.seriesF, err = os.Create(filepath.Join(dir, SeriesFile+partialSuffix)); err != nil {
		w.turnsF.Close()
		return nil, fmt.Errorf("creating results dir: %w", err)
	}
	w.turns = bufio.NewWriterSize(w.turnsF, 64<<10)
	w.seriesBuf = bufio.NewWriterSize(w.seriesF, 64<<10)
	w.series = csv.NewWriter(w.seriesBuf)
	if err := w.series.Write(SeriesHeader); err != nil {
		w.abort()
		return nil, fmt.Errorf("writing %s header: %w", SeriesFile, err)
	}
	return w, nil
}

// Dir returns the directory written.
func (w *ResultsWriter) Dir() string { return w.dir }

// WriteResult appends one turn to turns.jsonl.
func (w *ResultsWriter) WriteResult(r *Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding turn: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.closed {
		return w.stateErr()
	}
	if _, err := w.turns.Write(append(b, '\n')); err != nil {
		w.err = fmt.Errorf("writing %s: %w", TurnsFile, err)
	}
	return w.err
}

// WriteSample appends one row to series.csv (t_s in simulated seconds).
func (w *ResultsWriter) WriteSample(s SeriesSample) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.closed {
		return w.stateErr()
	}
	if err := w.series.Write(sampleRow(s)); err != nil {
		w.err = fmt.Errorf("writing %s: %w", SeriesFile, err)
	}
	return w.err
}

func (w *ResultsWriter) stateErr() error {
	if w.err != nil {
		return w.err
	}
	return errors.New("results writer is closed")
}

// Flush pushes buffered rows to the partial files (for a crash, not for readers).
func (w *ResultsWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.stateErr()
	}
	return w.flushLocked()
}

func (w *ResultsWriter) flushLocked() error {
	if w.err != nil {
		return w.err
	}
	w.series.Flush()
	if err := w.series.Error(); err != nil {
		w.err = fmt.Errorf("writing %s: %w", SeriesFile, err)
	} else if err := w.seriesBuf.Flush(); err != nil {
		w.err = fmt.Errorf("writing %s: %w", SeriesFile, err)
	} else if err := w.turns.Flush(); err != nil {
		w.err = fmt.Errorf("writing %s: %w", TurnsFile, err)
	}
	return w.err
}

// Close flushes and syncs the turn and series files, renames them into place and
// writes m as manifest.json (atomically). After Close the writer accepts nothing.
func (w *ResultsWriter) Close(m *Manifest) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.stateErr()
	}
	w.closed = true
	err := w.flushLocked()
	for _, f := range []*os.File{w.turnsF, w.seriesF} {
		if err == nil {
			if e := f.Sync(); e != nil {
				err = fmt.Errorf("syncing %s: %w", f.Name(), e)
			}
		}
		if e := f.Close(); e != nil && err == nil {
			err = fmt.Errorf("closing %s: %w", f.Name(), e)
		}
	}
	if err != nil {
		w.err = err
		return err
	}
	for _, name := range []string{TurnsFile, SeriesFile} {
		p := filepath.Join(w.dir, name)
		if e := os.Rename(p+partialSuffix, p); e != nil {
			w.err = fmt.Errorf("renaming %s into place: %w", name, e)
			return w.err
		}
	}
	if m != nil {
		if e := WriteManifest(w.dir, m); e != nil {
			w.err = e
			return e
		}
	}
	return nil
}

func (w *ResultsWriter) abort() {
	w.turnsF.Close()
	w.seriesF.Close()
}

// WriteManifest writes m to dir/manifest.json atomically (temp file, sync, rename).
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}
	return atomicfile.Write(filepath.Join(dir, ManifestFile), append(b, '\n'))
}

// formatFloat writes a series value; NaN (a series the server did not export) is
// written as "NaN" so it can never read as 0 (docs/bench.md, failure case 4).
func formatFloat(v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func sampleRow(s SeriesSample) []string {
	return []string{
		s.Variant,
		strconv.FormatFloat(s.T.Seconds(), 'f', 6, 64),
		s.Replica,
		formatFloat(s.Running),
		formatFloat(s.Waiting),
		formatFloat(s.KVUsage),
		formatFloat(s.PrefixQueries),
		formatFloat(s.PrefixHits),
		formatFloat(s.PromptTokens),
		formatFloat(s.GenerationTokens),
		formatFloat(s.Preemptions),
		formatFloat(s.PromptComputedTokens),
	}
}

// ReadResults reads a results directory written by ResultsWriter (or by the virtual
// world in the same format): the manifest, every turn, and every series sample.
// manifest.json and turns.jsonl must exist; a missing series.csv gives nil samples
// (callers show the series columns as n/a, never 0). Errors name the file and, for
// turns.jsonl and series.csv, the line.
func ReadResults(dir string) (*Manifest, []Result, []SeriesSample, error) {
	mb, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading results: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, nil, nil, fmt.Errorf("reading results: decoding %s: %w", ManifestFile, err)
	}
	f, err := os.Open(filepath.Join(dir, TurnsFile))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading results: %w", err)
	}
	turns, err := ReadTurns(f)
	f.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading results: decoding %s: %w", TurnsFile, err)
	}
	var series []SeriesSample
	f, err = os.Open(filepath.Join(dir, SeriesFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, nil, fmt.Errorf("reading results: %w", err)
	default:
		series, err = ReadSeries(f)
		f.Close()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("reading results: decoding %s: %w", SeriesFile, err)
		}
	}
	return &m, turns, series, nil
}

// ReadTurns decodes turns.jsonl (one Result per line). Blank lines are skipped.
func ReadTurns(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var res Result
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

// ReadSeries decodes series.csv. Columns are found by header name, so extra columns
// are ignored and order does not matter; a missing column is an error. A series the
// scrape did not find reads as NaN, never as 0: loadgen writes "NaN", and an empty
// cell is accepted too.
func ReadSeries(r io.Reader) ([]SeriesSample, error) {
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
	for _, h := range SeriesHeader {
		if _, ok := col[h]; !ok && !slices.Contains(optionalSeriesColumns, h) {
			return nil, fmt.Errorf("header: missing column %q", h)
		}
	}
	var out []SeriesSample
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
			i, ok := col[name]
			if !ok {
				return math.NaN() // an optional column the file lacks
			}
			s := strings.TrimSpace(rec[i])
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
		s := SeriesSample{
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

			PromptComputedTokens: num("prompt_computed_tokens"),
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
