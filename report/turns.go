package report

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/loadgen"
)

// TurnsByIndexCSVFile is the per-turn-index breakdown Generate writes next to
// results.csv (TurnsByIndexCSV).
const TurnsByIndexCSVFile = "turns_by_index.csv"

// TurnStats is the breakdown of one stage of one variant by turn index
// (Result.Turn, 0-based within the session): a session re-sends its whole history
// every turn, so later turns have longer prompts and, with affinity, more of them
// cached. It covers the same turns as the Summary it belongs to (Summary.ByTurn):
// those done in the stage's measured window (Done in [Start+Warmup, End)), side
// requests left out. A value that cannot be computed is NaN.
type TurnStats struct {
	Turn int `json:"turn"` // 0-based turn index within the session

	// Turns of this index done in the window: OK (status 200, no error) and failed.
	TurnsOK     int `json:"turns_ok"`
	TurnsFailed int `json:"turns_failed"`

	// Client-side TTFB (Result.TTFB: Sent to first token) in seconds over the OK
	// turns that produced a token: the arithmetic mean of the exact durations, and
	// the p50 and p95 from an HDR histogram as in Summary.TTFBP50S (microseconds, 3
	// significant digits, nearest rank). NaN when no such turn.
	TTFBMeanS float64 `json:"ttfb_mean_s"`
	TTFBP50S  float64 `json:"ttfb_p50_s"`
	TTFBP95S  float64 `json:"ttfb_p95_s"`

	// PromptTokensMean is the mean server-counted prompt size (usage prompt_tokens)
	// of the OK turns; NaN when none. CachedTokensMean is the mean usage
	// cached_tokens and UsageCachedPct 100 * sum(cached_tokens) /
	// sum(prompt_tokens), both over the OK turns whose usage reported cached tokens
	// (CachedTokens >= 0, as Summary.UsageCachedPct); NaN when none did.
	PromptTokensMean float64 `json:"prompt_tokens_mean"`
	CachedTokensMean float64 `json:"cached_tokens_mean"`
	UsageCachedPct   float64 `json:"usage_cached_pct"`
}

// MarshalJSON writes NaN floats (values that could not be computed) as null.
func (t TurnStats) MarshalJSON() ([]byte, error) { return marshalFinite(t) }

// UnmarshalJSON reads null floats back as NaN.
func (t *TurnStats) UnmarshalJSON(b []byte) error {
	type plain TurnStats
	return unmarshalFinite(b, (*plain)(t))
}

// byTurn computes one TurnStats per turn index present in turns (OK or failed),
// sorted by index. turns are the non-side turns of one stage window.
func byTurn(turns []*loadgen.Result) []TurnStats {
	type acc struct {
		st                      TurnStats
		hist                    *hdrhistogram.Histogram
		ttfbSum                 time.Duration
		promptSum               int64
		cachedSum, cachedPrompt int64
		cachedN                 int
	}
	byIndex := make(map[int]*acc)
	for _, r := range turns {
		a := byIndex[r.Turn]
		if a == nil {
			a = &acc{st: TurnStats{Turn: r.Turn}, hist: newTTFBHistogram()}
			byIndex[r.Turn] = a
		}
		if !r.OK() {
			a.st.TurnsFailed++
			continue
		}
		a.st.TurnsOK++
		a.promptSum += int64(r.PromptTokens)
		if r.CachedTokens >= 0 {
			a.cachedN++
			a.cachedSum += int64(r.CachedTokens)
			a.cachedPrompt += int64(r.PromptTokens)
		}
		if r.TTFB() > 0 {
			a.ttfbSum += r.TTFB()
			recordTTFB(a.hist, r)
		}
	}
	out := make([]TurnStats, 0, len(byIndex))
	nan := math.NaN()
	for _, a := range byIndex {
		st := a.st
		st.TTFBMeanS, st.PromptTokensMean, st.CachedTokensMean = nan, nan, nan
		if n := a.hist.TotalCount(); n > 0 {
			st.TTFBMeanS = a.ttfbSum.Seconds() / float64(n)
		}
		st.TTFBP50S, st.TTFBP95S = quantileS(a.hist, 50), quantileS(a.hist, 95)
		if st.TurnsOK > 0 {
			st.PromptTokensMean = float64(a.promptSum) / float64(st.TurnsOK)
		}
		if a.cachedN > 0 {
			st.CachedTokensMean = float64(a.cachedSum) / float64(a.cachedN)
		}
		st.UsageCachedPct = pct(float64(a.cachedSum), float64(a.cachedPrompt))
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b TurnStats) int { return cmp.Compare(a.Turn, b.Turn) })
	return out
}

