package routerhttp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/router"
)

// Router metric names (Prometheus text format on the main listener's /metrics).
const (
	MetricRequests      = "warden_requests_total"            // counter{model,replica,decision}
	MetricResponses     = "warden_responses_total"           // counter{model,code}
	MetricRetries       = "warden_upstream_retries_total"    // counter{model,replica}: connects that failed and moved
	MetricInFlight      = "warden_in_flight"                 // gauge{model,replica}
	MetricSessions      = "warden_sessions"                  // gauge{model,replica}: sessions homed
	MetricHealthy       = "warden_replica_healthy"           // gauge{model,replica}: 1 or 0
	MetricScrapeAge     = "warden_scrape_age_seconds"        // gauge{model,replica}; absent before the first scrape
	MetricAffinity      = "warden_affinity_enabled"          // gauge{model}
	MetricDecision      = "warden_decision_seconds"          // histogram: Balancer.Acquire wall time
	MetricUpstreamTTFB  = "warden_upstream_ttfb_seconds"     // histogram{model,replica}: sent -> first body byte
	MetricDecisionTotal = "warden_decisions_by_reason_total" // counter{model,replica,decision} from the Balancer
	MetricEjections     = "warden_ejections_total"           // counter{model,replica}: ReplicaStatus.Ejections
	MetricEjected       = "warden_replica_ejected"           // gauge{model,replica}: 1 while ejected
	MetricDraining      = "warden_replica_draining"          // gauge{model,replica}: 1 while draining (ReplicaStatus.Draining)

	// The working set the policies compare with the KV cache, and the per-request
	// prefix-cache view (ReplicaStatus fields of the same meaning).
	MetricLiveConversations = "warden_live_conversations"        // gauge{model,replica}: ReplicaStatus.Live
	MetricLiveTokens        = "warden_live_tokens"               // gauge{model,replica}: ReplicaStatus.LiveTokens
	MetricKVCapacityTokens  = "warden_kv_capacity_tokens"        // gauge{model,replica}; absent while unknown
	MetricUsagePrompt       = "warden_usage_prompt_tokens_total" // counter{model,replica}: ReplicaStatus.UsagePromptTokens
	MetricUsageCached       = "warden_usage_cached_tokens_total" // counter{model,replica}: ReplicaStatus.UsageCachedTokens
)

// Metrics are the router's own Prometheus metrics, in their own registry. A nil
// *Metrics records nothing.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	responses *prometheus.CounterVec
	retries   *prometheus.CounterVec
	decision  prometheus.Histogram
	ttfb      *prometheus.HistogramVec
	adm       *admissionMetrics
	stateWait prometheus.Histogram // with `state:` only (registerStateMetrics)
}

// NewMetrics builds the registry. pools is read at every scrape for the gauges
// (in-flight, sessions, health, scrape age, affinity, live working set, KV
// capacity) and the Balancer's counters (decisions by reason, usage tokens).
func NewMetrics(pools func() []*Pool) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests, Help: "Requests routed, by replica and decision reason.",
		}, []string{"model", "replica", "decision"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricResponses, Help: "Responses by status code (499: client went away).",
		}, []string{"model", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRetries, Help: "Requests moved to another replica because this one could not be reached.",
		}, []string{"model", "replica"}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricDecision, Help: "Wall time of one routing decision (Balancer.Acquire).",
			Buckets: prometheus.ExponentialBuckets(100e-9, 4, 9), // 100 ns .. 6.6 ms
		}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricUpstreamTTFB, Help: "Wall time from sending a request upstream to the first response body byte.",
			Buckets: vllmmetrics.TTFTBuckets, // the buckets of vLLM's own TTFT histogram
		}, []string{"model", "replica"}),
	}
	m.reg.MustRegister(m.requests, m.responses, m.retries, m.decision, m.ttfb,
		&poolCollector{pools: pools},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.adm = newAdmissionMetrics(m.reg, pools)
	return m
}

// Registry returns the registry (for tests or to add collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

func (m *Metrics) observeDecision(d time.Duration) {
	if m != nil {
		m.decision.Observe(d.Seconds())
	}
}

func (m *Metrics) observeTTFB(model, replica string, d time.Duration) {
	if m != nil {
		m.ttfb.WithLabelValues(model, replica).Observe(d.Seconds())
	}
}

func (m *Metrics) countRequest(model, replica string, r router.Reason) {
	if m != nil {
		m.requests.WithLabelValues(model, replica, r.String()).Inc()
	}
}

func (m *Metrics) countResponse(model string, code int) {
	if m != nil {
		m.responses.WithLabelValues(model, strconv.Itoa(code)).Inc()
	}
}

func (m *Metrics) countRetry(model, replica string) {
	if m != nil {
		m.retries.WithLabelValues(model, replica).Inc()
	}
}

