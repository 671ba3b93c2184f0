package plan

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

func TestParseSLO(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SLO
		err  string
	}{
		{in: "ttfb_p95=10s,goodput=0.9", want: SLO{TTFBP95: 10 * time.Second, Goodput: 0.9, GoodputTTFB: 10 * time.Second}},
		// goodput_ttfb follows ttfb_p95 when not given.
		{in: "ttfb_p95=5s, goodput=0.95", want: SLO{TTFBP95: 5 * time.Second, Goodput: 0.95, GoodputTTFB: 5 * time.Second}},
		{in: "goodput=0.9,goodput_ttfb=2s", want: SLO{Goodput: 0.9, GoodputTTFB: 2 * time.Second}},
		// Goodput alone: its TTFB defaults to 10 s, no p95 term.
		{in: "goodput=0.8", want: SLO{Goodput: 0.8, GoodputTTFB: DefaultGoodputTTFB}},
		{in: "ttfb_p50=1s", want: SLO{TTFBP50: time.Second, GoodputTTFB: DefaultGoodputTTFB}},
		{in: "ttfb_p95=4s", want: SLO{TTFBP95: 4 * time.Second, GoodputTTFB: 4 * time.Second}},
		{in: "ttfb_p99=1s", err: `unknown term "ttfb_p99"`},
		{in: "ttfb_p95=10", err: "want a positive duration"},
		{in: "goodput=1.5", err: "want a fraction in (0, 1]"},
		{in: "goodput", err: "want key=value"},
		{in: "goodput=0.9,goodput=0.8", err: "given twice"},
		{in: "", err: "no term"},
	} {
		got, err := ParseSLO(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSLO(%q) = %+v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSLO(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if s := DefaultSLO().String(); s != "ttfb_p95=10s,goodput=0.9,goodput_ttfb=10s" {
		t.Errorf("DefaultSLO().String() = %q", s)
	}
	back, err := ParseSLO(DefaultSLO().String())
	if err != nil || back != DefaultSLO() {
		t.Errorf("round trip of the default: %+v, %v", back, err)
	}
}

func TestLoadSLO(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "slo.yaml")
	os.WriteFile(good, []byte("ttfb_p95: 8s\ngoodput: 0.95\n"), 0o644)
	s, err := LoadSLO(good)
	if err != nil || s != (SLO{TTFBP95: 8 * time.Second, Goodput: 0.95, GoodputTTFB: 8 * time.Second}) {
		t.Fatalf("LoadSLO = %+v, %v", s, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("ttfb_p95: 8s\nttfb_p90: 3s\n"), 0o644)
	if _, err := LoadSLO(bad); err == nil || !strings.Contains(err.Error(), "ttfb_p90") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("LoadSLO with an unknown key: %v; want it named with its line", err)
	}
}

func TestGoodput(t *testing.T) {
	ok := func(done, ttfb time.Duration) loadgen.Result {
		return loadgen.Result{Variant: "on", Sent: done - ttfb - time.Second, FirstToken: done - time.Second, Done: done, Status: 200}
	}
	rs := []loadgen.Result{
		ok(10*time.Second, 2*time.Second),                                       // good
		ok(11*time.Second, 12*time.Second),                                      // too slow
		{Variant: "on", Done: 12 * time.Second, Status: 503, Err: "no replica"}, // failed: not good
		ok(30*time.Second, time.Second),                                         // outside the window
		{Variant: "on", Side: true, Done: 12 * time.Second, Status: 200},        // side request: not counted
		{Variant: "off", Done: 12 * time.Second, Status: 200},                   // other variant
	}
	if g := Goodput(rs, nil, "on", 5*time.Second, 20*time.Second, 10*time.Second); math.Abs(g-1.0/3) > 1e-12 {
		t.Errorf("Goodput = %v, want 1/3", g)
	}
	cut := []loadgen.Result{
		{Variant: "on", Sent: 5 * time.Second},                                // held 15 s at the end: missed
		{Variant: "on", Sent: 15 * time.Second},                               // open 5 s: not counted
		{Variant: "on", Sent: 2 * time.Second, FirstToken: 14 * time.Second},  // first token after 12 s: missed
		{Variant: "on", Sent: 12 * time.Second, FirstToken: 13 * time.Second}, // streaming in time: not counted
	}
	if g := Goodput(rs, cut, "on", 5*time.Second, 20*time.Second, 10*time.Second); math.Abs(g-1.0/5) > 1e-12 {
		t.Errorf("Goodput with cut turns = %v, want 1/5", g)
	}
	if g := Goodput(rs, nil, "on", 40*time.Second, 50*time.Second, 10*time.Second); !math.IsNaN(g) {
		t.Errorf("Goodput of an empty window = %v, want NaN", g)
	}
}
