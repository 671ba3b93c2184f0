package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file (run with -update after checking):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// generated runs Generate on the synthetic run and returns the directory and the
// terminal output.
func generated(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	m, results, series := syntheticRun()
	writeRunDir(t, dir, m, results, series)
	var out bytes.Buffer
	if err := Generate(dir, &out); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return dir, out.String()
}

func TestGenerateGolden(t *testing.T) {
	dir, table := generated(t)
	for _, name := range []string{ResultsCSVFile, TurnsByIndexCSVFile, SummaryMDFile, ResultsJSONFile} {
		t.Run(name, func(t *testing.T) {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
		})
	}
	t.Run("terminal table", func(t *testing.T) { golden(t, "table.txt", []byte(table)) })
	t.Run("no temporary files left", func(t *testing.T) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("leftover file %s", e.Name())
			}
		}
	})
}

func TestSummaryMarkdownShape(t *testing.T) {
	dir, table := generated(t)
	md, err := os.ReadFile(filepath.Join(dir, SummaryMDFile))
	if err != nil {
		t.Fatal(err)
	}
	run, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := Summarize(run)
	if err != nil {
		t.Fatal(err)
	}
	// The first data row of the reference table carries "off -> on" cells built
	// from the two variants' first stages.
	off, on := sums[0], sums[3]
	if off.Variant != "off" || on.Variant != "on" || off.Sessions != on.Sessions {
		t.Fatalf("unexpected summary order: %s/%d, %s/%d", off.Variant, off.Sessions, on.Variant, on.Sessions)
	}
	cell := fmtThousands(off.OutputTokensPerMin) + " -> " + fmtThousands(on.OutputTokensPerMin)
	for name, text := range map[string]string{"summary.md": string(md), "terminal": table} {
		if !strings.Contains(text, cell) {
			t.Errorf("%s lacks the cell %q", name, cell)
		}
	}
	if !strings.Contains(string(md), "![TTFB p50 and p95 vs sessions](ttfb.png)") {
		t.Error("summary.md does not link ttfb.png")
	}
}

func TestResultsJSONNaN(t *testing.T) {
	s := Summary{Variant: "off", Sessions: 4, TTFBP50S: 1.5, PrefixHitsPct: math.NaN(), Notes: []string{"x"}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !strings.Contains(string(b), `"prefix_hits_pct":null`) || !strings.Contains(string(b), `"ttfb_p50_s":1.5`) {
		t.Errorf("encoded %s", b)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if !math.IsNaN(back.PrefixHitsPct) || back.TTFBP50S != 1.5 || back.Variant != "off" || back.Notes[0] != "x" {
		t.Errorf("round trip gave %+v", back)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{5886.4, "5,886"},
		{10752, "10,752"},
		{999.5, "1,000"},
		{12, "12"},
		{1234567, "1,234,567"},
		{-4321, "-4,321"},
		{math.NaN(), "n/a"},
	} {
		if got := fmtThousands(tc.v); got != tc.want {
			t.Errorf("fmtThousands(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
	if got := csvFloat(math.NaN()); got != "" {
		t.Errorf("csvFloat(NaN) = %q, want empty", got)
	}
}

// A stage too short for sub-windows has no noise estimate: its TTFB and output
// tokens/min cells are marked "?" (not left unmarked, which reads as significant),
// columns that never have an estimate stay unmarked, and a known within-noise
// change keeps "*".
func TestReferenceTableMarksUnknownNoise(t *testing.T) {
	nan := math.NaN()
	short := func(variant string, tok, p50 float64) Summary {
		return Summary{Variant: variant, Stage: 0, Sessions: 4, OutputTokensPerMin: tok, TTFBP50S: p50, TTFBP95S: 2 * p50,
			OutputTokensPerMinStdErr: nan, TTFBP50StdErrS: nan, TTFBP95StdErrS: nan, PrefixHitsPct: 50}
	}
	known := func(variant string, tok float64) Summary {
		s := short(variant, tok, 1)
		s.Stage, s.Sessions = 1, 8
		s.OutputTokensPerMinStdErr, s.TTFBP50StdErrS, s.TTFBP95StdErrS = 100, 0.5, 0.5
		return s
	}
	sums := []Summary{short("off", 1000, 0.19), short("on", 1200, 0.05), known("off", 1000), known("on", 1010)}
	header, rows := referenceTable([]string{"off", "on"}, sums)
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q in %v", name, header)
		return -1
	}
	if len(rows) != 2 {
		t.Fatalf("rows = %v", rows)
	}
	for _, c := range []string{"out tok/min", "TTFB p50 (s)"} {
		if got := rows[0][col(c)]; !strings.HasSuffix(got, unknownNoiseMark) {
			t.Errorf("short stage, %s = %q: want the %q mark", c, got, unknownNoiseMark)
		}
		if got := rows[1][col(c)]; !strings.HasSuffix(got, noiseMark) {
			t.Errorf("stage with noise, %s = %q: want the %q mark", c, got, noiseMark)
		}
	}
	if got := rows[0][col("prefix hits %")]; strings.HasSuffix(got, unknownNoiseMark) || strings.HasSuffix(got, noiseMark) {
		t.Errorf("prefix hits %q: a column without noise estimates is not marked", got)
	}
}
