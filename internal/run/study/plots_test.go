package study

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

// tickLabels are the labelled ticks of an axis as its marker gives them.
func tickLabels(a plot.Axis) []string {
	var out []string
	for _, tk := range a.Tick.Marker.Ticks(a.Min, a.Max) {
		if tk.Label != "" {
			out = append(out, tk.Label)
		}
	}
	return out
}

// Study figures label their axes as the run figures do (report.PlainTicks,
// report.LogTicks): thousands grouped, no trailing zeros. gonum's default
// ticks print a 9,000-15,000 tokens/min axis as "10000.00", "12500.00".
func TestFigureTicksUseReportFormat(t *testing.T) {
	var rows []Row
	for i, arm := range []string{ArmWorkingSet, admitHoldName(0), ArmAdmitFit, admitHoldName(-1)} {
		rows = append(rows, Row{Setup: "s", Arm: arm, Stage: 0, Sessions: 24, Seeds: 1, Cells: map[string]Cell{
			"output_tokens_per_min": cell(9000 + 2000*float64(i)),
			"ttfb_p95_s":            cell(25 + 40*float64(i)),
		}})
	}
	front, err := frontierFigure("s", rows, 24)
	if err != nil || front == nil {
		t.Fatalf("frontierFigure: %v, %v", front, err)
	}
	tokens, _ := MetricByKey("output_tokens_per_min")
	byStage, err := metricFigure("s", tokens, rows, []string{ArmWorkingSet})
	if err != nil {
		t.Fatal(err)
	}
	p95, _ := MetricByKey("ttfb_p95_s")
	logFig, err := metricFigure("s", p95, rows, []string{ArmWorkingSet, ArmAdmitFit})
	if err != nil {
		t.Fatal(err)
	}
	for name, ax := range map[string]plot.Axis{"frontier y": front.Y, "frontier x": front.X,
		"tokens/min y": byStage.Y, "TTFB p95 (log) y": logFig.Y} {
		labels := tickLabels(ax)
		if len(labels) == 0 {
			t.Errorf("%s: no labelled ticks", name)
		}
		for _, l := range labels {
			if strings.HasSuffix(l, ".00") || strings.HasSuffix(l, ".0") || (len(l) > 4 && !strings.Contains(l, ",") && !strings.Contains(l, ".")) {
				t.Errorf("%s: tick label %q, want report's format (e.g. \"15,000\", \"0.5\") in %q", name, l, labels)
			}
		}
		t.Logf("%s: %q", name, labels)
	}
}

// cell is one sample's cell of value v.
func cell(v float64) Cell { return Cell{Mean: v, Min: v, Max: v, N: 1} }

// ReadCSV reads back what rowsCSV wrote (the same bytes when written again),
// and Redraw draws a directory's figures from it alone.
func TestReadCSVRoundTripAndRedraw(t *testing.T) {
	var rows []Row
	for i, arm := range []string{ArmWorkingSet, admitHoldName(0), ArmAdmitFit, admitHoldName(-1)} {
		for st, sessions := range []int{16, 24} {
			cells := map[string]Cell{}
			for j, m := range Metrics {
				cells[m.Key] = Cell{Mean: float64(100*i + 10*st + j), SD: 0.5, Min: float64(100*i + 10*st + j - 1), Max: float64(100*i + 10*st + j + 1), N: 3}
			}
			cells["preemptions"] = Cell{Mean: math.NaN(), SD: math.NaN(), Min: math.NaN(), Max: math.NaN()}
			rows = append(rows, Row{Setup: "s", Arm: arm, Stage: st, Sessions: sessions, Seeds: 3, Cells: cells})
		}
	}
	b := rowsCSV(rows)
	back, err := ReadCSV(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(rows) || !bytes.Equal(rowsCSV(back), b) {
		t.Fatalf("read %d rows, want %d; written again:\n%s\nwant:\n%s", len(back), len(rows), rowsCSV(back), b)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CSVFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Redraw(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fig-s-output_tokens_per_min.png", "fig-s-ttfb_p50_s.png", "frontier-s.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("Redraw did not write %s: %v", f, err)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{"setup,arm\n", "line 1: header"},
		{string(b[:bytes.IndexByte(b, '\n')+1]) + "s,a,0,4,3,ttfb_p50_s,x,0,0,0,3\n", "line 2: mean \"x\""},
	} {
		if _, err := ReadCSV([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadCSV(%q) = %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}
