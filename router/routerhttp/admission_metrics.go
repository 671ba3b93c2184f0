package routerhttp

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/warden/router"
)

// Admission metric names (router/admission.go).
const (
	// MetricAdmissionQueue: gauge{model}: new conversations waiting now.
	MetricAdmissionQueue = "warden_admission_queue"
	// MetricAdmissionHeld: histogram{model}: how long admitted or refused
	// requests waited, seconds of the router's clock (0 for those not held).
	MetricAdmissionHeld = "warden_admission_held_seconds"
	// MetricAdmissionOutcomes: counter{model,outcome}: admitted (no wait),
	// admitted_after_hold, admitted_at_limit, refused, gave_up (the client
	// went away while held), shutdown (held when the router's listener closed
	// at shutdown: answered 503, drain.go).
	MetricAdmissionOutcomes = "warden_admission_outcomes_total"
)

// admissionBuckets: 0.25 s (one poll) to 8.5 min, past DefaultMaxHold.
var admissionBuckets = prometheus.ExponentialBuckets(0.25, 2, 12)

type admissionMetrics struct {
	held     *prometheus.HistogramVec
	outcomes *prometheus.CounterVec
}

func newAdmissionMetrics(reg *prometheus.Registry, pools func() []*Pool) *admissionMetrics {
	a := &admissionMetrics{
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricAdmissionHeld, Help: "Time new conversations waited at the admission gate before being sent or refused (router clock).",
			Buckets: admissionBuckets,
		}, []string{"model"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricAdmissionOutcomes, Help: "Admission gate outcomes of new conversations.",
		}, []string{"model", "outcome"}),
	}
	reg.MustRegister(a.held, a.outcomes, &admissionQueueCollector{pools: pools})
	return a
}

// observeAdmission counts one admission outcome of a request that was sent or
// refused.
func (m *Metrics) observeAdmission(model string, info router.AdmitInfo, err error) {
	if m == nil || m.adm == nil {
		return
	}
	var out string
	switch {
	case errors.Is(err, router.ErrOverloaded):
		out = "refused"
	case info.Admission == router.AdmitAdmitted:
		out = "admitted"
	case info.Admission == router.AdmitHeld:
		out = "admitted_after_hold"
	case info.Admission == router.AdmitLimit:
		out = "admitted_at_limit"
	default:
		return
	}
	m.adm.outcomes.WithLabelValues(model, out).Inc()
	m.adm.held.WithLabelValues(model).Observe(info.Held.Seconds())
}

func (m *Metrics) countAdmissionOutcome(model, outcome string) {
	if m == nil || m.adm == nil {
		return
	}
	m.adm.outcomes.WithLabelValues(model, outcome).Inc()
}

// admissionQueueCollector reads every pool's queue length at scrape time.
type admissionQueueCollector struct{ pools func() []*Pool }

var admissionQueueDesc = prometheus.NewDesc(MetricAdmissionQueue, "New conversations waiting at the admission gate.", []string{"model"}, nil)

func (c *admissionQueueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- admissionQueueDesc }

func (c *admissionQueueCollector) Collect(ch chan<- prometheus.Metric) {
	if c.pools == nil {
		return
	}
	for _, p := range c.pools() {
		st := p.Balancer.Admission()
		if st.Mode != router.AdmissionFit {
			continue
		}
		ch <- prometheus.MustNewConstMetric(admissionQueueDesc, prometheus.GaugeValue, float64(st.Queue), p.Model)
	}
}
