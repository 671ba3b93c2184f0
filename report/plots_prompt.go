package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/lmwarden/warden/loadgen"
)

// promptBin picks a bin width: about 45 bins over the variant, at least 5 s. The
// counters step when requests finish, so narrower bins show mostly that
// granularity, not the load.
func promptBin(series []loadgen.SeriesSample) time.Duration {
	t0 := slices.MinFunc(series, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) }).T
	t1 := slices.MaxFunc(series, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) }).T
	return max(5*time.Second, ((t1 - t0) / 45).Round(time.Second))
}

// promptTokensFigure draws stacked areas of prompt tokens/s read from the cache
// (bottom) and computed (top) over the variant's run, with stage starts marked.
func promptTokensFigure(v loadgen.Variant, series []loadgen.SeriesSample, results []loadgen.Result) (*plot.Plot, error) {
	rates := PromptRates(series, results, promptBin(series))
	var t0 time.Duration
	if len(v.Stages) > 0 {
		t0 = v.Stages[0].Start
	} else {
		t0 = rates[0].Start
	}
	var cachedSum, totalSum float64
	var cachedPts, totalPts plotter.XYs
	for _, r := range rates {
		x := (r.End - t0).Minutes()
		cachedPts = append(cachedPts, plotter.XY{X: x, Y: r.Cached})
		totalPts = append(totalPts, plotter.XY{X: x, Y: r.Cached + r.Computed})
		cachedSum += r.Cached
		totalSum += r.Cached + r.Computed
	}
	share := "n/a"
	if totalSum > 0 {
		share = fmt.Sprintf("%.1f %%", 100*cachedSum/totalSum)
	}
	p := newPlot(fmt.Sprintf("Prompt tokens per second, %s (read from cache: %s of the run)", variantLabel(v), share),
		"time since the first stage started (simulated min; ticks and dotted lines at stage starts)", "prompt tokens/s (all replicas)")
	total, err := plotter.NewLine(totalPts)
	if err != nil {
		return nil, err
	}
	total.FillColor = colourComputed
	total.Color = colourComputed
	cachedLine, err := plotter.NewLine(cachedPts)
	if err != nil {
		return nil, err
	}
	cachedLine.FillColor = colourCached
	cachedLine.Color = colourCached
	p.Add(total, cachedLine)
	p.Legend.Add("computed (prefill)", total)
	p.Legend.Add("read from prefix cache", cachedLine)
	p.Y.Min = 0
	p.Y.Max = math.Max(1, maxY(totalPts))
	placeLegend(p, []curve{{pts: totalPts, filled: true}}, 2, len("read from prefix cache"), figWidth, figHeight)
	var ticks []plot.Tick
	for i, st := range v.Stages {
		x := (st.Start - t0).Minutes()
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
		if i == 0 {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: math.Max(1, maxY(totalPts))}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 96}
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		p.Add(l)
	}
	if len(ticks) > 1 {
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	return p, nil
}
