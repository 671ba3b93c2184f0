package study

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/lmwarden/warden/report"
)

// FigureMetrics are the metrics drawn one figure each per setup.
var FigureMetrics = []string{"ttfb_p50_s", "ttfb_p95_s", "output_tokens_per_min", "prefix_hits_pct", "replicas_busy"}

// newFigure is plot.New with report's tick format on both axes (report.PlainTicks:
// "15,000", not gonum's "15000.00"), so study and run figures read alike.
func newFigure() *plot.Plot {
	p := plot.New()
	p.X.Tick.Marker, p.Y.Tick.Marker = report.PlainTicks{}, report.PlainTicks{}
	return p
}

// stageTicks labels the x axis (stage index) with the stage's session count.
type stageTicks []int

func (s stageTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for i, n := range s {
		if float64(i) >= lo-1e-9 && float64(i) <= hi+1e-9 {
			out = append(out, plot.Tick{Value: float64(i), Label: report.TickLabel(float64(n))})
		}
	}
	return out
}

// metricFigure draws one metric for one setup: x = stage (labelled with its
// sessions), one line per arm at the mean across seeds, with bars from the lowest
// to the highest seed. Arms are offset a little along x so bars do not overlap.
func metricFigure(setup string, m Metric, rows []Row, arms []string) (*plot.Plot, error) {
	p := newFigure()
	p.Title.Text = fmt.Sprintf("%s: %s (mean, bars min-max over samples)", setup, m.Title)
	p.X.Label.Text = "concurrent sessions"
	p.Y.Label.Text = m.Title
	p.Legend.Top = true
	p.Legend.Left = m.Key == "ttfb_p50_s" || m.Key == "ttfb_p95_s"
	logY := m.Key == "ttfb_p50_s" || m.Key == "ttfb_p95_s"
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = report.LogTicks{}
	}
	var stages []int
	for _, r := range rows {
		if r.Setup == setup && r.Stage >= len(stages) {
			stages = append(stages, make([]int, r.Stage+1-len(stages))...)
		}
		if r.Setup == setup {
			stages[r.Stage] = r.Sessions
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("drawing %s: no rows for setup %q", m.Key, setup)
	}
	p.X.Tick.Marker = stageTicks(stages)
	p.X.Min, p.X.Max = -0.4, float64(len(stages)-1)+0.4
	ymax := 0.0
	for ai, arm := range arms {
		var pts plotter.XYs
		var errs plotter.YErrors
		off := (float64(ai) - float64(len(arms)-1)/2) * 0.05
		for _, r := range rows {
			if r.Setup != setup || r.Arm != arm {
				continue
			}
			c := r.Cells[m.Key]
			if c.N == 0 || math.IsNaN(c.Mean) {
				continue
			}
			y, lo, hi := c.Mean, c.Min, c.Max
			if logY {
				y, lo, hi = math.Max(y, 1e-3), math.Max(lo, 1e-3), math.Max(hi, 1e-3)
			}
			pts = append(pts, plotter.XY{X: float64(r.Stage) + off, Y: y})
			errs = append(errs, struct{ Low, High float64 }{y - lo, hi - y})
			ymax = math.Max(ymax, hi)
		}
		if len(pts) == 0 {
			continue
		}
		col := report.Palette(ai)
		line, points, err := meanLine(pts, col)
		if err != nil {
			return nil, err
		}
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYer
			plotter.YErrorer
		}{pts, errs})
		if err != nil {
			return nil, err
		}
		bars.Color = col
		p.Add(line, points, bars)
		p.Legend.Add(arm, line, points)
	}
	if !logY && ymax > 0 {
		p.Y.Min = 0
		p.Y.Max = ymax * 1.25
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// traceFigure draws a run's trace: one panel per quantity (live conversations with
// the placements as marks, working set, in flight, waiting, KV usage,
// preemptions), one line per replica.
func traceFigure(title string, tr *Trace, kvTokens float64) ([]byte, error) {
	type panel struct {
		name string
		data [][]float64
	}
	panels := []panel{
		{"live conversations", tr.Live},
		{"working set (k tokens)", scale(tr.WorkingSet, 1e-3)},
		{"in flight (router view)", tr.InFlight},
		{"waiting (engine)", tr.Waiting},
		{"KV usage", tr.KV},
		{"preemptions (cumulative)", tr.Preempts},
	}
	grid := make([][]*plot.Plot, len(panels))
	for pi, pn := range panels {
		p := newFigure()
		if pi == 0 {
			p.Title.Text = title
		}
		p.Y.Label.Text = pn.name
		if pi == len(panels)-1 {
			p.X.Label.Text = "simulated time (s)"
		}
		for i, name := range tr.Replicas {
			pts := make(plotter.XYs, len(tr.T))
			for k, t := range tr.T {
				pts[k] = plotter.XY{X: t, Y: pn.data[i][k]}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			l.Color = report.Palette(i)
			l.Width = vg.Points(1)
			p.Add(l)
			if pi == 0 {
				p.Legend.Add(name, l)
			}
		}
		if pi == 0 && len(tr.Placements) > 0 {
			for i := range tr.Replicas {
				var pts plotter.XYs
				for _, pl := range tr.Placements {
					if pl.Replica == i {
						pts = append(pts, plotter.XY{X: pl.T, Y: float64(pl.Live[i]) + 0.5})
					}
				}
				if len(pts) == 0 {
					continue
				}
				sc, err := plotter.NewScatter(pts)
				if err != nil {
					return nil, err
				}
				sc.Color = report.Palette(i)
				sc.Shape = draw.TriangleGlyph{}
				sc.Radius = vg.Points(2)
				p.Add(sc)
			}
			p.Legend.Top, p.Legend.Left = true, true
		}
		if pn.name == "working set (k tokens)" && kvTokens > 0 {
			cap := plotter.NewFunction(func(float64) float64 { return kvTokens / 1e3 })
			cap.Color = color.Gray{Y: 120}
			cap.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(cap)
			p.Legend.Add("one replica's KV cache", cap)
			p.Legend.Top, p.Legend.Left = true, true
		}
		p.Add(plotter.NewGrid())
		grid[pi] = []*plot.Plot{p}
	}
	w, h := 11*vg.Inch, vg.Length(len(panels))*2.1*vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(grid), Cols: 1, PadY: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	canv := plot.Align(grid, tiles, dc)
	for j := range grid {
		grid[j][0].Draw(canv[j][0])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func scale(a [][]float64, f float64) [][]float64 {
	out := make([][]float64, len(a))
	for i := range a {
		out[i] = make([]float64, len(a[i]))
		for k, v := range a[i] {
			out[i][k] = v * f
		}
	}
	return out
}

func savePlot(p *plot.Plot, path string) error {
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}

func writeFile(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// DrawTrace draws the trace of one variant of a results directory's run into
// dir/trace-<variant>.png (the KV capacity line is left out: a results directory
// does not record it).
func DrawTrace(dir string, run *report.Run, variant string) error {
	tr := BuildTrace(run, variant)
	if tr == nil {
		return fmt.Errorf("drawing trace of %s variant %q: no samples", dir, variant)
	}
	b, err := traceFigure(fmt.Sprintf("%s, variant %s", run.Manifest.RunID, variant), tr, 0)
	if err != nil {
		return fmt.Errorf("drawing trace of %s variant %q: %w", dir, variant, err)
	}
	return writeFile(filepath.Join(dir, "trace-"+variant+".png"), b)
}

// hitsOverTimeFigure draws the fleet prefix hit rate per bin over the run for
// every traced arm of one setup.
func hitsOverTimeFigure(setup string, runs []*RunResult, arms []string, bin time.Duration) (*plot.Plot, error) {
	p := newFigure()
	p.Title.Text = fmt.Sprintf("%s: prefix hits %% per %s (server counters, fleet)", setup, bin)
	p.X.Label.Text = "simulated time (s)"
	p.Y.Label.Text = "prefix hits %"
	p.Y.Min, p.Y.Max = 0, 105
	p.Y.Tick.Marker = report.PlainTicks{Cap: 100}
	p.Legend.Top = true
	for ai, arm := range arms {
		for _, r := range runs {
			if r.Setup != setup || r.Arm != arm || r.Trace == nil {
				continue
			}
			x, y := r.Trace.HitRate(bin)
			if len(x) == 0 {
				continue
			}
			pts := make(plotter.XYs, len(x))
			for k := range x {
				pts[k] = plotter.XY{X: x[k], Y: y[k]}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			l.Color = report.Palette(ai)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(arm, l)
		}
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// meanLine draws pts as a 1.5 pt line with circle points, both in col: the
// style of the study's mean lines (per-metric and frontier figures).
func meanLine(pts plotter.XYs, col color.Color) (*plotter.Line, *plotter.Scatter, error) {
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, nil, err
	}
	line.Color, points.Color = col, col
	line.Width = vg.Points(1.5)
	points.Shape = draw.CircleGlyph{}
	return line, points, nil
}
