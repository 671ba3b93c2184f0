package report

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/lmwarden/warden/internal/atomicfile"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/loadgen"
)

// Figure is one PNG WritePlots wrote, or one it left out (Omitted).
type Figure struct {
	File  string // file name inside the results directory
	Title string
	// Note says where a figure's data came from when it is not the usual
	// source (e.g. the responses' usage for an engine without a hit counter).
	Note string
	// Omitted, when set, says why File was not drawn: the run has none of
	// the figure's sources (no empty axes; hitsource.go).
	Omitted string
}

// Figure size: 8 x 5 in at vgimg.DefaultDPI (96) = 768 x 480 px. Tiled figures
// use panels of cdfPanelW x cdfPanelH (ttfb_cdf.png, up to 3 per row) and
// replicaPanelW x figHeight (replica_requests.png, one per variant).
const (
	figWidth      = 8 * vg.Inch
	figHeight     = 5 * vg.Inch
	cdfPanelW     = 4 * vg.Inch
	cdfPanelH     = 3.2 * vg.Inch
	replicaPanelW = 5 * vg.Inch
)

// minLogTTFB is the floor for values drawn on a log axis (1 ms): a value <= 0
// cannot be placed on a log scale and makes gonum/plot panic.
const minLogTTFB = 1e-3

// Colours: the Okabe-Ito palette (palette.go). Affinity off is always vermillion
// and on always blue, in every figure; further variants take the rest.
var (
	colourOff   = vermillion
	colourOn    = blue
	colourExtra = []color.RGBA{bluishGreen, reddishPurple, orange, skyBlue, black}
	// Stacked prompt tokens and per-replica categories.
	colourCached   = bluishGreen
	colourComputed = orange
	colourMoved    = reddishPurple
	colourPlaced   = color.RGBA{R: 150, G: 150, B: 150, A: 255}
)

// variantColours assigns each variant of m its colour: the first variant with
// affinity off gets colourOff, the first with affinity on colourOn, others the
// extra colours in manifest order.
func variantColours(m *loadgen.Manifest) map[string]color.RGBA {
	out := make(map[string]color.RGBA)
	extra := 0
	seenOff, seenOn := false, false
	for _, v := range m.Variants {
		switch {
		case !v.Affinity && !seenOff:
			out[v.Name], seenOff = colourOff, true
		case v.Affinity && !seenOn:
			out[v.Name], seenOn = colourOn, true
		default:
			out[v.Name] = colourExtra[extra%len(colourExtra)]
			extra++
		}
	}
	return out
}

