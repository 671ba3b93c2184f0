package report

import (
	"math"

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
	p.X.Tick.Marker = logTicks{}
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
