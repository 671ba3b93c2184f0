package report

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TickLabel formats an axis value without trailing zeros and with thousands
// grouped: 50000 -> "50,000", 0.5 -> "0.5". It is the one tick format of every
// figure: the run figures here and the study figures (internal/run/study).
func TickLabel(v float64) string {
	if math.Abs(v) >= 1000 && v == math.Round(v) {
		return fmtThousands(v)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// PlainTicks are gonum's default tick positions with TickLabel labels (gonum's
// own labels print "15000.00" when the step is 2500); Cap > 0 drops ticks above
// it (a percent axis stops at 100 even with legend headroom). Use it on every
// linear axis.
type PlainTicks struct{ Cap float64 }

var _ plot.Ticker = PlainTicks{}

// Ticks implements plot.Ticker.
func (t PlainTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, tk := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Cap > 0 && tk.Value > t.Cap*(1+1e-9) {
			continue
		}
		if tk.Label != "" {
			tk.Label = TickLabel(tk.Value)
		}
		out = append(out, tk)
	}
	return out
}

// LogTicks label 1, 2 and 5 times each power of ten in range (TickLabel), with
// minor ticks at the other integers (gonum's LogTicks labels powers of ten only).
// Use it on every plot.LogScale axis.
type LogTicks struct{}

var _ plot.Ticker = LogTicks{}

// Ticks implements plot.Ticker.
func (LogTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	if lo <= 0 || hi <= lo {
		return out
	}
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for m := 1.0; m < 10; m++ {
			v := m * p
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			tk := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				tk.Label = TickLabel(v)
			}
			out = append(out, tk)
		}
	}
	return out
}

// curve is drawn data in data coordinates, for legend placement; a filled curve
// occupies everything below it.
type curve struct {
	pts    plotter.XYs
	filled bool
}

// placeLegend puts p's legend in the corner whose box covers the least data; when
// every corner covers some, it adds headroom above the data and puts the legend top
// left. The box is estimated from the number of entries, the longest label (in
// characters) and the size of the plot's canvas (width x height). Call it after the
// axis ranges are final.
func placeLegend(p *plot.Plot, curves []curve, entries, longest int, width, height vg.Length) {
	if entries == 0 {
		return
	}
	// Data area: the canvas less about 60 pt for title, tick labels and axis labels.
	dataW, dataH := max(width-vg.Points(60), vg.Points(40)), max(height-vg.Points(60), vg.Points(40))
	font := p.Legend.TextStyle.Font.Size
	rowH := font*1.2 + p.Legend.Padding
	boxW := vg.Length(longest)*font*0.5 + p.Legend.ThumbnailWidth + vg.Points(10)
	h := min(0.9, float64(vg.Length(entries)*rowH/dataH)+0.05)
	w := min(0.9, float64(boxW/dataW))
	nx := func(x float64) float64 { return p.X.Scale.Normalize(p.X.Min, p.X.Max, x) }
	ny := func(y float64) float64 { return p.Y.Scale.Normalize(p.Y.Min, p.Y.Max, y) }
	type corner struct{ top, left bool }
	corners := []corner{{true, true}, {true, false}, {false, true}, {false, false}}
	best, bestHits := corners[0], math.MaxInt
	for _, c := range corners {
		x0, x1 := 0.0, w
		if !c.left {
			x0, x1 = 1-w, 1
		}
		y0, y1 := 0.0, h
		if c.top {
			y0, y1 = 1-h, 1
		}
		hits := 0
		for _, cv := range curves {
			for i := range cv.pts {
				// Sample each segment so a line crossing the box counts.
				a := cv.pts[i]
				b := a
				if i+1 < len(cv.pts) {
					b = cv.pts[i+1]
				}
				for k := 0; k <= 16; k++ {
					f := float64(k) / 16
					x := nx(a.X + f*(b.X-a.X))
					y := ny(a.Y + f*(b.Y-a.Y))
					if math.IsNaN(x) || math.IsNaN(y) || x < x0 || x > x1 {
						continue
					}
					if (y >= y0 && y <= y1) || (cv.filled && y >= y0) {
						hits++
					}
				}
			}
		}
		if hits < bestHits {
			best, bestHits = c, hits
		}
	}
	if bestHits > 0 {
		best = corner{true, true}
		addHeadroom(p, h+0.02)
	}
	p.Legend.Top, p.Legend.Left = best.top, best.left
	p.Legend.XOffs, p.Legend.YOffs = 0, 0
	if best.top {
		// gonum puts a top legend's first row at the data area's top edge, just
		// under the title: move it down so the two do not touch.
		p.Legend.YOffs = -vg.Points(6)
	}
	if best.left {
		// Clear of the y axis's tick marks, which gonum draws just inside the
		// data area's left edge where a left legend's first thumbnail starts.
		p.Legend.XOffs = vg.Points(8)
	}
}

// addHeadroom raises p.Y.Max so that the top fraction f of the data area is free.
func addHeadroom(p *plot.Plot, f float64) {
	if _, isLog := p.Y.Scale.(plot.LogScale); isLog {
		lo, hi := math.Log10(p.Y.Min), math.Log10(p.Y.Max)
		p.Y.Max = math.Pow(10, lo+(hi-lo)/(1-f))
		return
	}
	p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-f)
}
