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

// RoundTicks label a linear axis at a round step, 1, 2 or 5 x 10^k: the
// smallest such step that gives at most MaxRoundTicks labels in [lo, hi], with
// unlabelled minor ticks between (5 per step of 1 or 5, 4 per step of 2).
// gonum's DefaultTicks (Talbot's extended algorithm) also takes steps of 2.5, 3
// and 4 x 10^k and labels that need not start at a multiple of the step, which
// gave 25 / 100 / 175 and 5 / 25 / 45 / 65 on plan.png. Labels are TickLabel's.
type RoundTicks struct{}

// MaxRoundTicks is the most labelled ticks RoundTicks puts on an axis.
const MaxRoundTicks = 6

var _ plot.Ticker = RoundTicks{}

// Ticks implements plot.Ticker.
func (RoundTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return nil
	}
	m, e := roundStep(lo, hi)
	// at(i) is i x 10^e, from integers so that a 0.1 step labels 0.3, not
	// 0.30000000000000004.
	at := func(i int64) float64 {
		if e >= 0 {
			return float64(i) * math.Pow(10, float64(e))
		}
		return float64(i) / math.Pow(10, float64(-e))
	}
	minor := int64(5)
	if m == 2 {
		minor = 4
	}
	// Tick n (minor or labelled) is at n x step / minor; every minor-th is
	// labelled, its value computed exactly from integers.
	fine := at(m) / float64(minor)
	var out []plot.Tick
	for n := int64(math.Ceil(lo/fine - 1e-9)); n <= int64(math.Floor(hi/fine+1e-9)); n++ {
		tk := plot.Tick{Value: float64(n) * fine}
		if n%minor == 0 {
			tk.Value = at(n / minor * m)
			tk.Label = TickLabel(tk.Value)
		}
		if tk.Value < lo || tk.Value > hi {
			continue // n x fine rounded past an end
		}
		out = append(out, tk)
	}
	return out
}

// roundStep picks RoundTicks' step m x 10^e (m in 1, 2, 5) for [lo, hi].
func roundStep(lo, hi float64) (m int64, e int) {
	e = int(math.Floor(math.Log10(hi-lo))) - 2
	for {
		for _, mm := range []int64{1, 2, 5} {
			step := float64(mm) * math.Pow(10, float64(e))
			if n := math.Floor(hi/step+1e-9) - math.Ceil(lo/step-1e-9) + 1; n <= MaxRoundTicks {
				return mm, e
			}
		}
		e++
	}
}

// TitlePadding is the space between a figure's title and its axes (gonum's
// default is none, so a title touched the data area's top edge).
const TitlePadding = 3 * vg.Millimeter

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
