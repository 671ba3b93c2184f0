package engines

// SGLang series (sglang: prefix), as SGLang's source defines them:
// python/sglang/srt/metrics/collector.py at sgl-project/sglang commit
// 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538 (SchedulerMetricsCollector,
// TokenizerMetricsCollector). Exported only when the server runs with
// --enable-metrics (otherwise GET /metrics is 404). Scheduler series carry
// model_name, engine_type, tp_rank, pp_rank, moe_ep_rank and, with DP attention,
// dp_rank; tokenizer series carry model_name (and engine_type in newer versions).
// SGLang runs prometheus_client in multiprocess mode, so a labelled counter that
// was never incremented has no sample at all.
const (
	SGLangNumRunningReqs    = "sglang:num_running_reqs"     // gauge, requests in the running batch
	SGLangNumQueueReqs      = "sglang:num_queue_reqs"       // gauge, requests in the waiting queue
	SGLangTokenUsage        = "sglang:token_usage"          // gauge, fraction of the KV pool in use
	SGLangNumUsedTokens     = "sglang:num_used_tokens"      // gauge, KV pool tokens in use
	SGLangMaxTotalNumTokens = "sglang:max_total_num_tokens" // gauge, KV pool size in tokens
	SGLangCacheHitRate      = "sglang:cache_hit_rate"       // gauge, last prefill batch only (0 after a decode log)
	SGLangPromptTokens      = "sglang:prompt_tokens_total"  // counter, prompt tokens of finished requests, cached included
	SGLangCachedTokens      = "sglang:cached_tokens_total"  // counter, cached prompt tokens; incremented only when > 0
	SGLangGenerationTokens  = "sglang:generation_tokens_total"
	SGLangNumRequests       = "sglang:num_requests_total"           // counter, finished requests
	SGLangRetractedRequests = "sglang:num_retracted_requests_total" // counter, SGLang's preemptions
	SGLangRealtimeTokens    = "sglang:realtime_tokens_total"        // counter by mode: prefill_compute, prefill_cache, decode
	SGLangTimeToFirstToken  = "sglang:time_to_first_token_seconds"
)

// llama.cpp llama-server series (llamacpp: prefix), as recorded from a build at
// llama.cpp commit d32676d77426540327835040d5d3279728f0b4c8 (testdata
// llamacpp/metrics.txt). Exported only with --metrics (otherwise GET /metrics is
// 501 with a JSON error). No labels; counters have no _created sample.
const (
	LlamaCppPromptTokens        = "llamacpp:prompt_tokens_total" // counter, prompt tokens COMPUTED (cached ones not counted)
	LlamaCppTokensPredicted     = "llamacpp:tokens_predicted_total"
	LlamaCppRequestsProcessing  = "llamacpp:requests_processing" // gauge, requests holding a slot
	LlamaCppRequestsDeferred    = "llamacpp:requests_deferred"   // gauge, requests waiting for a free slot
	LlamaCppNDecode             = "llamacpp:n_decode_total"
	LlamaCppLegacyKVUsageRatio  = "llamacpp:kv_cache_usage_ratio" // gauge, older builds only (absent from the recorded one)
	LlamaCppLegacyKVCacheTokens = "llamacpp:kv_cache_tokens"      // gauge, older builds only
)

// Prefixes by which a /metrics body names its engine.
const (
	PrefixVLLM     = "vllm:"
	PrefixSGLang   = "sglang:"
	PrefixLlamaCpp = "llamacpp:"
)

// KindOfSeries returns the engine whose prefix the series name carries, or
// KindUnknown.
func KindOfSeries(name string) Kind {
	switch {
	case len(name) > len(PrefixVLLM) && name[:len(PrefixVLLM)] == PrefixVLLM:
		return KindVLLM
	case len(name) > len(PrefixSGLang) && name[:len(PrefixSGLang)] == PrefixSGLang:
		return KindSGLang
	case len(name) > len(PrefixLlamaCpp) && name[:len(PrefixLlamaCpp)] == PrefixLlamaCpp:
		return KindLlamaCpp
	}
	return KindUnknown
}
