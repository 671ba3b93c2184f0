package report

import (
	"math"
	"testing"
)

// ThresholdDelta judges samples against a noiseless threshold: the interval is
// 1.96 x the samples' standard error alone.
func TestThresholdDelta(t *testing.T) {
	// Mean 10, sd 1, se 1/sqrt(3): half-interval 1.96/sqrt(3) = 1.13.
	d := ThresholdDelta("ttfb_p95_s", 9.5, []float64{9, 10, 11})
	if d.Value != 10 || d.Base != 9.5 || math.Abs(d.CIHalf-1.96/math.Sqrt(3)) > 1e-9 || d.Noise != WithinNoise {
		t.Errorf("near the threshold: %+v, want within noise, half-interval 1.13", d)
	}
	if d := ThresholdDelta("ttfb_p95_s", 5, []float64{9, 10, 11}); d.Noise != BeyondNoise {
		t.Errorf("far from the threshold: %+v, want beyond noise", d)
	}
	if d := ThresholdDelta("ttfb_p95_s", 5, []float64{9}); d.Noise != NoiseUnknown || !math.IsNaN(d.CIHalf) {
		t.Errorf("one sample: %+v, want unknown", d)
	}
}
