package scrape

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/engines"
)

// LlamaCpp is the adapter for llama-server's /metrics (--metrics), as recorded in
// testdata/llamacpp/metrics.txt: unlabelled series, one engine. Its
// llamacpp:prompt_tokens_total counts only the prompt tokens computed, not those
// served from a slot's cache, so it is PromptComputedTokens; PromptTokens,
// PrefixQueries and PrefixHits stay absent (the hit rate comes from per-request
// usage, see engines.CapabilityOf(engines.KindLlamaCpp).HitRate). KV usage is read
// only from the older llamacpp:kv_cache_usage_ratio, which the recorded build no
// longer exports.
type LlamaCpp struct{}

func (LlamaCpp) Kind() engines.Kind             { return engines.KindLlamaCpp }
func (LlamaCpp) Capability() engines.Capability { return engines.CapabilityOf(engines.KindLlamaCpp) }

func (LlamaCpp) Stats(fams map[string]*dto.MetricFamily) []*engines.Stats {
	s := &engines.Stats{Kind: engines.KindLlamaCpp}
	found := false
	// Unlabelled series: several samples would only come from a proxy merging
	// servers; counters then add up and gauges take the largest, as for vLLM.
	set := func(dst *engines.Value, name string, gauge bool) {
		ms := fams[name].GetMetric()
		if len(ms) == 0 {
			return
		}
		v := value(ms[0])
		for _, m := range ms[1:] {
			if gauge {
				v = max(v, value(m))
			} else {
				v += value(m)
			}
		}
		*dst = engines.Of(v, name)
		found = true
	}
	set(&s.Running, engines.LlamaCppRequestsProcessing, true)
	set(&s.Waiting, engines.LlamaCppRequestsDeferred, true)
	set(&s.KVUsage, engines.LlamaCppLegacyKVUsageRatio, true)
	set(&s.PromptComputedTokens, engines.LlamaCppPromptTokens, false)
	set(&s.GenerationTokens, engines.LlamaCppTokensPredicted, false)
	if !found {
		// A body of llamacpp: families none of which we read still names the engine.
		for name := range fams {
			if engines.KindOfSeries(name) == engines.KindLlamaCpp {
				found = true
				break
			}
		}
	}
	if !found {
		return nil
	}
	return []*engines.Stats{s}
}
