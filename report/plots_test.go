package report

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return img
}

// colourStats returns the number of distinct colours in img and whether each
// wanted colour appears (within 8 per channel, to allow for anti-aliasing).
func colourStats(img image.Image, want ...color.RGBA) (distinct int, found []bool) {
	seen := make(map[color.RGBA]bool)
	found = make([]bool, len(want))
	near := func(a, b uint8) bool { return int(a)-int(b) < 8 && int(b)-int(a) < 8 }
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y++ {
		for x := bnd.Min.X; x < bnd.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			seen[c] = true
			for i, w := range want {
				if near(c.R, w.R) && near(c.G, w.G) && near(c.B, w.B) {
					found[i] = true
				}
			}
		}
	}
	return len(seen), found
}

func TestPlots(t *testing.T) {
	dir, _ := generated(t)
	for _, tc := range []struct {
		file          string
		width, height int
		colours       []color.RGBA // must appear: the series drawn
	}{
		{"ttfb.png", 768, 480, []color.RGBA{colourOff, colourOn}},
		{"output_tokens.png", 768, 480, []color.RGBA{colourOff, colourOn}},
		{"sessions_per_h.png", 768, 480, []color.RGBA{colourOff, colourOn}},
		{"replicas_busy.png", 768, 480, []color.RGBA{colourOff, colourOn}},
		{"prefix_hits.png", 768, 480, []color.RGBA{colourOff, colourOn}},
		{"replica_hits.png", 768, 480, []color.RGBA{colourOff, colourOn}},
		{"ttfb_cdf.png", 3 * 384, 307, []color.RGBA{colourOff, colourOn}}, // three 4 x 3.2 in panels
		{"replica_requests.png", 2 * 480, 480, []color.RGBA{colourOff, colourOn, colourPlaced, colourMoved}},
		{"prompt_tokens_off.png", 768, 480, []color.RGBA{colourCached, colourComputed}},
		{"prompt_tokens_on.png", 768, 480, []color.RGBA{colourCached, colourComputed}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			img := decodePNG(t, filepath.Join(dir, tc.file))
			if b := img.Bounds(); b.Dx() != tc.width || b.Dy() != tc.height {
				t.Errorf("size %dx%d, want %dx%d", b.Dx(), b.Dy(), tc.width, tc.height)
			}
			distinct, found := colourStats(img, tc.colours...)
			if distinct < 8 {
				t.Errorf("%d distinct colours: blank image?", distinct)
			}
			for i, ok := range found {
				if !ok {
					t.Errorf("colour %v not drawn", tc.colours[i])
				}
			}
		})
	}
}

// imagesClose reports whether a and b have the same size and at most 0.5 % of
// pixels differ by more than 16 in some channel. (gonum's cmpimg would do, but it
// pulls rsc.io/pdf into go.mod for PDF support we do not need.)
func imagesClose(a, b image.Image) bool {
	if a.Bounds() != b.Bounds() {
		return false
	}
	diff, total := 0, 0
	far := func(x, y uint8) bool { return int(x)-int(y) > 16 || int(y)-int(x) > 16 }
	bnd := a.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y++ {
		for x := bnd.Min.X; x < bnd.Max.X; x++ {
			total++
			ca := color.RGBAModel.Convert(a.At(x, y)).(color.RGBA)
			cb := color.RGBAModel.Convert(b.At(x, y)).(color.RGBA)
			if far(ca.R, cb.R) || far(ca.G, cb.G) || far(ca.B, cb.B) || far(ca.A, cb.A) {
				diff++
			}
		}
	}
	return diff*200 <= total
}

// TestPlotGolden compares ttfb.png with a reference image, with a small
// tolerance; -update rewrites it.
func TestPlotGolden(t *testing.T) {
	dir, _ := generated(t)
	got, err := os.ReadFile(filepath.Join(dir, "ttfb.png"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "ttfb_golden.png")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("reading golden image (run with -update to create it): %v", err)
	}
	gotImg, err := png.Decode(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	if !imagesClose(gotImg, decodePNG(t, path)) {
		t.Error("ttfb.png differs from testdata/ttfb_golden.png (check it, then run with -update)")
	}
}

// TestGenerateNoData: a run with a manifest and nothing else still gives every
// file, with n/a instead of numbers and no panic from the log axes.
func TestGenerateNoData(t *testing.T) {
	dir := t.TempDir()
	m := &loadgen.Manifest{RunID: "empty", Scenario: testScenario([]int{4, 8}, 0), Replicas: []string{"r0"},
		Variants: []loadgen.Variant{
			{Name: "off", Stages: []loadgen.StageWindow{{Sessions: 4, Start: 0, End: sec(60)}, {Sessions: 8, Start: sec(60), End: sec(120)}}},
			{Name: "on", Affinity: true, Stages: []loadgen.StageWindow{{Sessions: 4, Start: sec(200), End: sec(260)}}},
		}}
	writeRunDir(t, dir, m, nil, nil)
	var out bytes.Buffer
	if err := Generate(dir, &out); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, SummaryMDFile))
	if err != nil {
		t.Fatal(err)
	}
	// Stage 8 exists only for "off": its "on" side is n/a too. The synthetic stages
	// are not marked Complete, so they read as cut short.
	if !strings.Contains(string(md), "| 8 (partial) | 0 -> n/a | 0 -> n/a | n/a -> n/a |") {
		t.Errorf("summary.md rows not as expected:\n%s", md)
	}
	for _, f := range []string{"ttfb.png", "prefix_hits.png", "ttfb_cdf.png", "replica_requests.png", "replica_hits.png"} {
		decodePNG(t, filepath.Join(dir, f))
	}
	if _, err := os.Stat(filepath.Join(dir, "prompt_tokens_off.png")); !os.IsNotExist(err) {
		t.Errorf("prompt_tokens_off.png written without series (stat: %v)", err)
	}
}
