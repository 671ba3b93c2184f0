package report

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/lmwarden/warden/internal/atomicfile"
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

// figMargin is the space left free at a single figure's top edge, so its
// title does not touch the image's frame (renderTiles pads its tiles alike).
const figMargin = 2 * vg.Millimeter

// renderPNG draws p into a PNG of the figure size.
func renderPNG(p *plot.Plot) ([]byte, error) {
	img := vgimg.New(figWidth, figHeight)
	dc := draw.New(img)
	if p.BackgroundColor != nil {
		dc.SetColor(p.BackgroundColor)
		dc.Fill(dc.Rectangle.Path())
	}
	p.Draw(draw.Crop(dc, 0, 0, 0, -figMargin))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
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
	// errs, when set, are pts' intervals, drawn as error bars.
	errs plotter.YErrors
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
		if l.errs != nil {
			eb, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{l.pts, l.errs})
			if err != nil {
				return err
			}
			eb.Color, eb.Width, eb.CapWidth = l.colour, vg.Points(1.5), vg.Points(8)
			p.Add(eb)
		}
		p.Legend.Add(l.label, ln, sc)
	}
	return nil
}

func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = TitlePadding
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
		if l.errs != nil {
			// The bars' ends, so the legend keeps clear of them too.
			lo, hi := make(plotter.XYs, len(l.pts)), make(plotter.XYs, len(l.pts))
			for i, pt := range l.pts {
				lo[i] = plotter.XY{X: pt.X, Y: pt.Y - l.errs[i].Low}
				hi[i] = plotter.XY{X: pt.X, Y: pt.Y + l.errs[i].High}
			}
			curves = append(curves, curve{pts: lo}, curve{pts: hi})
		}
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
			return stageFigure(m, sums, "Output tokens per minute", "output tokens/min", 0, func(s *Summary) float64 { return s.OutputTokensPerMin }, nil)
		}), "", ""},
		{"sessions_per_h.png", "Completed sessions per hour vs sessions", single(func() (*plot.Plot, error) {
			return stageFigure(m, sums, "Completed sessions per hour (bars: Poisson 95 % interval of the count)", "sessions/h", 0,
				func(s *Summary) float64 { return s.SessionsPerH }, (*Summary).SessionsPerHInterval)
		}), sessionsPerHNote, ""},
		{"replicas_busy.png", "Replicas busy vs sessions", single(func() (*plot.Plot, error) {
			return stageFigure(m, sums, "Replicas with running requests (mean over polls)", "replicas busy",
				float64(len(m.Replicas)), func(s *Summary) float64 { return s.ReplicasBusy }, nil)
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
	if k := keysOf(m); k.windows {
		for i := range figs {
			// The x axis is the replay's time (stageAxisOf), not sessions held.
			figs[i].title = strings.Replace(figs[i].title, " vs sessions", " vs replay time", 1)
		}
		why := "left out: a request trace marks no conversation's last turn, so no session completes"
		if k.agent {
			why = "left out: per report window it is n/a; completed session trees are in the whole-run table (trees.csv)"
		}
		for i := range figs {
			if figs[i].file == "sessions_per_h.png" {
				figs[i].omitted = why
			}
		}
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

// sessionsPerHNote is sessions_per_h.png's line in summary.md: what its error
// bars are (Summary.SessionsPerHInterval).
const sessionsPerHNote = "the bars are the exact (Garwood) Poisson 95 % interval of each stage's " +
	"completed-sessions count, x 3600 / window s (a short window completes few sessions, " +
	"so a stage-to-stage zigzag inside the bars is noise)"

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

func maxY(pts plotter.XYs) float64 {
	m := 0.0
	for _, p := range pts {
		m = max(m, p.Y)
	}
	return m
}
