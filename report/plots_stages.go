package report

import (
	"fmt"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lmwarden/warden/loadgen"
)

// stageAxis is the x axis of the per-stage figures: the stage's sessions, or,
// for a trace replay (stages are report windows), the window's start in minutes
// since the variant's start.
type stageAxis struct {
	label  string
	x      func(s *Summary) float64
	ticker plot.Ticker
}

func stageAxisOf(m *loadgen.Manifest, sums []Summary) stageAxis {
	if m.Scenario != nil && m.Scenario.Trace != nil {
		start := map[string]time.Duration{}
		for _, v := range m.Variants {
			if len(v.Stages) > 0 {
				start[v.Name] = v.Stages[0].Start + v.Stages[0].Warmup
			}
		}
		return stageAxis{label: "replay time (min, report window start)", ticker: PlainTicks{},
			x: func(s *Summary) float64 { return (s.WindowStart - start[s.Variant]).Minutes() }}
	}
	return stageAxis{label: "concurrent sessions", ticker: sessionTicks(sums),
		x: func(s *Summary) float64 { return float64(s.Sessions) }}
}

// stagePoints returns (x, value) for a variant's stages, skipping NaN.
func stagePoints(sums []Summary, variant string, x func(*Summary) float64, value func(*Summary) float64, floor float64) plotter.XYs {
	var pts plotter.XYs
	for i := range sums {
		s := &sums[i]
		if s.Variant != variant {
			continue
		}
		v := value(s)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if !math.IsNaN(floor) && v < floor {
			v = floor
		}
		pts = append(pts, plotter.XY{X: x(s), Y: v})
	}
	return pts
}