// renderPNG draws p into a PNG of the figure size.
func renderPNG(p *plot.Plot) ([]byte, error) {
	wt, err := p.WriterTo(figWidth, figHeight, "png")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// renderTiles draws a grid of plots (nil cells stay empty) into one PNG.
func renderTiles(grid [][]*plot.Plot, w, h vg.Length) ([]byte, error) {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{
		Rows: len(grid), Cols: len(grid[0]),
		PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
	}
	canvases := plot.Align(grid, tiles, dc)
	for j, row := range grid {
		for i, p := range row {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// lineSpec is one line of a per-stage figure.
type lineSpec struct {
	label  string
	colour color.Color
	dashed bool
	glyph  draw.GlyphDrawer
	pts    plotter.XYs
}

// addLines adds lines with glyphs and legend entries to p. Lines without points
// are left out.
func addLines(p *plot.Plot, lines []lineSpec) error {
	for _, l := range lines {
		if len(l.pts) == 0 {
			continue
		}
		ln, sc, err := plotter.NewLinePoints(l.pts)
		if err != nil {
			return err
		}
		ln.Color = l.colour
		ln.Width = vg.Points(2)
		if l.dashed {
			ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		sc.Color = l.colour
		sc.Radius = vg.Points(3.5)
		sc.Shape = draw.CircleGlyph{}
		if l.glyph != nil {
			sc.Shape = l.glyph
		}
		p.Add(ln, sc)
		p.Legend.Add(l.label, ln, sc)
	}
	return nil
}

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

func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	p.Y.Tick.Marker = PlainTicks{}
	p.X.Tick.Marker = PlainTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

// legendFor places p's legend away from the lines, for a single figure.
func legendFor(p *plot.Plot, lines []lineSpec) {
	var curves []curve
	n, longest := 0, 0
	for _, l := range lines {
		if len(l.pts) == 0 {
			continue
		}
		curves = append(curves, curve{pts: l.pts})
		n++
		longest = max(longest, len(l.label))
	}
	placeLegend(p, curves, n, longest, figWidth, figHeight)
}

// padX widens p's x range by 5 % on each side so points at the ends stay clear of
// the frame.
func padX(p *plot.Plot) {
	if r := p.X.Max - p.X.Min; r > 0 {
		p.X.Min -= 0.05 * r
		p.X.Max += 0.05 * r
	}
}

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

// setLogY switches p's y axis to a log scale around the data; with no points it
// keeps a linear axis.
func setLogY(p *plot.Plot, lines []lineSpec) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, pt := range l.pts {
			lo, hi = min(lo, pt.Y), max(hi, pt.Y)
		}
	}
	if math.IsInf(lo, 1) {
		return // nothing to draw: keep a linear axis
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = LogTicks{}
	// A factor of 1.6 on each side spans more than 2.5, the widest gap between
	// labelled 1-2-5 ticks, so at least one tick is labelled.
	p.Y.Min, p.Y.Max = lo/1.6, hi*1.6
}

// stageFigure draws one per-stage metric, one line per variant, from 0 up to the
// data (or to yMax when yMax > 0, e.g. 100 for a percentage).
func stageFigure(m *loadgen.Manifest, sums []Summary, title, yLabel string, yMax float64, value func(*Summary) float64) (*plot.Plot, error) {
	colours := variantColours(m)
	ax := stageAxisOf(m, sums)
	p := newPlot(title, ax.label, yLabel)
	p.X.Tick.Marker = ax.ticker
	var lines []lineSpec
	for _, v := range m.Variants {
		lines = append(lines, lineSpec{label: variantLabel(v), colour: colours[v.Name],
			pts: stagePoints(sums, v.Name, ax.x, value, math.NaN())})
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

func variantLabel(v loadgen.Variant) string {
	aff := "off"
	if v.Affinity {
		aff = "on"
	}
	if v.Name == aff {
		return "affinity " + aff
	}
	return fmt.Sprintf("%s (affinity %s)", v.Name, aff)
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

// WritePlots draws the figures for run into dir (PNG, headless) and returns the
// files written, in this order:
//
//	ttfb.png             TTFB p50 and p95 vs sessions, per variant, log y
//	output_tokens.png    output tokens/min vs sessions
//	sessions_per_h.png   completed sessions per hour vs sessions
//	replicas_busy.png    mean replicas with running requests vs sessions
//	prefix_hits.png      prefix-cache hit rate (counter deltas) vs sessions
//	ttfb_cdf.png         TTFB distribution per stage, one panel per stage
//	replica_requests.png per replica: turns placed (turn 0), stayed, moved in; a panel per variant
//	replica_hits.png     per replica prefix-cache hit rate over each variant's run
//	prompt_tokens_<variant>.png  prompt tokens/s over time, read from cache vs computed (PromptRates)
//
// An agent-session replay (manifest agent_traces) gets first
//
//	session_time_cdf.png session completion time CDF of the complete trees, per variant (SummarizeAgents)
//
// prefix_hits.png and replica_hits.png take the hit rate from the engines'
// prefix-cache counters, and from what exists when no replica has them
// (llama.cpp): the responses' usage (cached / prompt tokens), for
// prefix_hits.png else the computed-prompt counter; with none of these they
// are left out, returned with Omitted saying why (hitsource.go). Other figures
// lacking data, and these two in a run with neither turns nor series, are
// still drawn (empty, titled) so the set is stable, except
// prompt_tokens_<variant>.png, which needs series samples.
func WritePlots(dir string, run *Run, sums []Summary) ([]Figure, error) {
	m := &run.Manifest
	single := singlePlot
	figs := []fig{
		{"ttfb.png", "TTFB p50 and p95 vs sessions", single(func() (*plot.Plot, error) { return ttfbFigure(m, sums) }), "", ""},
		{"output_tokens.png", "Output tokens per minute vs sessions", single(func() (*plot.Plot, error) {
			return stageFigure(m, sums, "Output tokens per minute", "output tokens/min", 0, func(s *Summary) float64 { return s.OutputTokensPerMin })
		}), "", ""},
		{"sessions_per_h.png", "Completed sessions per hour vs sessions", single(func() (*plot.Plot, error) {
			return stageFigure(m, sums, "Completed sessions per hour", "sessions/h", 0, func(s *Summary) float64 { return s.SessionsPerH })
		}), "", ""},
		{"replicas_busy.png", "Replicas busy vs sessions", single(func() (*plot.Plot, error) {
			return stageFigure(m, sums, "Replicas with running requests (mean over polls)", "replicas busy",
				float64(len(m.Replicas)), func(s *Summary) float64 { return s.ReplicasBusy })
		}), "", ""},
		prefixHitsFig(run, sums),
		{"ttfb_cdf.png", "TTFB distribution per stage", func() ([]byte, error) { return ttfbCDFFigure(run, sums) }, "", ""},
		{"replica_requests.png", "Requests per replica", func() ([]byte, error) { return replicaRequestsFigure(run) }, "", ""},
		replicaHitsFig(run),
	}
	if len(m.AgentTraces) > 0 {
		figs = append([]fig{{SessionTimeFigureFile, "Session completion time, complete trees", single(func() (*plot.Plot, error) {
			_, trees := SummarizeAgents(run)
			return sessionTimeFigure(m, trees)
		}), "", ""}}, figs...)
	}
	for _, v := range m.Variants {
		series := variantSeries(run.Series, v.Name)
		if len(series) == 0 {
			continue
		}
		figs = append(figs, fig{"prompt_tokens_" + fileSafe(v.Name) + ".png", "Prompt tokens per second, " + variantLabel(v),
			single(func() (*plot.Plot, error) { return promptTokensFigure(v, series, variantResults(run.Results, v.Name)) }), "", ""})
	}

	var out []Figure
	for _, f := range figs {
		if f.omitted != "" {
			// A stale one from an earlier report of this directory goes too.
			if err := os.Remove(filepath.Join(dir, f.file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return out, err
			}
			out = append(out, Figure{File: f.file, Title: f.title, Omitted: f.omitted})
			continue
		}
		b, err := f.make()
		if err != nil {
			return out, fmt.Errorf("drawing %s: %w", f.file, err)
		}
		if err := atomicfile.Write(filepath.Join(dir, f.file), b); err != nil {
			return out, err
		}
		out = append(out, Figure{File: f.file, Title: f.title, Note: f.note})
	}
	return out, nil
}

// fileSafe maps a variant name to a file-name fragment.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// ofVariant returns the items of all whose variant (of) is variant.
func ofVariant[T any](all []T, variant string, of func(*T) string) []T {
	var out []T
	for i := range all {
		if of(&all[i]) == variant {
			out = append(out, all[i])
		}
	}
	return out
}

func variantResults(all []loadgen.Result, variant string) []loadgen.Result {
	return ofVariant(all, variant, func(r *loadgen.Result) string { return r.Variant })
}

func variantSeries(all []loadgen.SeriesSample, variant string) []loadgen.SeriesSample {
	return ofVariant(all, variant, func(s *loadgen.SeriesSample) string { return s.Variant })
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

func variantNames(m *loadgen.Manifest) []string {
	out := make([]string, len(m.Variants))
	for i, v := range m.Variants {
		out[i] = v.Name
	}
	return out
}

func variantIndex(m *loadgen.Manifest, name string) int {
	return slices.IndexFunc(m.Variants, func(v loadgen.Variant) bool { return v.Name == name })
}

// replicaNames returns the replica names seen in turns and series, in manifest
// order first, then sorted.
func replicaNames(run *Run) []string {
	seen := make(map[string]bool)
	var extra []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			extra = append(extra, n)
		}
	}
	for _, r := range run.Results {
		add(r.Replica)
	}
	for _, s := range run.Series {
		add(s.Replica)
	}
	var out []string
	for _, n := range run.Manifest.Replicas {
		if seen[n] {
			out = append(out, n)
			delete(seen, n)
		}
	}
	extra = slices.DeleteFunc(extra, func(n string) bool { return !seen[n] })
	slices.Sort(extra)
	return append(out, extra...)
}

// ReplicaTurns counts one variant's turns served by one replica: Placed are first
// turns (turn 0), Stayed later turns on the session's first replica, MovedIn later
// turns of sessions first placed elsewhere (overflow, or no affinity), Unknown later
// turns whose session's first replica is not known.
type ReplicaTurns struct {
	Placed, Stayed, MovedIn, Unknown int
}

// CountReplicaTurns tallies all turns of variant (every stage, warm-up included)
// by serving replica. Turns without a replica are left out.
func CountReplicaTurns(results []loadgen.Result, variant string) map[string]ReplicaTurns {
	placed := make(map[int64]string)
	for _, r := range results {
		if r.Variant == variant && r.Turn == 0 && r.Replica != "" {
			placed[r.Session] = r.Replica
		}
	}
	out := make(map[string]ReplicaTurns)
	for _, r := range results {
		if r.Variant != variant || r.Replica == "" {
			continue
		}
		c := out[r.Replica]
		first, ok := placed[r.Session]
		switch {
		case r.Turn == 0:
			c.Placed++
		case !ok:
			c.Unknown++
		case first == r.Replica:
			c.Stayed++
		default:
			c.MovedIn++
		}
		out[r.Replica] = c
	}
	return out
}

// replicaRequestsFigure draws, per variant, stacked bars per replica: first
// turns, later turns that stayed, later turns that moved in. Panels share the y
// range so variants compare at a glance.
func replicaRequestsFigure(run *Run) ([]byte, error) {
	m := &run.Manifest
	names := replicaNames(run)
	if len(m.Variants) == 0 {
		return renderPNG(newPlot("Requests per replica (no variants)", "replica", "turns"))
	}
	colours := variantColours(m)
	row := make([]*plot.Plot, len(m.Variants))
	top := 1.0
	var tops []plotter.XYs
	for i, v := range m.Variants {
		p := newPlot("Turns per replica, "+variantLabel(v), "replica", "turns (whole variant)")
		counts := CountReplicaTurns(run.Results, v.Name)
		var heights plotter.XYs
		if len(names) > 0 {
			var placed, stayed, moved plotter.Values
			for k, n := range names {
				c := counts[n]
				placed = append(placed, float64(c.Placed))
				stayed = append(stayed, float64(c.Stayed))
				moved = append(moved, float64(c.MovedIn+c.Unknown))
				total := float64(c.Placed + c.Stayed + c.MovedIn + c.Unknown)
				top = max(top, total)
				heights = append(heights, plotter.XY{X: float64(k) - 0.3, Y: total}, plotter.XY{X: float64(k) + 0.3, Y: total})
			}
			width := vg.Points(min(40, 200/float64(len(names))))
			bp, err := plotter.NewBarChart(placed, width)
			if err != nil {
				return nil, err
			}
			bs, err := plotter.NewBarChart(stayed, width)
			if err != nil {
				return nil, err
			}
			bm, err := plotter.NewBarChart(moved, width)
			if err != nil {
				return nil, err
			}
			bp.Color, bs.Color, bm.Color = colourPlaced, colours[v.Name], colourMoved
			for _, b := range []*plotter.BarChart{bp, bs, bm} {
				b.LineStyle.Width = 0
			}
			bs.StackOn(bp)
			bm.StackOn(bs)
			p.Add(bp, bs, bm)
			p.Legend.Add("first turn (placed)", bp)
			p.Legend.Add("later turn, stayed", bs)
			p.Legend.Add("later turn, moved in", bm)
			p.NominalX(names...)
			p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
		}
		tops = append(tops, heights)
		row[i] = p
	}
	for i, p := range row {
		p.Y.Min, p.Y.Max = 0, top
		placeLegend(p, []curve{{pts: tops[i], filled: true}}, 3, len("later turn, moved in"), replicaPanelW, figHeight)
	}
	// Headroom may differ per panel; keep the panels on one scale.
	maxY := 0.0
	for _, p := range row {
		maxY = max(maxY, p.Y.Max)
	}
	for _, p := range row {
		p.Y.Max = maxY
	}
	return renderTiles([][]*plot.Plot{row}, vg.Length(len(row))*replicaPanelW, figHeight)
}

// ReplicaHitsPct returns, per replica, 100 * delta(prefix hits) / delta(prefix
// queries) over all of the variant's series samples (first to last, reset-aware);
// NaN when the replica saw no query or a counter is missing.
func ReplicaHitsPct(series []loadgen.SeriesSample, variant string) map[string]float64 {
	out := make(map[string]float64)
	for _, rs := range groupSeries(variantSeries(series, variant)) {
		first, last := rs.samples[0].T, rs.samples[len(rs.samples)-1].T
		q, _ := counterDelta(rs.samples, first, last, func(x loadgen.SeriesSample) float64 { return x.PrefixQueries })
		h, _ := counterDelta(rs.samples, first, last, func(x loadgen.SeriesSample) float64 { return x.PrefixHits })
		out[rs.name] = pct(h, q)
	}
	return out
}

// replicaHitsFigure draws grouped bars: per replica, one bar per variant, the
// hit rate in percent that hits gives for a variant's name (ReplicaHitsPct,
// or replicaUsagePct), under title and yLabel.
func replicaHitsFigure(run *Run, title, yLabel string, hits func(variant string) map[string]float64) (*plot.Plot, error) {
	m := &run.Manifest
	colours := variantColours(m)
	p := newPlot(title, "replica", yLabel)
	names := replicaNames(run)
	if len(names) == 0 || len(m.Variants) == 0 {
		return p, nil
	}
	width := vg.Points(min(24, 240/float64(len(names)*len(m.Variants))))
	var heights plotter.XYs
	longest := 0
	for i, v := range m.Variants {
		hits := hits(v.Name)
		vals := make(plotter.Values, len(names))
		for k, n := range names {
			h, ok := hits[n]
			if !ok || math.IsNaN(h) {
				h = 0 // drawn as no bar; the table says n/a
			}
			vals[k] = h
			heights = append(heights, plotter.XY{X: float64(k) - 0.3, Y: h}, plotter.XY{X: float64(k) + 0.3, Y: h})
		}
		longest = max(longest, len(variantLabel(v)))
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		b.Color = colours[v.Name]
		b.LineStyle.Width = 0
		b.Offset = width * vg.Length(float64(i)-float64(len(m.Variants)-1)/2)
		p.Add(b)
		p.Legend.Add(variantLabel(v), b)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min, p.Y.Max = 0, 100
	p.Y.Tick.Marker = PlainTicks{Cap: 100}
	slices.SortFunc(heights, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	placeLegend(p, []curve{{pts: heights, filled: true}}, len(m.Variants), longest, figWidth, figHeight)
	return p, nil
}

// PromptRate is one bin of prompt-token throughput summed over replicas, in tokens
// per simulated second: Cached from delta(vllm:prefix_cache_hits_total), Computed
// from delta(vllm:prefix_cache_queries_total) - delta(hits), floored at 0 (for a
// replica without those counters, see PromptRates).
//
// Queries rather than vllm:prompt_tokens_total: vLLM V1 counts prefix-cache
// queries and hits together when a request is scheduled (v1/core/kv_cache_manager.py,
// PrefixCacheStats), but prompt tokens only once its prefill is done
// (v1/metrics/stats.py, IterationStats), so per-bin differences of the latter pair
// would split one request's cached and computed parts across bins. Over a whole run
// the two agree; a token the engine did not report as a hit counts as computed.
type PromptRate struct {
	Start, End       time.Duration
	Cached, Computed float64
}

// PromptRates bins series into intervals of width bin (simulated time) from the
// earliest sample. Each replica's counter increase between consecutive samples
// (reset-aware, vllmmetrics.CounterDelta) is spread evenly over the time between
// them and credited to the bins in proportion to overlap. Intervals with a NaN
// counter are skipped.
//
// A replica without prefix-cache counters (llama.cpp has none) but with the
// computed-prompt counter (series prompt_computed_tokens) gets Computed from
// that counter, spread the same way, and Cached from the responses' usage:
// each OK request of results served by it (Result.Replica) that reported
// cached tokens credits them to the bin of its Done (engines.CapabilityOf
// llamacpp, HitRate). results may be nil.
func PromptRates(series []loadgen.SeriesSample, results []loadgen.Result, bin time.Duration) []PromptRate {
	if len(series) == 0 || bin <= 0 {
		return nil
	}
	t0 := slices.MinFunc(series, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) }).T
	t1 := slices.MaxFunc(series, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) }).T
	n := int((t1-t0)/bin) + 1
	out := make([]PromptRate, n)
	for k := range out {
		out[k].Start = t0 + time.Duration(k)*bin
		out[k].End = out[k].Start + bin
	}
	cached := make([]float64, n)
	queried := make([]float64, n)
	computed := make([]float64, n) // from the computed-prompt counter (no prefix counters)
	usage := make([]float64, n)    // cached tokens from usage (no prefix counters)
	credit := func(dst []float64, from, to time.Duration, amount float64) {
		if to <= from {
			k := max(0, min(n-1, int((to-t0)/bin)))
			dst[k] += amount
			return
		}
		for k := int((from - t0) / bin); k < n && out[k].Start < to; k++ {
			overlap := min(to, out[k].End) - max(from, out[k].Start)
			if overlap > 0 {
				dst[k] += amount * float64(overlap) / float64(to-from)
			}
		}
	}
	usageCached := map[string]bool{} // replicas whose cached tokens come from usage
	for _, rs := range groupSeries(series) {
		for i := 1; i < len(rs.samples); i++ {
			a, b := rs.samples[i-1], rs.samples[i]
			dh := counterStep(a.PrefixHits, b.PrefixHits)
			dq := counterStep(a.PrefixQueries, b.PrefixQueries)
			if math.IsNaN(dh) && math.IsNaN(dq) {
				if dc := counterStep(a.PromptComputedTokens, b.PromptComputedTokens); !math.IsNaN(dc) {
					credit(computed, a.T, b.T, dc)
					usageCached[rs.name] = true
				}
				continue
			}
			if math.IsNaN(dh) || math.IsNaN(dq) {
				continue
			}
			credit(cached, a.T, b.T, dh)
			credit(queried, a.T, b.T, dq)
		}
	}
	for _, r := range results {
		if usageCached[r.Replica] && r.OK() && r.CachedTokens > 0 && r.Done >= t0 && r.Done <= t1 {
			credit(usage, r.Done, r.Done, float64(r.CachedTokens))
		}
	}
	for k := range out {
		sec := bin.Seconds()
		out[k].Cached = (cached[k] + usage[k]) / sec
		out[k].Computed = (max(0, queried[k]-cached[k]) + computed[k]) / sec
	}
	return out
}

// counterStep is vllmmetrics.CounterDelta with NaN propagated.
func counterStep(prev, cur float64) float64 {
	if math.IsNaN(prev) || math.IsNaN(cur) {
		return math.NaN()
	}
	return vllmmetrics.CounterDelta(prev, cur)
}

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

func maxY(pts plotter.XYs) float64 {
	m := 0.0
	for _, p := range pts {
		m = max(m, p.Y)
	}
	return m
}
