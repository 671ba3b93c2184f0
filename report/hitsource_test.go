package report

import (
	"bytes"
	"image"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

// llamaCppRun is syntheticRun as a llama.cpp fleet writes it: series.csv has
// no prefix-cache counters, no prompt_tokens and no kv_usage (NaN, as
// loadgenhttp writes a figure the engine lacks), only the computed-prompt
// counter; usage reports cached tokens unless noUsage, and the
// computed-prompt counter is gone too with noComputed.
func llamaCppRun(noUsage, noComputed bool) (*loadgen.Manifest, []loadgen.Result, []loadgen.SeriesSample) {
	m, results, series := syntheticRun()
	nan := math.NaN()
	for i := range series {
		s := &series[i]
		s.PrefixQueries, s.PrefixHits, s.PromptTokens, s.KVUsage = nan, nan, nan, nan
		if noComputed {
			s.PromptComputedTokens = nan
		}
	}
	if noUsage {
		for i := range results {
			results[i].CachedTokens = -1
		}
	}
	return m, results, series
}

// generateRun writes llamaCppRun(noUsage, noComputed) into a new directory
// (with stale copies of the two hit-rate figures, as an earlier report left
// them), generates the report and returns the directory and its summary.md.
func generateRun(t *testing.T, noUsage, noComputed bool) (string, string) {
	t.Helper()
	m, results, series := llamaCppRun(noUsage, noComputed)
	dir := t.TempDir()
	writeRunDir(t, dir, m, results, series)
	for _, f := range []string{"prefix_hits.png", "replica_hits.png"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("stale"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := Generate(dir, &out); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, SummaryMDFile))
	if err != nil {
		t.Fatal(err)
	}
	return dir, string(md)
}

// drawnFromData checks that file shows both variants' data: their colours
// cover more than a legend swatch (seen: empty axes have 0 pixels of either
// in a line figure, about 300 in the bar figure's legend; the lines over
// three stages about 1,200-1,400, the bars over 20,000).
func drawnFromData(t *testing.T, dir, file string) {
	t.Helper()
	img := decodePNG(t, filepath.Join(dir, file))
	for _, c := range []struct {
		name string
		n    int
	}{{"off", colourPixels(img, colourOff)}, {"on", colourPixels(img, colourOn)}} {
		if c.n < 1000 {
			t.Errorf("%s: %d pixels of variant %s's colour: nothing drawn beyond a legend?", file, c.n, c.name)
		}
	}
}

// A llama.cpp results directory (no hit counter): prefix_hits.png and
// replica_hits.png were empty axes. Now they are drawn from the responses'
// usage (cached / prompt tokens), titled so, with a line in summary.md
// saying where they come from.
func TestHitFiguresWithoutCountersUseUsage(t *testing.T) {
	dir, md := generateRun(t, false, false)
	drawnFromData(t, dir, "prefix_hits.png")
	drawnFromData(t, dir, "replica_hits.png")
	for _, want := range []string{
		"prefix_hits.png: drawn from the responses' usage (usage cached % of results.csv): no replica exported prefix-cache counters",
		"replica_hits.png: drawn from the responses' usage of the turns each replica served",
		"![Prefix-cache hit rate vs sessions (responses' usage)](prefix_hits.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md[strings.Index(md, "## Figures"):])
		}
	}
}

// Without usage cache counts either, prefix_hits.png falls back to the
// computed-prompt counter; replica_hits.png, which has no per-replica
// counterpart of it, is left out, its stale copy removed, and summary.md
// says why. With the computed-prompt counter gone too, both are left out.
func TestHitFiguresLeftOutSaySo(t *testing.T) {
	dir, md := generateRun(t, true, false)
	drawnFromData(t, dir, "prefix_hits.png")
	if !strings.Contains(md, "prefix_hits.png: drawn from the computed-prompt counter") {
		t.Errorf("summary.md does not say prefix_hits.png is from the computed-prompt counter:\n%s", md)
	}
	if _, err := os.Stat(filepath.Join(dir, "replica_hits.png")); !os.IsNotExist(err) {
		t.Errorf("replica_hits.png still there (stat: %v)", err)
	}
	if want := "`replica_hits.png` (Prefix-cache hit rate per replica): not drawn: no replica exported prefix-cache counters"; !strings.Contains(md, want) {
		t.Errorf("summary.md lacks %q", want)
	}

	dir, md = generateRun(t, true, true)
	for _, f := range []string{"prefix_hits.png", "replica_hits.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s still there (stat: %v)", f, err)
		}
		if want := "`" + f + "` (Prefix-cache hit rate "; !strings.Contains(md, want) || !strings.Contains(md, "not drawn: ") {
			t.Errorf("summary.md lacks the line saying why %s is not drawn", f)
		}
	}
	if strings.Contains(md, "](prefix_hits.png)") || strings.Contains(md, "](replica_hits.png)") {
		t.Errorf("summary.md links a figure that was not drawn")
	}
}

// colourPixels counts the pixels of img within 8 per channel of c.
func colourPixels(img image.Image, c color.RGBA) int {
	near := func(a, b uint8) bool { return int(a)-int(b) < 8 && int(b)-int(a) < 8 }
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			p := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			if near(p.R, c.R) && near(p.G, c.G) && near(p.B, c.B) {
				n++
			}
		}
	}
	return n
}