// TurnsCSVColumns is the header of turns_by_index.csv: one row per variant, stage
// and turn index present in the stage's window, in manifest order then by turn.
// Units are in the names; a value that could not be computed is an empty cell.
// Definitions are those of the TurnStats fields:
//
//	variant                   variant name ("off", "on", ...)
//	stage                     0-based stage index in the variant
//	sessions                  concurrent sessions held in the stage
//	turn                      0-based turn index within the session
//	turns_ok, turns_failed    turns of this index done in the window
//	ttfb_mean_s               mean client-side TTFB of the OK turns, seconds
//	ttfb_p50_s, ttfb_p95_s    TTFB quantiles of the same turns, seconds (HDR histogram)
//	prompt_tokens_mean        mean server-counted prompt tokens of the OK turns
//	cached_tokens_mean        mean usage cached_tokens of the OK turns that reported it
//	usage_cached_pct          100 * sum(cached_tokens) / sum(prompt_tokens) over the same turns
var TurnsCSVColumns = []string{
	"variant", "stage", "sessions", "turn", "turns_ok", "turns_failed",
	"ttfb_mean_s", "ttfb_p50_s", "ttfb_p95_s", "prompt_tokens_mean", "cached_tokens_mean", "usage_cached_pct",
}

// TurnsByIndexCSV renders the ByTurn breakdowns of sums as turns_by_index.csv (see
// TurnsCSVColumns). A stage with no turn done in its window has no row.
func TurnsByIndexCSV(sums []Summary) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(TurnsCSVColumns); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", TurnsByIndexCSVFile, err)
	}
	for _, s := range sums {
		for _, t := range s.ByTurn {
			rec := []string{
				s.Variant, strconv.Itoa(s.Stage), strconv.Itoa(s.Sessions), strconv.Itoa(t.Turn),
				strconv.Itoa(t.TurnsOK), strconv.Itoa(t.TurnsFailed),
				csvFloat(t.TTFBMeanS), csvFloat(t.TTFBP50S), csvFloat(t.TTFBP95S),
				csvFloat(t.PromptTokensMean), csvFloat(t.CachedTokensMean), csvFloat(t.UsageCachedPct),
			}
			if err := w.Write(rec); err != nil {
				return nil, fmt.Errorf("encoding %s: %w", TurnsByIndexCSVFile, err)
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", TurnsByIndexCSVFile, err)
	}
	return buf.Bytes(), nil
}

// turnsTable returns the header and rows of summary.md's by-turn table: one row
// per stage and turn index present in any compared variant, each cell
// "base -> candidate" ("n/a" where a variant has no turn of that index). The
// sessions cell is written on a stage's first row only.
func turnsTable(variants []string, sums []Summary) (header []string, rows [][]string) {
	header = []string{"sessions", "turn", "turns ok", "TTFB mean (s)", "TTFB p50 (s)", "TTFB p95 (s)", "prompt tokens", "usage cached %"}
	cols := []struct {
		value  func(*TurnStats) float64
		format func(float64) string
	}{
		{func(t *TurnStats) float64 { return float64(t.TurnsOK) }, fmtThousands},
		{func(t *TurnStats) float64 { return t.TTFBMeanS }, fmtPrec(2)},
		{func(t *TurnStats) float64 { return t.TTFBP50S }, fmtPrec(2)},
		{func(t *TurnStats) float64 { return t.TTFBP95S }, fmtPrec(2)},
		{func(t *TurnStats) float64 { return t.PromptTokensMean }, fmtThousands},
		{func(t *TurnStats) float64 { return t.UsageCachedPct }, fmtPrec(1)},
	}
	nan := math.NaN()
	for _, r := range stageRows(variants, sums) {
		var turns []int
		for _, s := range r.cells {
			if s == nil {
				continue
			}
			for _, t := range s.ByTurn {
				turns = append(turns, t.Turn)
			}
		}
		slices.Sort(turns)
		turns = slices.Compact(turns)
		label := strconv.Itoa(r.sessions)
		if slices.ContainsFunc(r.cells, func(s *Summary) bool { return s != nil && !s.Complete }) {
			label += " (partial)"
		}
		for i, turn := range turns {
			row := []string{"", strconv.Itoa(turn)}
			if i == 0 {
				row[0] = label
			}
			for _, c := range cols {
				parts := make([]string, len(r.cells))
				for k, s := range r.cells {
					parts[k] = "n/a"
					if s == nil {
						continue
					}
					// The stage ran but no turn of this index was done in its
					// window: 0 turns, every other figure n/a.
					t := TurnStats{Turn: turn, TTFBMeanS: nan, TTFBP50S: nan, TTFBP95S: nan,
						PromptTokensMean: nan, CachedTokensMean: nan, UsageCachedPct: nan}
					if j := slices.IndexFunc(s.ByTurn, func(t TurnStats) bool { return t.Turn == turn }); j >= 0 {
						t = s.ByTurn[j]
					}
					parts[k] = c.format(c.value(&t))
				}
				row = append(row, strings.Join(parts, " -> "))
			}
			rows = append(rows, row)
		}
	}
	return header, rows
}
