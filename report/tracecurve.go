package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/loadgen"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// TraceCurvePoint is one point of a trace's hit rate against cache capacity.
type TraceCurvePoint struct {
	CapacityTokens float64 // prompt tokens the cache holds (> 0)
	HitPct         float64 // prompt tokens served from cache, percent
}

// TraceCurveFigure draws hit % against cache capacity (log x axis, tokens) as a
// PNG, with the unbounded cache's ceiling as a dashed line when ceilingPct is not
// NaN. Points with a capacity <= 0 are left out (a log axis cannot show them).
func TraceCurveFigure(title string, pts []TraceCurvePoint, ceilingPct float64) ([]byte, error) {
	p := newPlot(title, "cache capacity (tokens, log scale)", "prefix hits (% of prompt tokens)")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = LogTicks{}
	var xys plotter.XYs
	for _, q := range pts {
		if q.CapacityTokens > 0 && !math.IsNaN(q.HitPct) {
			xys = append(xys, plotter.XY{X: q.CapacityTokens, Y: q.HitPct})
		}
	}
	lines := []lineSpec{{label: "LRU over block ids", colour: Palette(0), pts: xys}}
	if !math.IsNaN(ceilingPct) && len(xys) > 0 {
		lines = append(lines, lineSpec{label: "unbounded (reuse ceiling)", colour: Palette(1), dashed: true,
			pts: plotter.XYs{{X: xys[0].X, Y: ceilingPct}, {X: xys[len(xys)-1].X, Y: ceilingPct}}})
	}
	if err := addLines(p, lines); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	p.Y.Max = 100
	return renderPNG(p)
}

// Thousands rounds v to an integer and groups digits by three ("12,031"); "n/a"
// for NaN or an infinity.
func Thousands(v float64) string { return fmtThousands(v) }

// traceWindow names the recorded window replayed: "whole trace" without
// --from/--to (TraceSpec.To 0 is the end).
func traceWindow(from, to time.Duration) string {
	switch {
	case from == 0 && to == 0:
		return "whole trace"
	case to == 0:
		return fmt.Sprintf("recorded %v to the end", from)
	}
	return fmt.Sprintf("recorded %v..%v", from, to)
}

// traceSection writes summary.md's "Trace replay" section (nothing for a run
// without one): per variant, the reconstruction and what the block ids allow.
func traceSection(b *strings.Builder, m *loadgen.Manifest, sums []Summary) {
	if len(m.Traces) == 0 {
		return
	}
	b.WriteString("\n## Trace replay\n\n")
	if sc := m.Scenario; sc != nil && sc.Trace != nil {
		t := sc.Trace.WithDefaults()
		fmt.Fprintf(b, "Trace `%s`, mode %s, %s, speedup %g, sample %g of conversations, report windows of %v; sessions/h is n/a (a trace marks no conversation's last turn). ",
			t.File, t.Mode, traceWindow(t.From, t.To), t.Speedup, t.Sample, t.Window)
	}
	b.WriteString("Reuse ceiling: prompt tokens an unbounded prefix cache shared by all replicas would serve; " +
		"shared LRU: one LRU cache of the fleet's total KV capacity; both from the block ids alone, over the requests kept, " +
		"to set beside the achieved prefix hits above. Lateness: send instant minus intended instant.\n\n")
	var rows [][]string
	for _, t := range m.Traces {
		rows = append(rows, []string{t.Variant, Thousands(float64(t.Requests)), Thousands(float64(t.Sent)), Thousands(float64(t.NotSent)),
			Thousands(float64(t.Conversations)), TurnsDistribution(t.TurnsPerConversation),
			fmtPrec(1)(t.CeilingPct), sharedLRUCell(t),
			fmt.Sprintf("%.2f / %.2f / %.2f", t.LatenessP50S, t.LatenessP99S, t.LatenessMaxS)})
	}
	mdTable(b, []string{"variant", "requests", "sent", "not sent", "conversations", "turns/conversation", "reuse ceiling %", "shared LRU %", "lateness p50/p99/max (s)"}, rows)

	// Per window: what the block ids allow the requests recorded in it, beside
	// what the engines achieved on the requests done in it.
	rows = nil
	keys := keysOf(m)
	for _, t := range m.Traces {
		k := 0
		for _, s := range sums {
			if s.Variant != t.Variant {
				continue
			}
			if k < len(t.Windows) {
				w := t.Windows[k]
				shared := "n/a"
				if t.SharedLRUTokens > 0 {
					shared = fmtPrec(1)(w.SharedLRUPct)
				}
				rows = append(rows, []string{t.Variant, keys.window(&s),
					strconv.Itoa(w.Requests), strconv.Itoa(s.TurnsOK + s.TurnsFailed), fmtPrec(1)(s.PrefixHitsPct), fmtPrec(1)(s.UsageCachedPct),
					fmtPrec(1)(w.CeilingPct), shared})
			}
			k++
		}
	}
	if len(rows) > 0 {
		b.WriteString("\nPer report window: requests recorded in it and the hit % their block ids allow, beside the turns done in it and the hits the engines reported.\n\n")
		mdTable(b, []string{"variant", "window (min)", "requests recorded", "turns done", "prefix hits %", "usage cached %", "reuse ceiling %", "shared LRU %"}, rows)
	}
}

// TurnsDistribution words a turns -> conversations map: "1: 108, 2: 19".
func TurnsDistribution(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d: %s", k, Thousands(float64(m[k])))
	}
	return strings.Join(parts, ", ")
}

func sharedLRUCell(t loadgen.TraceReplay) string {
	if t.SharedLRUTokens <= 0 {
		return "n/a (fleet KV unknown)"
	}
	return fmt.Sprintf("%s (%s tokens)", fmtPrec(1)(t.SharedLRUPct), Thousands(float64(t.SharedLRUTokens)))
}

// goodputSection writes summary.md's "Goodput" section when the scenario has
// an slo: per variant and stage, the turns done, those meeting the SLO, their
// share and rate.
func goodputSection(b *strings.Builder, m *loadgen.Manifest, keys stageKeys, sums []Summary) {
	if m.Scenario == nil || m.Scenario.SLO == nil {
		return
	}
	slo := m.Scenario.SLO
	limit := func(d time.Duration) string {
		if d <= 0 {
			return "none"
		}
		return d.String()
	}
	fmt.Fprintf(b, "\n## Goodput\n\nTurns done in the stage's window that are OK with TTFB <= %s and time per output token <= %s "+
		"((last token - first token) / (output tokens - 1), as vLLM's benchmark counts it), of all turns done there (failed ones included).\n\n",
		limit(slo.TTFB), limit(slo.TPOT))
	var rows [][]string
	for _, s := range sums {
		rows = append(rows, append(append([]string{s.Variant}, keys.cells(&s)...), strconv.Itoa(s.TurnsOK+s.TurnsFailed), strconv.Itoa(s.GoodTurns),
			fmtPrec(1)(s.GoodputPct), fmtPrec(1)(s.GoodputPerMin)))
	}
	mdTable(b, append(append([]string{"variant"}, keys.header()...), "turns", "meeting the SLO", "goodput %", "goodput turns/min"), rows)
}