// poolCollector reports Balancer state at scrape time.
type poolCollector struct{ pools func() []*Pool }

var (
	descInFlight  = prometheus.NewDesc(MetricInFlight, "Requests in flight (router's own count).", []string{"model", "replica"}, nil)
	descSessions  = prometheus.NewDesc(MetricSessions, "Sessions homed on the replica.", []string{"model", "replica"}, nil)
	descHealthy   = prometheus.NewDesc(MetricHealthy, "1 when the replica is marked healthy.", []string{"model", "replica"}, nil)
	descScrapeAge = prometheus.NewDesc(MetricScrapeAge, "Age of the last engine-load observation, simulated seconds.", []string{"model", "replica"}, nil)
	descAffinity  = prometheus.NewDesc(MetricAffinity, "1 when session affinity is on.", []string{"model"}, nil)
	descDecisions = prometheus.NewDesc(MetricDecisionTotal, "Decisions by reason as counted by the Balancer (incl. retries).", []string{"model", "replica", "decision"}, nil)
	descLive      = prometheus.NewDesc(MetricLiveConversations, "Conversations homed on the replica with a request within the live window.", []string{"model", "replica"}, nil)
	descLiveTok   = prometheus.NewDesc(MetricLiveTokens, "Summed context estimates of the live conversations, tokens: the working set compared with the KV cache.", []string{"model", "replica"}, nil)
	descKVCap     = prometheus.NewDesc(MetricKVCapacityTokens, "The replica's KV cache in tokens, (num_gpu_blocks - 1) x block_size from vllm:cache_config_info.", []string{"model", "replica"}, nil)
	descUsageP    = prometheus.NewDesc(MetricUsagePrompt, "Prompt tokens of responses whose usage carried a cached-token count.", []string{"model", "replica"}, nil)
	descEjections = prometheus.NewDesc(MetricEjections, "Times the replica was ejected after consecutive failed requests (a failed probe ejects it again).", []string{"model", "replica"}, nil)
	descEjected   = prometheus.NewDesc(MetricEjected, "1 while the replica is ejected (out of placement until a probe succeeds).", []string{"model", "replica"}, nil)
	descDraining  = prometheus.NewDesc(MetricDraining, "1 while the replica is draining (no new conversation placed there; warden_in_flight and warden_sessions say what is left).", []string{"model", "replica"}, nil)
	descUsageC    = prometheus.NewDesc(MetricUsageCached, "Of those prompt tokens, the ones the replica read from its prefix cache (per-request usage).", []string{"model", "replica"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descSessions, descHealthy, descScrapeAge, descAffinity, descDecisions,
		descLive, descLiveTok, descKVCap, descUsageP, descUsageC, descEjections, descEjected, descDraining} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, pool := range c.pools() {
		b := pool.Balancer
		aff := 0.0
		if b.Affinity() {
			aff = 1
		}
		ch <- prometheus.MustNewConstMetric(descAffinity, prometheus.GaugeValue, aff, pool.Model)
		for _, s := range b.Status() {
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), pool.Model, s.Name)
			ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(s.Sessions), pool.Model, s.Name)
			h := 0.0
			if s.Healthy {
				h = 1
			}
			ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, h, pool.Model, s.Name)
			if s.ScrapeAgeS >= 0 {
				ch <- prometheus.MustNewConstMetric(descScrapeAge, prometheus.GaugeValue, s.ScrapeAgeS, pool.Model, s.Name)
			}
			for _, r := range router.Reasons {
				ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(s.ServedBy[r.String()]), pool.Model, s.Name, r.String())
			}
			ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(s.Live), pool.Model, s.Name)
			ch <- prometheus.MustNewConstMetric(descLiveTok, prometheus.GaugeValue, float64(s.LiveTokens), pool.Model, s.Name)
			if s.KVCapacityTokens > 0 {
				ch <- prometheus.MustNewConstMetric(descKVCap, prometheus.GaugeValue, float64(s.KVCapacityTokens), pool.Model, s.Name)
			}
			ch <- prometheus.MustNewConstMetric(descUsageP, prometheus.CounterValue, float64(s.UsagePromptTokens), pool.Model, s.Name)
			ch <- prometheus.MustNewConstMetric(descUsageC, prometheus.CounterValue, float64(s.UsageCachedTokens), pool.Model, s.Name)
			ej := 0.0
			if s.Ejected {
				ej = 1
			}
			ch <- prometheus.MustNewConstMetric(descEjections, prometheus.CounterValue, float64(s.Ejections), pool.Model, s.Name)
			ch <- prometheus.MustNewConstMetric(descEjected, prometheus.GaugeValue, ej, pool.Model, s.Name)
			dr := 0.0
			if s.Draining != "" {
				dr = 1
			}
			ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, dr, pool.Model, s.Name)
		}
	}
}
