package plan

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/lmwarden/warden/internal/atomicfile"
	"github.com/lmwarden/warden/report"
)

// Output files written by Write into the output directory.
const (
	FilePlan   = "plan.csv"   // one row per policy: the answer
	FilePoints = "points.csv" // one row per evaluated point
	FileFigure = "plan.png"   // the SLO metric(s) vs sessions (or replicas) per policy, knee marked
)

func f1(v float64) string { return fmtFloat(v, 1) }
func f2(v float64) string { return fmtFloat(v, 2) }
func f3(v float64) string { return fmtFloat(v, 3) }

func fmtFloat(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func (r *Result) inverse() bool { return r.Config.InverseSessions > 0 }

// WriteFleet prints the fleet's figures and where each came from.
func WriteFleet(w io.Writer, f Fleet) error {
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header("fleet figure", "value", "from")
	for _, g := range f.Figures {
		if err := t.Append([]string{g.Name, g.Value, g.Source}); err != nil {
			return err
		}
	}
	return t.Render()
}

// quantile is one TTFB column of the answer: a quantile in percent and its
// value at a point.
type quantile struct {
	Name string // p50, p95, p99
	Get  func(*Point) float64
}

// quantiles are the answer's TTFB columns: each quantile the SLO names, plus
// p95 and p99 (the tail) always, in increasing order.
func (o SLO) quantiles() []quantile {
	var qs []quantile
	if o.TTFBP50 > 0 {
		qs = append(qs, quantile{"p50", func(p *Point) float64 { return p.TTFBP50S }})
	}
	return append(qs, quantile{"p95", func(p *Point) float64 { return p.TTFBP95S }},
		quantile{"p99", func(p *Point) float64 { return p.TTFBP99S }})
}

// planRows is the per-policy answer as table rows (shared by the table and the CSV).
func (r *Result) planRows() (header []string, rows [][]string) {
	qs := r.Config.SLO.quantiles()
	var qh []string
	for _, q := range qs {
		qh = append(qh, "TTFB "+q.Name+" s")
	}
	metrics := append(qh, "goodput", "out tok/min", "sessions/h", "prefix hits %")
	if r.trees() {
		metrics = append(qh, "goodput", "out tok/min", "trees done/h", "session p50 s", "session p95 s", "prefix hits %")
	}
	if r.inverse() {
		header = append(append([]string{"policy", "sessions", "replicas needed"}, metrics...), "largest failing", "failed term", "KV-fit replicas")
	} else {
		header = append(append([]string{"policy", "knee sessions"}, metrics...), "first failing", "failed term", "KV-fit sessions")
	}
	blank := make([]string, len(metrics))
	for _, pr := range r.Policies {
		row := []string{pr.Policy}
		if r.inverse() {
			row = append(row, strconv.Itoa(r.Config.InverseSessions))
		}
		k := pr.Knee
		// A search the budget stopped has no verdict where it did not reach.
		unreached := "not reached (budget)"
		if len(pr.Points) == 0 {
			unreached = "not searched (budget)"
		}
		switch {
		case k == nil && pr.Budget:
			row = append(append(row, unreached), blank...)
		case k == nil && r.inverse():
			row = append(append(row, fmt.Sprintf("> %d", r.Config.MaxReplicas)), blank...)
		case k == nil:
			row = append(append(row, "none"), blank...)
		default:
			s := strconv.Itoa(r.count(k))
			if !pr.Resolved {
				s += " (unresolved)"
			}
			if m := k.Marginal(); len(m) > 0 {
				s += " *"
			}
			row = append(row, s)
			for _, q := range qs {
				row = append(row, f2(q.Get(k)))
			}
			row = append(row, f3(k.Goodput), fmtFloat(k.OutputTokensPerMin, 0), f1(k.SessionsPerH))
			if r.trees() {
				row = append(row, f1(k.SessionP50S), f1(k.SessionP95S))
			}
			row = append(row, f1(k.HitsPct))
		}
		if f := pr.FirstFail; f != nil {
			row = append(row, strconv.Itoa(r.count(f)), f.Failed())
		} else if pr.Budget {
			row = append(row, unreached, "")
		} else if r.inverse() {
			row = append(row, "none", "")
		} else {
			row = append(row, fmt.Sprintf("none <= %d", r.Config.MaxSessions), "")
		}
		switch {
		case r.trees():
			row = append(row, "n/a")
		case r.inverse():
			row = append(row, strconv.Itoa(r.Fit.Replicas))
		default:
			row = append(row, strconv.Itoa(r.Fit.Sessions))
		}
		if pr.Budget {
			row[0] += " (budget)"
		}
		rows = append(rows, row)
	}
	return header, rows
}

// count is what the search varies at p: sessions, or replicas (inverse).
func (r *Result) count(p *Point) int {
	if r.inverse() {
		return p.Replicas
	}
	return p.Sessions
}

// WriteTable prints the answer: one row per policy, the rule of thumb beside it.
func WriteTable(w io.Writer, r *Result) error {
	c := r.Config
	q := fmt.Sprintf("largest session count meeting the SLO on %d replicas", c.Fleet.Replicas)
	if r.inverse() {
		q = fmt.Sprintf("replicas needed for %d sessions", c.InverseSessions)
	}
	if _, err := fmt.Fprintf(w, "plan: %s; scenario %s, SLO %s, %d seeds per point, %d points, %.1f s wall\n",
		q, c.Scenario.Name, c.SLO, c.Seeds, r.points(), r.Wall.Seconds()); err != nil {
		return err
	}
	if _, err := io.WriteString(w, r.treesLine()); err != nil {
		return err
	}
	header, rows := r.planRows()
	t := newTable(w)
	t.Header(toAny(header)...)
	for _, row := range rows {
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if err := r.writeCliff(w); err != nil {
		return err
	}
	if _, err := io.WriteString(w, r.advice()); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s\n* a term within the seeds' noise of its threshold at the knee (95 %% interval, report.ThresholdDelta)\n", r.fitLine())
	return err
}

// fitLine is the KV-fit rule of thumb in tokens and what it gives.
func (r *Result) fitLine() string {
	f, c := r.Fit, r.Config
	if r.trees() {
		return treesFitLine()
	}
	if r.inverse() {
		return fmt.Sprintf("KV-fit rule of thumb: %d sessions x %.0f tokens of peak context per session (%s) = %.0f KV tokens, against %d per replica: %d replicas",
			c.InverseSessions, f.PeakContextTokens, f.PeakSource, float64(c.InverseSessions)*f.PeakContextTokens, f.KVTokensReplica, f.Replicas)
	}
	return fmt.Sprintf("KV-fit rule of thumb: %d KV tokens over the fleet (%d per replica) / %.0f tokens of peak context per session (%s) = %d sessions",
		f.FleetKVTokens, f.KVTokensReplica, f.PeakContextTokens, f.PeakSource, f.Sessions)
}

func (r *Result) points() int {
	n := 0
	for _, pr := range r.Policies {
		n += len(pr.Points)
	}
	return n
}

func newTable(w io.Writer) *tablewriter.Table {
	return tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAlignment(tw.AlignRight))
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// files renders every output file in memory, so that nothing is written when
// one of them fails.
func (r *Result) files() (map[string][]byte, error) {
	out := map[string][]byte{}
	header, rows := r.planRows()
	b, err := csvBytes(header, rows)
	if err != nil {
		return nil, err
	}
	out[FilePlan] = b
	if out[FilePoints], err = r.pointsCSV(); err != nil {
		return nil, err
	}
	if out[FileFigure], err = r.figure(); err != nil {
		return nil, fmt.Errorf("drawing %s: %w", FileFigure, err)
	}
	return out, nil
}

// pointsCSV is points.csv: one row per point, sorted by what the search
// varies; for session trees sessions_per_h is trees_done_per_h and the
// session times and tree counts follow it.
func (r *Result) pointsCSV() ([]byte, error) {
	perH := "sessions_per_h"
	if r.trees() {
		perH = "trees_done_per_h"
	}
	ph := []string{"policy", "sessions", "replicas", "seeds", "ttfb_p50_s", "ttfb_p95_s", "ttfb_p99_s", "goodput", "output_tokens_per_min", perH}
	if r.trees() {
		ph = append(ph, "session_p50_s", "session_p95_s", "trees_done", "trees_cut")
	}
	ph = append(ph, "prefix_hits_pct", "stayed_pct", "held_pct", "meets_slo", "failed_terms", "marginal_terms")
	var prow [][]string
	for _, pr := range r.Policies {
		for _, p := range sortedPoints(pr.Points, r.inverse()) {
			row := []string{p.Policy, strconv.Itoa(p.Sessions), strconv.Itoa(p.Replicas), strconv.Itoa(len(p.Samples)),
				fmtFloat(p.TTFBP50S, 4), fmtFloat(p.TTFBP95S, 4), fmtFloat(p.TTFBP99S, 4), fmtFloat(p.Goodput, 4), fmtFloat(p.OutputTokensPerMin, 1),
				fmtFloat(p.SessionsPerH, 2)}
			if r.trees() {
				row = append(row, fmtFloat(p.SessionP50S, 2), fmtFloat(p.SessionP95S, 2), fmtFloat(p.TreesDone, 2), fmtFloat(p.TreesCut, 2))
			}
			prow = append(prow, append(row, fmtFloat(p.HitsPct, 2), fmtFloat(p.StayedPct, 2), fmtFloat(p.HeldPct, 2), strconv.FormatBool(p.OK), p.Failed(), strings.Join(p.Marginal(), " ")))
		}
	}
	return csvBytes(ph, prow)
}

// Write writes plan.csv, points.csv and plan.png into dir, all rendered before
// the first is written (atomicfile: each appears whole or not at all).
func Write(dir string, r *Result) ([]string, error) {
	files, err := r.files()
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, name := range []string{FilePlan, FilePoints, FileFigure} {
		p := filepath.Join(dir, name)
		if err := atomicfile.Write(p, files[name]); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func csvBytes(header []string, rows [][]string) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(header); err != nil {
		return nil, err
	}
	if err := w.WriteAll(rows); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func sortedPoints(pts []*Point, inverse bool) []*Point {
	s := slices.Clone(pts)
	slices.SortFunc(s, func(a, b *Point) int {
		if inverse {
			return a.Replicas - b.Replicas
		}
		return a.Sessions - b.Sessions
	})
	return s
}

// figure draws one panel per SLO term: the term's metric (mean over seeds, with
// the seeds' 95 % interval as error bars) vs sessions (or replicas) per policy, the
// threshold as a dashed line and each policy's knee as a larger ring. Each
// panel's legend sits in a strip under its axes (legendBelow), off the data.
func (r *Result) figure() ([]byte, error) {
	terms := r.Config.SLO.terms()
	xLabel, xWord := "concurrent sessions", "sessions"
	if r.trees() {
		xLabel = "concurrent sessions (live session trees)"
	}
	if r.inverse() {
		xLabel, xWord = fmt.Sprintf("replicas (%d sessions)", r.Config.InverseSessions), "replicas"
	}
	var row []*plot.Plot
	var legends [][]legendEntry
	for ti, t := range terms {
		p, entries, err := r.panel(ti, t, xLabel, xWord)
		if err != nil {
			return nil, err
		}
		row = append(row, p)
		legends = append(legends, entries)
	}
	const panelW, h = 16 * vg.Centimeter, 11 * vg.Centimeter
	stripH := vg.Length(0)
	for _, e := range legends {
		stripH = max(stripH, legendHeight(e))
	}
	img := vgimg.New(panelW*vg.Length(len(row)), h+stripH)
	dc := draw.New(img)
	plots, strips := legendBelow(dc, stripH)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, plots)
	for i, p := range row {
		p.Draw(canvases[0][i])
		// The strip under this panel, from its data area's left edge.
		c := strips
		c.Min.X, c.Max.X = p.DataCanvas(canvases[0][i]).Min.X, canvases[0][i].Max.X
		drawLegend(c, legends[i])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// legendEntry is one line of a panel's legend.
type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

// legendColumns is how many columns a panel's legend takes in its strip.
const legendColumns = 2

// legendColumn returns column k's entries of a legend laid out column by
// column in legendColumns columns.
func legendColumn(entries []legendEntry, k int) []legendEntry {
	rows := (len(entries) + legendColumns - 1) / legendColumns
	lo, hi := min(k*rows, len(entries)), min((k+1)*rows, len(entries))
	return entries[lo:hi]
}

func newLegend(entries []legendEntry) plot.Legend {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	for _, e := range entries {
		l.Add(e.name, e.thumbs...)
	}
	return l
}

// legendHeight is the height of the strip entries need, with a margin above
// (clear of the x axis label) and below.
func legendHeight(entries []legendEntry) vg.Length {
	if len(entries) == 0 {
		return 0
	}
	l := newLegend(legendColumn(entries, 0))
	r := l.Rectangle(draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: 1000, Y: 1000}}})
	return r.Size().Y + 4*vg.Millimeter
}

// legendBelow splits c into the plots' canvas above and the legend strip of
// height stripH below it.
func legendBelow(c draw.Canvas, stripH vg.Length) (plots, strip draw.Canvas) {
	plots = draw.Crop(c, 0, 0, stripH, 0)
	strip = c
	strip.Max.Y = c.Min.Y + stripH
	return plots, strip
}

// drawLegend draws entries into the strip c, column by column.
func drawLegend(c draw.Canvas, entries []legendEntry) {
	w := (c.Max.X - c.Min.X) / legendColumns
	for k := range legendColumns {
		col := c
		col.Min.X = c.Min.X + vg.Length(k)*w
		col.Max.X = col.Min.X + w
		col.Max.Y -= 2 * vg.Millimeter
		l := newLegend(legendColumn(entries, k))
		l.Draw(col)
	}
}

func thresholdText(t term) string {
	if t.AtLeast {
		return ">= " + strconv.FormatFloat(t.Threshold, 'g', -1, 64)
	}
	return "<= " + strconv.FormatFloat(t.Threshold, 'g', -1, 64) + " s"
}

// panel is the figure's panel of SLO term ti, and its legend, which figure
// draws outside the panel's data area (the plot's own legend stays empty).
func (r *Result) panel(ti int, t term, xLabel, xWord string) (*plot.Plot, []legendEntry, error) {
	p := plot.New()
	var legend []legendEntry
	unit := " (s)"
	if t.AtLeast {
		unit = fmt.Sprintf(" (TTFB <= %s)", r.Config.SLO.GoodputTTFB)
	}
	p.Title.Text = fmt.Sprintf("%s vs %s, SLO %s", t.Name, xWord, thresholdText(t))
	p.Title.Padding = report.TitlePadding
	p.X.Label.Text = xLabel
	p.Y.Label.Text = t.Name + unit
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker = report.RoundTicks{}
	p.Y.Tick.Marker = report.RoundTicks{}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for pi, pr := range r.Policies {
		col := report.Palette(pi)
		var xys plotter.XYs
		var errs plotter.YErrors
		for _, pt := range sortedPoints(pr.Points, r.inverse()) {
			v := pt.Terms[ti].Delta
			if math.IsNaN(v.Value) {
				continue
			}
			x := float64(pt.Sessions)
			if r.inverse() {
				x = float64(pt.Replicas)
			}
			xmin, xmax = min(xmin, x), max(xmax, x)
			xys = append(xys, plotter.XY{X: x, Y: v.Value})
			h := v.CIHalf
			if math.IsNaN(h) {
				h = 0
			}
			errs = append(errs, struct{ Low, High float64 }{h, h})
		}
		if len(xys) == 0 {
			continue
		}
		ln, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, err
		}
		ln.Color, ln.Width = col, vg.Points(1.5)
		sc.Color, sc.Shape, sc.Radius = col, draw.CircleGlyph{}, vg.Points(2.5)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys, errs})
		if err != nil {
			return nil, nil, err
		}
		eb.Color = col
		p.Add(ln, sc, eb)
		legend = append(legend, legendEntry{pr.Policy, []plot.Thumbnailer{ln, sc}})
		if k := pr.Knee; k != nil && !math.IsNaN(k.Terms[ti].Delta.Value) {
			x := float64(k.Sessions)
			if r.inverse() {
				x = float64(k.Replicas)
			}
			knee, err := plotter.NewScatter(plotter.XYs{{X: x, Y: k.Terms[ti].Delta.Value}})
			if err != nil {
				return nil, nil, err
			}
			knee.Color, knee.Shape, knee.Radius = col, draw.RingGlyph{}, vg.Points(7)
			p.Add(knee)
		}
	}
	if !math.IsInf(xmin, 0) {
		thr, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: t.Threshold}, {X: xmax, Y: t.Threshold}})
		if err != nil {
			return nil, nil, err
		}
		thr.Color, thr.Dashes, thr.Width = color.Gray{Y: 80}, []vg.Length{vg.Points(5), vg.Points(3)}, vg.Points(1)
		p.Add(thr)
		legend = append(legend, legendEntry{"SLO " + thresholdText(t) + " (ring: knee)", []plot.Thumbnailer{thr}})
	}
	return p, legend, nil
}
