// Package vllmmetrics names the vLLM Prometheus series that the router, the harness
// and the simulator share, and holds one parsed /metrics body as per-engine samples
// (Snapshot). Parsing and fetching live in internal/scrape, so this package links
// no HTTP (expfmt does) and the pure cores and the report can use the names.
//
// Names come from vLLM's V1 metrics (vllm/v1/metrics/loggers.py, PrometheusStatLogger).
// Every V1 series carries model_name and, since data parallelism was added, an engine
// label ("0".."N-1", one per DP rank). Older servers used other names; the parser
// (internal/scrape)
// accepts them as fallbacks:
//
//	vllm:kv_cache_usage_perc          <- vllm:gpu_cache_usage_perc (before v0.10)
//	vllm:prefix_cache_queries_total   <- vllm:gpu_prefix_cache_queries_total
//	vllm:prefix_cache_hits_total      <- vllm:gpu_prefix_cache_hits_total
//
// Very early V1 servers (about March 2025) counted the gpu_prefix_cache_* series in
// blocks, not tokens; Engine.PrefixUnit says which was read ("tokens" or "blocks"),
// decided from the HELP text, because a hit rate is a ratio either way but a token
// count is not.
//
// When vLLM runs several API servers (--api-server-count > 1) some versions export one
// series per API-server process (a pid label; vllm-project/vllm#28792). The parser folds such
// duplicates: gauges take the largest value, counters the sum.
package vllmmetrics

import (
	"errors"
	"fmt"
	"strings"
)

// Series names exported by vLLM V1 (vllm/v1/metrics/loggers.py). Counter names are
// given with their exposition suffix _total, as they appear on the wire.
const (
	NumRequestsRunning  = "vllm:num_requests_running"
	NumRequestsWaiting  = "vllm:num_requests_waiting"
	KVCacheUsagePerc    = "vllm:kv_cache_usage_perc"
	PrefixCacheQueries  = "vllm:prefix_cache_queries_total"
	PrefixCacheHits     = "vllm:prefix_cache_hits_total"
	PromptTokens        = "vllm:prompt_tokens_total"
	GenerationTokens    = "vllm:generation_tokens_total"
	NumPreemptions      = "vllm:num_preemptions_total"
	RequestSuccess      = "vllm:request_success_total"
	PromptTokensBySrc   = "vllm:prompt_tokens_by_source_total"
	CacheConfigInfo     = "vllm:cache_config_info"
	TimeToFirstToken    = "vllm:time_to_first_token_seconds"
	E2ERequestLatency   = "vllm:e2e_request_latency_seconds"
	RequestQueueTime    = "vllm:request_queue_time_seconds"
	PrefillKVComputed   = "vllm:request_prefill_kv_computed_tokens"
	LegacyKVCacheUsage  = "vllm:gpu_cache_usage_perc"
	LegacyPrefixQueries = "vllm:gpu_prefix_cache_queries_total"
	LegacyPrefixHits    = "vllm:gpu_prefix_cache_hits_total"
)

// TTFTBuckets are the upper bounds (seconds) of vllm:time_to_first_token_seconds in
// vLLM V1 (vllm/v1/metrics/loggers.py, histogram_time_to_first_token).
var TTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
	0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// Engine holds one engine's (one DP rank's) values from one scrape. Counters are
// cumulative since the server started; use Delta for a window.
type Engine struct {
	Model  string // model_name label
	Engine string // engine label; "" on servers that have none

	Running float64 // requests in the running batch
	Waiting float64 // requests in the waiting queue
	KVUsage float64 // fraction 0..1 of KV blocks in use (idle cached blocks count as free)

	PrefixQueries    float64 // tokens (or blocks, see PrefixUnit) looked up in the prefix cache
	PrefixHits       float64 // tokens (or blocks) found in the prefix cache
	PrefixUnit       string  // "tokens" or "blocks"
	PromptTokens     float64 // prompt tokens, including cached ones
	GenerationTokens float64 // generated tokens
	Preemptions      float64 // requests preempted
	RequestsFinished float64 // vllm:request_success_total summed over finished_reason

	// PromptBySource is vllm:prompt_tokens_by_source_total by its source label
	// (local_compute, local_cache_hit, external_kv_transfer); nil when absent.
	PromptBySource map[string]float64

	// BlockSize and NumGPUBlocks come from vllm:cache_config_info (0 when absent).
	BlockSize    int
	NumGPUBlocks int

	// Present records which canonical series (the constants above) were found.
	Present map[string]bool
}

// Snapshot is one parsed /metrics body.
type Snapshot struct {
	// Engines by engine label, in label order ("" for a server without the label).
	Engines []*Engine
}

// ErrMissingSeries is wrapped by Require when a series is absent.
var ErrMissingSeries = errors.New("series missing from /metrics")

// Require returns an error wrapping ErrMissingSeries that names every canonical
// series absent from some engine, or from the snapshot as a whole when it has no
// engine at all. A missing series must never read as zero (docs/bench.md,
// failure case 4).
func (s *Snapshot) Require(names ...string) error {
	if len(s.Engines) == 0 {
		return fmt.Errorf("%w: no vllm: series at all (want %s)", ErrMissingSeries, strings.Join(names, ", "))
	}
	var errs []error
	for _, e := range s.Engines {
		var missing []string
		for _, n := range names {
			if !e.Present[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("%w: engine %q lacks %s", ErrMissingSeries, e.Engine, strings.Join(missing, ", ")))
		}
	}
	return errors.Join(errs...)
}

// Engine returns the engine with the given label, or nil.
func (s *Snapshot) Engine(label string) *Engine {
	for _, e := range s.Engines {
		if e.Engine == label {
			return e
		}
	}
	return nil
}

// CounterDelta returns cur - prev for a cumulative counter, treating a decrease as a
// server restart (counters reset to zero), in which case the delta is cur: what was
// counted since the restart.
func CounterDelta(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}
