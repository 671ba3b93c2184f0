package report

import (
	"math"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// TestCounterDelta pins the one counter-delta rule (counterStep) as the window
// delta of the summaries applies it: reset-aware, and NaN as soon as a sample
// of the window lacks the counter, a window of one sample included.
func TestCounterDelta(t *testing.T) {
	nan := math.NaN()
	hits := func(x loadgen.SeriesSample) float64 { return x.PrefixHits }
	samples := func(vs ...float64) []loadgen.SeriesSample {
		out := make([]loadgen.SeriesSample, len(vs))
		for i, v := range vs {
			out[i] = loadgen.SeriesSample{T: sec(float64(10 * i)), PrefixHits: v}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		samples    []loadgen.SeriesSample
		start, end time.Duration
		want       float64
		ok         bool
	}{
		{"increase", samples(100, 150, 175), 0, sec(20), 75, true},
		{"from the last sample at or before start", samples(100, 150, 175), sec(15), sec(25), 25, true},
		{"restart counts from zero", samples(100, 150, 20, 30), 0, sec(30), 50 + 20 + 10, true},
		{"no sample before start", samples(100, 150), -sec(5), sec(10), 50, true},
		{"none at or before end", samples(100, 150), -sec(10), -sec(5), 0, false},
		{"NaN inside", samples(100, nan, 175), 0, sec(20), nan, true},
		{"NaN at the end", samples(100, 150, nan), 0, sec(20), nan, true},
		{"one NaN sample", samples(nan, 150), 0, sec(5), nan, true},
		{"one sample", samples(100, 150), 0, sec(5), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := counterDelta(tc.samples, tc.start, tc.end, hits)
			if ok != tc.ok || (math.IsNaN(tc.want) != math.IsNaN(got)) || (!math.IsNaN(tc.want) && got != tc.want) {
				t.Fatalf("counterDelta = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestCounterStep(t *testing.T) {
	nan := math.NaN()
	for _, tc := range [][3]float64{{100, 150, 50}, {150, 20, 20}, {5, 5, 0}, {nan, 5, nan}, {5, nan, nan}} {
		if got := counterStep(tc[0], tc[1]); math.IsNaN(got) != math.IsNaN(tc[2]) || (!math.IsNaN(got) && got != tc[2]) {
			t.Errorf("counterStep(%v, %v) = %v, want %v", tc[0], tc[1], got, tc[2])
		}
	}
}