// stageBars returns a variant's stage points (as stagePoints, no floor) with
// each point's interval from bounds as error bars: the data sessions_per_h.png
// draws. A stage whose value or bounds are not finite is left out.
func stageBars(sums []Summary, variant string, x func(*Summary) float64, value func(*Summary) float64,
	bounds func(*Summary) (lo, hi float64)) (plotter.XYs, plotter.YErrors) {
	var pts plotter.XYs
	var errs plotter.YErrors
	for i := range sums {
		s := &sums[i]
		if s.Variant != variant {
			continue
		}
		v := value(s)
		lo, hi := bounds(s)
		if !finite(v) || !finite(lo) || !finite(hi) {
			continue
		}
		pts = append(pts, plotter.XY{X: x(s), Y: v})
		errs = append(errs, struct{ Low, High float64 }{max(v-lo, 0), max(hi-v, 0)})
	}
	return pts, errs
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// sessionTicks puts a tick at every stage level on the x axis.
func sessionTicks(sums []Summary) plot.Ticker {
	var levels []float64
	for _, s := range sums {
		levels = append(levels, float64(s.Sessions))
	}
	slices.Sort(levels)
	levels = slices.Compact(levels)
	var ticks []plot.Tick
	for _, l := range levels {
		ticks = append(ticks, plot.Tick{Value: l, Label: fmt.Sprintf("%g", l)})
	}
	return plot.ConstantTicks(ticks)
}

// stageFigure draws one per-stage metric, one line per variant, from 0 up to the
// data (or to yMax when yMax > 0, e.g. 100 for a percentage).
//
// bounds, when not nil, gives each stage's interval, drawn as error bars
// (stageBars).
func stageFigure(m *loadgen.Manifest, sums []Summary, title, yLabel string, yMax float64, value func(*Summary) float64,
	bounds func(*Summary) (lo, hi float64)) (*plot.Plot, error) {
	colours := variantColours(m)
	ax := stageAxisOf(m, sums)
	p := newPlot(title, ax.label, yLabel)
	p.X.Tick.Marker = ax.ticker
	var lines []lineSpec
	for _, v := range m.Variants {
		l := lineSpec{label: variantLabel(v), colour: colours[v.Name]}
		if bounds != nil {
			l.pts, l.errs = stageBars(sums, v.Name, ax.x, value, bounds)
		} else {
			l.pts = stagePoints(sums, v.Name, ax.x, value, math.NaN())
		}
		lines = append(lines, l)
	}
	if err := addLines(p, lines); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	if yMax > 0 {
		p.Y.Max = yMax
		p.Y.Tick.Marker = PlainTicks{Cap: yMax}
	}
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	padX(p)
	legendFor(p, lines)
	return p, nil
}

// ttfbFigure draws TTFB p50 (solid) and p95 (dashed) per variant on a log axis.
func ttfbFigure(m *loadgen.Manifest, sums []Summary) (*plot.Plot, error) {
	colours := variantColours(m)
	ax := stageAxisOf(m, sums)
	p := newPlot("Time to first token (client side)", ax.label, "TTFB (s, log scale)")
	p.X.Tick.Marker = ax.ticker
	var lines []lineSpec
	for _, v := range m.Variants {
		lines = append(lines,
			lineSpec{label: variantLabel(v) + " p50", colour: colours[v.Name], glyph: draw.CircleGlyph{},
				pts: stagePoints(sums, v.Name, ax.x, func(s *Summary) float64 { return s.TTFBP50S }, minLogTTFB)},
			lineSpec{label: variantLabel(v) + " p95", colour: colours[v.Name], dashed: true, glyph: draw.TriangleGlyph{},
				pts: stagePoints(sums, v.Name, ax.x, func(s *Summary) float64 { return s.TTFBP95S }, minLogTTFB)},
		)
	}
	if err := addLines(p, lines); err != nil {
		return nil, err
	}
	setLogY(p, lines)
	padX(p)
	legendFor(p, lines)
	return p, nil
}

// ttfbCDFFigure draws one panel per stage with the empirical TTFB CDF of each
// variant's OK turns done in the stage's measured window (log x).
func ttfbCDFFigure(run *Run, sums []Summary) ([]byte, error) {
	m := &run.Manifest
	colours := variantColours(m)
	keys := keysOf(m)
	rows := keys.rows(variantNames(m), sums)
	if len(rows) == 0 {
		p := newPlot("TTFB distribution (no stages)", "TTFB (s, log scale)", "share of turns")
		return renderPNG(p)
	}
	cols := min(3, len(rows))
	nrows := (len(rows) + cols - 1) / cols
	grid := make([][]*plot.Plot, nrows)
	for j := range grid {
		grid[j] = make([]*plot.Plot, cols)
	}
	for k, row := range rows {
		p := newPlot(keys.rowLabel(row), "TTFB (s, log scale)", "share of turns <= x")
		var lines []lineSpec
		for _, s := range row.cells {
			if s == nil {
				continue
			}
			var ttfb []float64
			for r := range run.Results {
				res := &run.Results[r]
				if res.Variant == s.Variant && res.OK() && res.TTFB() > 0 && contains(s.WindowStart, s.WindowEnd, res.Done) {
					ttfb = append(ttfb, max(res.TTFB().Seconds(), minLogTTFB))
				}
			}
			slices.Sort(ttfb)
			var pts plotter.XYs
			for n, x := range ttfb {
				pts = append(pts, plotter.XY{X: x, Y: float64(n+1) / float64(len(ttfb))})
			}
			lines = append(lines, lineSpec{label: variantLabel(m.Variants[variantIndex(m, s.Variant)]),
				colour: colours[s.Variant], pts: pts})
		}
		for _, l := range lines {
			if len(l.pts) == 0 {
				continue
			}
			ln, err := plotter.NewLine(l.pts)
			if err != nil {
				return nil, err
			}
			ln.StepStyle = plotter.PostStep
			ln.Color = l.colour
			ln.Width = vg.Points(1.5)
			p.Add(ln)
			p.Legend.Add(l.label, ln)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, l := range lines {
			for _, pt := range l.pts {
				lo, hi = min(lo, pt.X), max(hi, pt.X)
			}
		}
		if !math.IsInf(lo, 1) {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = LogTicks{}
			p.X.Min, p.X.Max = lo/1.6, hi*1.6
		}
		p.Y.Min, p.Y.Max = 0, 1
		var curves []curve
		longest := 0
		for _, l := range lines {
			curves = append(curves, curve{pts: l.pts})
			longest = max(longest, len(l.label))
		}
		placeLegend(p, curves, len(lines), longest, cdfPanelW, cdfPanelH)
		grid[k/cols][k%cols] = p
	}
	return renderTiles(grid, vg.Length(cols)*cdfPanelW, vg.Length(nrows)*cdfPanelH)
}
