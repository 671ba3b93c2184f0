package report

import (
	"strings"
	"testing"
)

// RoundTicks labels at 1, 2 or 5 x 10^k, at most MaxRoundTicks labels, where
// gonum's default gave plan.png 25 / 100 / 175 and 5 / 25 / 45 / 65.
func TestRoundTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{-5, 185, "0 50 100 150"},
		{2, 70, "20 40 60"},
		{2, 62, "10 20 30 40 50 60"},
		{0.82, 1.01, "0.85 0.9 0.95 1"},
		{0, 100, "0 20 40 60 80 100"},
		{3.5, 16.5, "5 10 15"},
		{0, 450, "0 100 200 300 400"},
		{0, 52000, "0 10,000 20,000 30,000 40,000 50,000"},
		{0.1, 0.7, "0.2 0.4 0.6"},
		{0.1, 0.6, "0.1 0.2 0.3 0.4 0.5 0.6"},
	} {
		var labels []string
		for _, tk := range (RoundTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Value < tc.lo || tk.Value > tc.hi {
				t.Errorf("[%g, %g]: tick %g out of range", tc.lo, tc.hi, tk.Value)
			}
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != tc.want {
			t.Errorf("[%g, %g]: labels %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
		if len(labels) > MaxRoundTicks {
			t.Errorf("[%g, %g]: %d labels, more than %d", tc.lo, tc.hi, len(labels), MaxRoundTicks)
		}
	}
}
