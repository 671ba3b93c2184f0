package simhttp

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/warden/internal/vllmmetrics"
)

// collector exposes a server's engines the way vLLM's PrometheusStatLogger does
// (vllm/v1/metrics/loggers.py): every series labelled engine ("0".."N-1") and
// model_name, read from Engine.Stats at scrape time. vLLM's Python client writes each
// counter as <name>_total plus a <name>_created gauge (the family's creation time in
// unix seconds); the Go client does not emit _created in the text format, so the
// collector exports those gauges itself, as do the histogram's _created.
type collector struct {
	s *Server
}

var _ prometheus.Collector = (*collector)(nil)

var engineLabels = []string{"engine", "model_name"}

// counterDesc is a counter family and its companion _created gauge.
type counterDesc struct {
	total, created *prometheus.Desc
}

func newCounterDesc(name, help string, extra ...string) counterDesc {
	labels := append(append([]string(nil), engineLabels...), extra...)
	base := strings.TrimSuffix(name, "_total")
	return counterDesc{
		total:   prometheus.NewDesc(name, help, labels, nil),
		created: prometheus.NewDesc(base+"_created", help, labels, nil),
	}
}

var (
	descRunning = prometheus.NewDesc(vllmmetrics.NumRequestsRunning,
		"Number of requests in model execution batches.", engineLabels, nil)
	descWaiting = prometheus.NewDesc(vllmmetrics.NumRequestsWaiting,
		"Number of requests waiting to be processed.", engineLabels, nil)
	descKVUsage = prometheus.NewDesc(vllmmetrics.KVCacheUsagePerc,
		"KV-cache usage. 1 means 100 percent usage.", engineLabels, nil)
	descPrefixQueries = newCounterDesc(vllmmetrics.PrefixCacheQueries,
		"Prefix cache queries, in terms of number of queried tokens.")
	descPrefixHits = newCounterDesc(vllmmetrics.PrefixCacheHits,
		"Prefix cache hits, in terms of number of cached tokens.")
	descPromptTokens = newCounterDesc(vllmmetrics.PromptTokens,
		"Number of prefill tokens processed.")
	descGenerationTokens = newCounterDesc(vllmmetrics.GenerationTokens,
		"Number of generation tokens processed.")
	descPreemptions = newCounterDesc(vllmmetrics.NumPreemptions,
		"Cumulative number of preemption from the engine.")
	descRequestSuccess = newCounterDesc(vllmmetrics.RequestSuccess,
		"Count of successfully processed requests.", "finished_reason")
	descPromptBySource = newCounterDesc(vllmmetrics.PromptTokensBySrc,
		"Number of prompt tokens by source.", "source")
	descTTFT = prometheus.NewDesc(vllmmetrics.TimeToFirstToken,
		"Histogram of time to first token in seconds.", engineLabels, nil)
	descTTFTCreated = prometheus.NewDesc(vllmmetrics.TimeToFirstToken+"_created",
		"Histogram of time to first token in seconds.", engineLabels, nil)
	// cache_config_info carries the cache configuration as labels, value 1 (vLLM's
	// log_metrics_info("cache_config", ...)); total KV capacity = blocks x block size.
	descCacheConfig = prometheus.NewDesc(vllmmetrics.CacheConfigInfo,
		"Information of the LLMEngine CacheConfig",
		[]string{"block_size", "cache_dtype", "enable_prefix_caching", "engine", "gpu_memory_utilization",
			"num_cpu_blocks", "num_gpu_blocks", "prefix_caching_hash_algo"}, nil)
)

// Describe sends every family's descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descTTFT, descTTFTCreated, descCacheConfig} {
		ch <- d
	}
	for _, d := range []counterDesc{descPrefixQueries, descPrefixHits, descPromptTokens, descGenerationTokens,
		descPreemptions, descRequestSuccess, descPromptBySource} {
		ch <- d.total
		ch <- d.created
	}
}

// Collect reads each engine's stats and TTFT histogram.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	model := c.s.cfg.Model
	for _, e := range c.s.engines {
		st, h, stops := e.scrape()
		created := float64(e.created.UnixNano()) / 1e9
		lv := []string{e.label, model}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		counter := func(d counterDesc, v float64, extra ...string) {
			labels := append(append([]string(nil), lv...), extra...)
			ch <- prometheus.MustNewConstMetric(d.total, prometheus.CounterValue, v, labels...)
			ch <- prometheus.MustNewConstMetric(d.created, prometheus.GaugeValue, created, labels...)
		}
		gauge(descRunning, float64(st.Running))
		gauge(descWaiting, float64(st.Waiting))
		gauge(descKVUsage, st.KVUsage)
		counter(descPrefixQueries, float64(st.PrefixQueries))
		counter(descPrefixHits, float64(st.PrefixHits))
		counter(descPromptTokens, float64(st.PromptTokens))
		counter(descGenerationTokens, float64(st.GenerationTokens))
		counter(descPreemptions, float64(st.Preemptions))
		// sim.Stats counts every completed request as finished; the server knows which
		// ones ended on the simulated model's own stop (see Config.ReplyTokens).
		counter(descRequestSuccess, float64(stops), "stop")
		counter(descRequestSuccess, float64(max(st.RequestsFinished-stops, 0)), "length")
		counter(descRequestSuccess, float64(st.RequestsAborted), "abort")
		counter(descPromptBySource, float64(st.PromptComputed), "local_compute")
		counter(descPromptBySource, float64(st.PromptCached), "local_cache_hit")
		counter(descPromptBySource, 0, "external_kv_transfer")
		ch <- prometheus.MustNewConstHistogram(descTTFT, h.count, h.sum, h.cumulative(), lv...)
		gauge(descTTFTCreated, created)
		ch <- prometheus.MustNewConstMetric(descCacheConfig, prometheus.GaugeValue, 1,
			strconv.Itoa(st.BlockSize), "auto", "True", e.label,
			strconv.FormatFloat(e.cfg.Profile.GPUMemoryUtil, 'f', -1, 64),
			"0", strconv.Itoa(st.NumGPUBlocks), "sha256")
	}
}
