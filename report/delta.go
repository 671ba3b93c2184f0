package report

import (
	"fmt"
	"math"
)

// Metric names, the same as the results.csv columns. Summary.Metric accepts them,
// and so do Compare's thresholds.
const (
	MetricSessionsPerH       = "sessions_per_h"
	MetricOutputTokensPerMin = "output_tokens_per_min"
	MetricTTFBP50S           = "ttfb_p50_s"
	MetricTTFBP95S           = "ttfb_p95_s"
	MetricReplicasBusy       = "replicas_busy"
	MetricPrefixHitsPct      = "prefix_hits_pct"
	MetricStayedPct          = "stayed_pct"
	MetricUsageCachedPct     = "usage_cached_pct"
	MetricConversationP50S   = "conversation_p50_s"
	MetricConversationP95S   = "conversation_p95_s"
)

// Metrics lists the metric names in table order (the metric columns of
// results.csv, columns.go).
var Metrics = columnNames(metricColumns)

// Metric returns the named metric's value and the standard error of its
// per-sub-window estimate (NaN for metrics without a noise estimate: only
// output_tokens_per_min, ttfb_p50_s and ttfb_p95_s have one). It fails for an
// unknown name.
func (s *Summary) Metric(name string) (value, stdErr float64, err error) {
	c, ok := metricByName[name]
	if !ok {
		return math.NaN(), math.NaN(), fmt.Errorf("reading metric: unknown name %q (want one of %v)", name, Metrics)
	}
	value, stdErr = c.metric(s)
	return value, stdErr, nil
}

// Noise is the verdict on a Delta.
type Noise string

const (
	// WithinNoise: the 95 % interval of the difference contains 0.
	WithinNoise Noise = "within noise"
	// BeyondNoise: the 95 % interval of the difference excludes 0.
	BeyondNoise Noise = "beyond noise"
	// NoiseUnknown: no noise estimate for this metric, or too few sub-windows.
	NoiseUnknown Noise = "unknown"
)

// Delta is the change of one metric from a base stage summary (e.g. affinity off,
// or an older run) to a candidate one (affinity on, a newer run).
//
// The interval is a normal approximation without bootstrap: each side's standard
// error comes from its per-sub-window values (see SubWindow), and
// CIHalf = 1.96 * sqrt(se_base^2 + se_value^2). With three one-minute sub-windows
// per stage it is wide; it says whether a difference is distinguishable from the
// minute-to-minute spread, not more.
type Delta struct {
	Metric string  `json:"metric"`
	Base   float64 `json:"base"`
	Value  float64 `json:"value"`
	Diff   float64 `json:"diff"`    // Value - Base, in the metric's unit
	RelPct float64 `json:"rel_pct"` // 100 * Diff / |Base|; NaN when Base is 0
	CIHalf float64 `json:"ci95_half"`
	Noise  Noise   `json:"noise"`
}

// NewDelta computes the delta of metric from base to cand. It fails for an unknown
// metric name.
func NewDelta(metric string, base, cand *Summary) (Delta, error) {
	b, bse, err := base.Metric(metric)
	if err != nil {
		return Delta{}, err
	}
	v, vse, _ := cand.Metric(metric)
	return newDelta(metric, b, bse, v, vse), nil
}

// SampleDelta is the Delta of a metric between two sets of samples of it, e.g.
// per sub-window of one stage, per seed, or per conversation of a test stage:
// each side is the mean of its samples with the standard error of that mean
// (MeanStdErr), judged as NewDelta judges two summaries. metric only names it;
// any name is accepted. Fewer than two samples on a side give NoiseUnknown.
func SampleDelta(metric string, base, value []float64) Delta {
	b, bse := MeanStdErr(base)
	v, vse := MeanStdErr(value)
	return newDelta(metric, b, bse, v, vse)
}

// newDelta is the delta of two estimates with their standard errors.
func newDelta(metric string, b, bse, v, vse float64) Delta {
	d := Delta{Metric: metric, Base: b, Value: v, Diff: v - b, RelPct: math.NaN(), CIHalf: math.NaN(), Noise: NoiseUnknown}
	if b != 0 && !math.IsNaN(b) {
		d.RelPct = 100 * d.Diff / math.Abs(b)
	}
	if !math.IsNaN(bse) && !math.IsNaN(vse) && !math.IsNaN(d.Diff) {
		d.CIHalf = z95 * math.Sqrt(bse*bse+vse*vse)
		if math.Abs(d.Diff) <= d.CIHalf {
			d.Noise = WithinNoise
		} else {
			d.Noise = BeyondNoise
		}
	}
	return d
}

// MarshalJSON writes NaN and infinite floats as null.
func (d Delta) MarshalJSON() ([]byte, error) { return marshalFinite(d) }

// UnmarshalJSON reads null floats back as NaN.
func (d *Delta) UnmarshalJSON(b []byte) error {
	type plain Delta
	return unmarshalFinite(b, (*plain)(d))
}

// ThresholdDelta is the Delta of a metric's samples (e.g. one value per seed)
// from a fixed threshold, such as an SLO's: the threshold has no noise, so the
// interval is z95 x the samples' standard error of the mean, and the verdict says
// whether the mean is distinguishable from the threshold. Fewer than two samples
// give NoiseUnknown.
func ThresholdDelta(metric string, threshold float64, value []float64) Delta {
	v, vse := MeanStdErr(value)
	return newDelta(metric, threshold, 0, v, vse)
}
