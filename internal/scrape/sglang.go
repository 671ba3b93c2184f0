package scrape

import (
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/engines"
)

// SGLang is the adapter for SGLang's /metrics (--enable-metrics), with the names,
// types and labels of python/sglang/srt/metrics/collector.py (see
// engines.SGLangNumRunningReqs). The server is one engine: SGLang's DP ranks
// (dp_rank label, DP attention) are not addressable by a router the way vLLM's
// are, so their figures are added up.
//
// Folding: samples that differ only in tp_rank, pp_rank or moe_ep_rank are one
// scheduler seen by several ranks (with --enable-metrics-for-all-schedulers) and
// take the largest value; the remaining label sets (dp_rank, priority, custom
// labels) are summed. sglang:token_usage is a fraction, so over several dp_rank
// sets it is sum(num_used_tokens) / sum(max_total_num_tokens) when both are
// exported, else the largest.
//
// Prefix cache: queries are sglang:prompt_tokens_total (every prompt token,
// cached ones included) and hits sglang:cached_tokens_total. SGLang increments the
// latter only for a request with cached tokens > 0 and exports in
// prometheus_client's multiprocess mode, so the series has no sample until the
// first hit: while prompt_tokens_total is present, an absent cached_tokens_total
// reads as 0 with Source engines.SrcSGLangCachedZero, saying so.
type SGLang struct{}

func (SGLang) Kind() engines.Kind             { return engines.KindSGLang }
func (SGLang) Capability() engines.Capability { return engines.CapabilityOf(engines.KindSGLang) }

// sglangRankLabels are the labels that split one scheduler's view over its
// tensor/pipeline/expert ranks.
var sglangRankLabels = map[string]bool{"tp_rank": true, "pp_rank": true, "moe_ep_rank": true}

func (SGLang) Stats(fams map[string]*dto.MetricFamily) []*engines.Stats {
	s := &engines.Stats{Kind: engines.KindSGLang}
	found := false
	// fold returns the family's folded value, the number of folded label sets and
	// whether it had any sample. keep filters samples (nil keeps all).
	fold := func(name string, keep func(map[string]string) bool) (v float64, sets int, ok bool) {
		byKey := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			ls := labelsOf(m)
			if keep != nil && !keep(ls) {
				continue
			}
			if s.Model == "" {
				s.Model = ls["model_name"]
			}
			var key strings.Builder
			for _, k := range sortedKeys(ls) {
				if !sglangRankLabels[k] {
					key.WriteString(k + "=" + ls[k] + ",")
				}
			}
			x := value(m)
			if old, seen := byKey[key.String()]; seen {
				x = math.Max(old, x)
			}
			byKey[key.String()] = x
		}
		for _, x := range byKey {
			v += x
		}
		return v, len(byKey), len(byKey) > 0
	}
	set := func(dst *engines.Value, name string) {
		if v, _, ok := fold(name, nil); ok {
			*dst = engines.Of(v, name)
			found = true
		}
	}
	set(&s.Running, engines.SGLangNumRunningReqs)
	set(&s.Waiting, engines.SGLangNumQueueReqs)
	set(&s.KVCapacityTokens, engines.SGLangMaxTotalNumTokens)
	set(&s.PromptTokens, engines.SGLangPromptTokens)
	set(&s.GenerationTokens, engines.SGLangGenerationTokens)
	set(&s.Preemptions, engines.SGLangRetractedRequests)
	set(&s.RequestsFinished, engines.SGLangNumRequests)
	if v, _, ok := fold(engines.SGLangRealtimeTokens, func(ls map[string]string) bool { return ls["mode"] == "prefill_compute" }); ok {
		s.PromptComputedTokens = engines.Of(v, engines.SrcSGLangPrefillComp)
		found = true
	}

	// KV usage: a fraction does not add up over DP ranks.
	if usage, sets, ok := fold(engines.SGLangTokenUsage, nil); ok {
		found = true
		used, _, okUsed := fold(engines.SGLangNumUsedTokens, nil)
		total, _, okTotal := fold(engines.SGLangMaxTotalNumTokens, nil)
		switch {
		case sets == 1:
			s.KVUsage = engines.Of(usage, engines.SGLangTokenUsage)
		case okUsed && okTotal && total > 0:
			s.KVUsage = engines.Of(used/total, engines.SGLangNumUsedTokens+" / "+engines.SGLangMaxTotalNumTokens)
		default:
			s.KVUsage = engines.Of(maxSample(fams[engines.SGLangTokenUsage]), engines.SGLangTokenUsage+" (largest over dp_rank)")
		}
	}

	if s.PromptTokens.Has() {
		s.PrefixQueries = engines.Of(s.PromptTokens.V, engines.SGLangPromptTokens)
		s.PrefixUnit = "tokens"
		if v, _, ok := fold(engines.SGLangCachedTokens, nil); ok {
			s.PrefixHits = engines.Of(v, engines.SGLangCachedTokens)
		} else {
			s.PrefixHits = engines.Of(0, engines.SrcSGLangCachedZero)
		}
	} else if v, _, ok := fold(engines.SGLangCachedTokens, nil); ok {
		// Hits without queries: report what is there, the rate stays undefined.
		s.PrefixHits = engines.Of(v, engines.SGLangCachedTokens)
		s.PrefixUnit = "tokens"
		found = true
	}
	if !found {
		return nil
	}
	return []*engines.Stats{s}
}

func maxSample(f *dto.MetricFamily) float64 {
	v := math.Inf(-1)
	for _, m := range f.GetMetric() {
		v = math.Max(v, value(m))
	}
	return v
}
