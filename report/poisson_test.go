package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPoissonInterval pins the exact (Garwood) 95 % limits against the
// published table values (e.g. Ulm, Am. J. Epidemiol. 131 (1990) 373-375:
// k = 10 gives 4.795 and 18.39) and checks that the limits are where the
// Poisson tails are 2.5 % each.
func TestPoissonInterval(t *testing.T) {
	for _, tc := range []struct {
		k      int
		lo, hi float64
	}{
		{0, 0, 3.6889},
		{1, 0.0253, 5.5716},
		{2, 0.2422, 7.2247},
		{5, 1.6235, 11.6683},
		{10, 4.7954, 18.3904},
		{20, 12.2165, 30.8884},
	} {
		lo, hi := PoissonInterval(tc.k, 0.95)
		if math.Abs(lo-tc.lo) > 5e-4 || math.Abs(hi-tc.hi) > 5e-4 {
			t.Errorf("k=%d: [%.4f, %.4f], want [%.4f, %.4f]", tc.k, lo, hi, tc.lo, tc.hi)
		}
	}
	for _, k := range []int{1, 3, 40, 900} {
		lo, hi := PoissonInterval(k, 0.95)
		if p := poissonCDF(k, hi); math.Abs(p-0.025) > 1e-9 {
			t.Errorf("k=%d: P(X <= k; hi=%g) = %g, want 0.025", k, hi, p)
		}
		if p := 1 - poissonCDF(k-1, lo); math.Abs(p-0.025) > 1e-9 {
			t.Errorf("k=%d: P(X >= k; lo=%g) = %g, want 0.025", k, lo, p)
		}
		if !(lo < float64(k) && float64(k) < hi) {
			t.Errorf("k=%d: [%g, %g] does not hold k", k, lo, hi)
		}
	}
	if lo, hi := PoissonInterval(-1, 0.95); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("k=-1: [%g, %g], want NaN", lo, hi)
	}
}

// sessions_per_h.png's data carries each stage's interval: the completed
// count's Poisson interval x 3600 / window s, around the stage's SessionsPerH,
// and the figure's line in summary.md says what the bars are.
func TestSessionsPerHBars(t *testing.T) {
	window := 90 * time.Second
	sum := func(variant string, sessions, done int) Summary {
		return Summary{Variant: variant, Sessions: sessions, SessionsCompleted: done,
			WindowStart: time.Minute, WindowEnd: time.Minute + window,
			SessionsPerH: float64(done) * 3600 / window.Seconds()}
	}
	sums := []Summary{sum("off", 4, 6), sum("on", 4, 10), sum("off", 8, 10), sum("off", 16, 0)}
	nan := sum("off", 24, 3)
	nan.SessionsPerH = math.NaN() // no window to scale by: left out
	sums = append(sums, nan)
	x := func(s *Summary) float64 { return float64(s.Sessions) }
	pts, errs := stageBars(sums, "off", x, func(s *Summary) float64 { return s.SessionsPerH }, (*Summary).SessionsPerHInterval)
	if len(pts) != 3 || len(errs) != 3 {
		t.Fatalf("%d points, %d bars, want 3 each (the NaN stage left out)", len(pts), len(errs))
	}
	scale := 3600 / window.Seconds()
	for i, done := range []int{6, 10, 0} {
		lo, hi := PoissonInterval(done, 0.95)
		if want := float64(done) * scale; pts[i].Y != want {
			t.Errorf("stage %d: y %g, want %g", i, pts[i].Y, want)
		}
		if got, want := pts[i].Y-errs[i].Low, lo*scale; math.Abs(got-want) > 1e-9 {
			t.Errorf("stage %d: bar from %g, want %g", i, got, want)
		}
		if got, want := pts[i].Y+errs[i].High, hi*scale; math.Abs(got-want) > 1e-9 {
			t.Errorf("stage %d: bar to %g, want %g", i, got, want)
		}
	}
	// 10 sessions in 90 s: 400 sessions/h, 95 % interval about 192-736.
	if lo, hi := sums[2].SessionsPerHInterval(); math.Abs(lo-191.8) > 0.1 || math.Abs(hi-735.6) > 0.1 {
		t.Errorf("10 in 90 s: [%g, %g] sessions/h, want [191.8, 735.6]", lo, hi)
	}

	dir, _ := generated(t)
	md, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "sessions_per_h.png: the bars are the exact (Garwood) Poisson 95 % interval") {
		t.Error("summary.md does not say what sessions_per_h.png's bars are")
	}
}
