package scrape

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/vllmmetrics"
)

// VLLM is the adapter for vLLM V1: the figures are Parse's, unchanged (the
// same folding of legacy names, pid duplicates and finish reasons), one Stats
// per engine label (DP rank). Sources name the series actually read: the legacy
// name when the server had only that one.
type VLLM struct{}

func (VLLM) Kind() engines.Kind             { return engines.KindVLLM }
func (VLLM) Capability() engines.Capability { return engines.CapabilityOf(engines.KindVLLM) }

func (VLLM) Stats(fams map[string]*dto.MetricFamily) []*engines.Stats {
	snap := parseVLLM(fams)
	// read names the series a canonical figure came from: the current name when it
	// has samples (it wins in parseVLLM), otherwise the legacy one.
	read := func(current, legacy string) string {
		if legacy == "" || len(fams[current].GetMetric()) > 0 {
			return current
		}
		return legacy
	}
	out := make([]*engines.Stats, 0, len(snap.Engines))
	for _, e := range snap.Engines {
		s := &engines.Stats{Kind: engines.KindVLLM, Rank: e.Engine, Model: e.Model}
		set := func(dst *engines.Value, canonical, legacy string, v float64) {
			if e.Present[canonical] {
				*dst = engines.Of(v, read(canonical, legacy))
			}
		}
		set(&s.Running, vllmmetrics.NumRequestsRunning, "", e.Running)
		set(&s.Waiting, vllmmetrics.NumRequestsWaiting, "", e.Waiting)
		set(&s.KVUsage, vllmmetrics.KVCacheUsagePerc, vllmmetrics.LegacyKVCacheUsage, e.KVUsage)
		set(&s.PrefixQueries, vllmmetrics.PrefixCacheQueries, vllmmetrics.LegacyPrefixQueries, e.PrefixQueries)
		set(&s.PrefixHits, vllmmetrics.PrefixCacheHits, vllmmetrics.LegacyPrefixHits, e.PrefixHits)
		if s.PrefixQueries.Has() || s.PrefixHits.Has() {
			s.PrefixUnit = e.PrefixUnit
		}
		set(&s.PromptTokens, vllmmetrics.PromptTokens, "", e.PromptTokens)
		set(&s.GenerationTokens, vllmmetrics.GenerationTokens, "", e.GenerationTokens)
		set(&s.Preemptions, vllmmetrics.NumPreemptions, "", e.Preemptions)
		set(&s.RequestsFinished, vllmmetrics.RequestSuccess, "", e.RequestsFinished)
		if v, ok := e.PromptBySource["local_compute"]; ok {
			s.PromptComputedTokens = engines.Of(v, engines.SrcVLLMLocalCompute)
		}
		if e.Present[vllmmetrics.CacheConfigInfo] && e.BlockSize > 0 && e.NumGPUBlocks > 0 {
			s.KVCapacityTokens = engines.Of(float64(VLLMKVCapacityTokens(e.BlockSize, e.NumGPUBlocks)), engines.SrcVLLMKVCapacity)
		}
		out = append(out, s)
	}
	return out
}

// VLLMKVCapacityTokens is the tokens a vLLM engine's KV cache holds: block 0 is
// vLLM's null block (never allocated, vllm/v1/core/block_pool.py), so
// (numGPUBlocks - 1) x blockSize, as the router and the pre-flight count it.
func VLLMKVCapacityTokens(blockSize, numGPUBlocks int) int {
	return blockSize * max(numGPUBlocks-1, 0)
}
