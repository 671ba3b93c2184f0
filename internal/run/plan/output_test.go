package plan

import (
	"bytes"
	"image/png"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/lmwarden/warden/report"
)

// plan.png: each panel's legend is drawn in a strip under its axes, not in
// the data area (the plot's own legend is empty, the strip lies below the
// data canvas), the axes tick at round steps, and the title has padding.
func TestFigureLegendOutsideData(t *testing.T) {
	slo := mustSLO(t, "ttfb_p95=10s,goodput=0.9")
	pol := func(name string, p95s ...float64) PolicyResult {
		pr := PolicyResult{Policy: name}
		for i, p95 := range p95s {
			pt := point(t, name, 4*(i+1), slo, sample{TTFBP50S: 1, TTFBP95S: p95, TTFBP99S: p95, Goodput: 1 - p95/200})
			pr.Points = append(pr.Points, pt)
			if p95 <= 10 {
				pr.Knee = pt
			}
		}
		return pr
	}
	r := &Result{Config: Config{SLO: slo}, Policies: []PolicyResult{pol("shortest-queue", 3, 8, 16), pol("working-set", 3, 4, 175)}}
	b, err := r.figure()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for ti, term := range slo.terms() {
		p, entries, err := r.panel(ti, term, "concurrent sessions", "sessions")
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 3 {
			t.Errorf("%s: %d legend entries, want 3 (two policies, the SLO line)", term.Name, len(entries))
		}
		c := draw.New(vgimg.New(16*vg.Centimeter, 11*vg.Centimeter+legendHeight(entries)))
		if s := p.Legend.Rectangle(c).Size(); s.X != 0 || s.Y != 0 {
			t.Errorf("%s: the plot draws a legend of its own (%v), inside the data area", term.Name, s)
		}
		plots, strip := legendBelow(c, legendHeight(entries))
		if data := p.DataCanvas(plots); strip.Max.Y > data.Min.Y || strip.Max.Y-strip.Min.Y <= 0 {
			t.Errorf("%s: legend strip %v is not below the data area %v", term.Name, strip.Rectangle, data.Rectangle)
		}
		if _, ok := p.Y.Tick.Marker.(report.RoundTicks); !ok {
			t.Errorf("%s: y ticks %T, want report.RoundTicks", term.Name, p.Y.Tick.Marker)
		}
		if _, ok := p.X.Tick.Marker.(report.RoundTicks); !ok {
			t.Errorf("%s: x ticks %T, want report.RoundTicks", term.Name, p.X.Tick.Marker)
		}
		if p.Title.Padding < report.TitlePadding {
			t.Errorf("%s: title padding %v, want at least %v", term.Name, p.Title.Padding, report.TitlePadding)
		}
	}
	// The figure is as tall as the panels plus the legend strip.
	entries := []legendEntry{{name: "a"}, {name: "b"}, {name: "c"}}
	wantH := int((11*vg.Centimeter + legendHeight(entries)).Dots(vgimg.DefaultDPI) + 0.5)
	if h := img.Bounds().Dy(); h < wantH-1 || h > wantH+1 {
		t.Errorf("plan.png is %d px tall, want %d (panels + legend strip)", h, wantH)
	}
}
