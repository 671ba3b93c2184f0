package engines

import (
	"fmt"
	"strings"
)

// Figure names one thing an engine may report about a replica. The names are
// stable: a manifest column or a /status field may use them.
type Figure string

const (
	FigRunning          Figure = "running"
	FigWaiting          Figure = "waiting"
	FigKVUsage          Figure = "kv_usage"
	FigKVCapacity       Figure = "kv_capacity_tokens"
	FigPrefixQueries    Figure = "prefix_queries"
	FigPrefixHits       Figure = "prefix_hits"
	FigPromptTokens     Figure = "prompt_tokens"
	FigPromptComputed   Figure = "prompt_computed_tokens"
	FigGenerationTokens Figure = "generation_tokens"
	FigPreemptions      Figure = "preemptions"
	FigRequestsFinished Figure = "requests_finished"
	FigContextLength    Figure = "context_length"
	FigSlots            Figure = "slots"
	FigVersion          Figure = "version"
)

// Figures lists every Figure in the order a Capability lists them.
var Figures = []Figure{FigRunning, FigWaiting, FigKVUsage, FigKVCapacity,
	FigPrefixQueries, FigPrefixHits, FigPromptTokens, FigPromptComputed,
	FigGenerationTokens, FigPreemptions, FigRequestsFinished,
	FigContextLength, FigSlots, FigVersion}

// FigureSource says where an engine reports one figure. Source is the series name
// or "GET <path> <field>" (several, separated by " | ", when the first one present
// wins); "" means the engine does not have the figure, and Note then says what a
// caller should do instead. Unit is "requests", "tokens", "fraction" or "" (text).
type FigureSource struct {
	Figure Figure
	Source string
	Unit   string
	Note   string
}

// Endpoint is an HTTP call; Path "" means the engine has none (Note says what to
// do instead).
type Endpoint struct {
	Method string
	Path   string
	Note   string
}

// Capability is what one engine kind provides, as data for the router's /status
// and the harness's manifest.
type Capability struct {
	Kind    Kind
	Figures []FigureSource // one per entry of Figures, in that order
	// HitRate says how a window's prefix-cache hit rate is derived.
	HitRate string
	// ResetPrefixCache is how to empty the prefix cache between variants.
	ResetPrefixCache Endpoint
	// DPRanks says how data-parallel ranks are addressed; "" when the adapter
	// treats the server as one engine.
	DPRanks string
	// Detect lists the signals that identify the engine, strongest first.
	Detect []string
	// Reference names where the series and endpoints were read from.
	Reference string
}

// Source returns the FigureSource of f and whether the engine has f.
func (c Capability) Source(f Figure) (FigureSource, bool) {
	for _, s := range c.Figures {
		if s.Figure == f {
			return s, s.Source != ""
		}
	}
	return FigureSource{Figure: f}, false
}

// Lacks returns the figures the engine does not have, in Figures order.
func (c Capability) Lacks() []Figure {
	var out []Figure
	for _, s := range c.Figures {
		if s.Source == "" {
			out = append(out, s.Figure)
		}
	}
	return out
}

// Table renders the capability as aligned text lines ("figure  source  note"),
// for a CLI or a manifest.
func (c Capability) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine %s (%s)\n", c.Kind, c.Reference)
	for _, s := range c.Figures {
		src := s.Source
		if src == "" {
			src = "- (absent)"
		}
		line := fmt.Sprintf("  %-22s %s", s.Figure, src)
		if s.Note != "" {
			line += "  [" + s.Note + "]"
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "  hit rate: %s\n", c.HitRate)
	if c.ResetPrefixCache.Path != "" {
		fmt.Fprintf(&b, "  reset prefix cache: %s %s", c.ResetPrefixCache.Method, c.ResetPrefixCache.Path)
	} else {
		b.WriteString("  reset prefix cache: none")
	}
	if c.ResetPrefixCache.Note != "" {
		b.WriteString(" (" + c.ResetPrefixCache.Note + ")")
	}
	b.WriteString("\n")
	if c.DPRanks != "" {
		fmt.Fprintf(&b, "  DP ranks: %s\n", c.DPRanks)
	} else {
		b.WriteString("  DP ranks: none (one engine per URL)\n")
	}
	return b.String()
}

// CapabilityOf returns the capability of k. KindUnknown has every figure absent.
func CapabilityOf(k Kind) Capability {
	switch k {
	case KindVLLM:
		return vllmCapability
	case KindSGLang:
		return sglangCapability
	case KindLlamaCpp:
		return llamacppCapability
	}
	c := Capability{Kind: KindUnknown, HitRate: "unknown engine: none",
		ResetPrefixCache: Endpoint{Note: "unknown engine"}, Reference: "none"}
	for _, f := range Figures {
		c.Figures = append(c.Figures, FigureSource{Figure: f, Note: "engine not identified"})
	}
	return c
}

// Endpoint figure sources, shared with internal/engineapi (one home per name).
const (
	SrcModelsMaxModelLen = "GET /v1/models data[].max_model_len"
	SrcModelsMetaNCtx    = "GET /v1/models data[].meta.n_ctx"
	SrcVersion           = "GET /version version"
	SrcPropsTotalSlots   = "GET /props total_slots"
	SrcPropsNCtx         = "GET /props default_generation_settings.n_ctx"
	SrcPropsKVCapacity   = "GET /props total_slots x default_generation_settings.n_ctx"
	SrcPropsBuildInfo    = "GET /props build_info"
	SrcServerInfoMaxTok  = "GET /server_info max_total_num_tokens"
	SrcServerInfoMaxRun  = "GET /server_info max_running_requests"
	SrcServerInfoCtxLen  = "GET /server_info context_length"
	SrcServerInfoVersion = "GET /server_info version"
)

// Derived /metrics sources that are not a single series.
const (
	SrcVLLMKVCapacity    = "vllm:cache_config_info (num_gpu_blocks - 1) x block_size"
	SrcVLLMLocalCompute  = `vllm:prompt_tokens_by_source_total{source="local_compute"}`
	SrcSGLangPrefillComp = SGLangRealtimeTokens + `{mode="prefill_compute"}`
	// SrcSGLangCachedZero marks PrefixHits read as 0 because SGLang had not yet
	// counted a cached token (sglang:cached_tokens_total appears at the first hit).
	SrcSGLangCachedZero = SGLangCachedTokens + " (no sample yet: 0 until the first hit, as collector.py increments it only when > 0)"
)

var vllmCapability = Capability{
	Kind: KindVLLM,
	Figures: []FigureSource{
		{FigRunning, "vllm:num_requests_running", "requests", ""},
		{FigWaiting, "vllm:num_requests_waiting", "requests", ""},
		{FigKVUsage, "vllm:kv_cache_usage_perc | vllm:gpu_cache_usage_perc", "fraction", ""},
		{FigKVCapacity, SrcVLLMKVCapacity, "tokens", "block 0 is the null block"},
		{FigPrefixQueries, "vllm:prefix_cache_queries_total | vllm:gpu_prefix_cache_queries_total", "tokens", "early V1 counted blocks (Stats.PrefixUnit)"},
		{FigPrefixHits, "vllm:prefix_cache_hits_total | vllm:gpu_prefix_cache_hits_total", "tokens", ""},
		{FigPromptTokens, "vllm:prompt_tokens_total", "tokens", "cached tokens included"},
		{FigPromptComputed, SrcVLLMLocalCompute, "tokens", "newer servers only"},
		{FigGenerationTokens, "vllm:generation_tokens_total", "tokens", ""},
		{FigPreemptions, "vllm:num_preemptions_total", "requests", ""},
		{FigRequestsFinished, "vllm:request_success_total", "requests", "summed over finished_reason"},
		{FigContextLength, SrcModelsMaxModelLen, "tokens", ""},
		{FigSlots, "", "requests", "max_num_seqs is not exported: take it from the serve command (--max-num-seqs)"},
		{FigVersion, SrcVersion, "", ""},
	},
	HitRate:          "delta vllm:prefix_cache_hits_total / delta vllm:prefix_cache_queries_total over the window, per engine label",
	ResetPrefixCache: Endpoint{Method: "POST", Path: "/reset_prefix_cache", Note: "needs VLLM_SERVER_DEV_MODE=1; resets every DP rank"},
	DPRanks:          `engine label "0".."N-1" on every series; pin with the X-data-parallel-rank header`,
	Detect:           []string{"/metrics series named vllm:*", `GET /v1/models owned_by "vllm"`, "GET /version 200 with a version"},
	Reference:        "vllm/v1/metrics/loggers.py (PrometheusStatLogger); recorded excerpts in internal/scrape/testdata",
}

var sglangCapability = Capability{
	Kind: KindSGLang,
	Figures: []FigureSource{
		{FigRunning, SGLangNumRunningReqs, "requests", ""},
		{FigWaiting, SGLangNumQueueReqs, "requests", ""},
		{FigKVUsage, SGLangTokenUsage, "fraction", "evictable radix-cache tokens count as free"},
		{FigKVCapacity, SGLangMaxTotalNumTokens + " | " + SrcServerInfoMaxTok, "tokens", ""},
		{FigPrefixQueries, SGLangPromptTokens, "tokens", "all prompt tokens of finished requests, cached included"},
		{FigPrefixHits, SGLangCachedTokens, "tokens", "no sample until the first hit: read as 0 while prompt_tokens_total is present"},
		{FigPromptTokens, SGLangPromptTokens, "tokens", "counted when a request finishes, not at admission"},
		{FigPromptComputed, SrcSGLangPrefillComp, "tokens", "newer servers only"},
		{FigGenerationTokens, SGLangGenerationTokens, "tokens", ""},
		{FigPreemptions, SGLangRetractedRequests, "requests", "retractions; newer servers only"},
		{FigRequestsFinished, SGLangNumRequests, "requests", ""},
		{FigContextLength, SrcModelsMaxModelLen + " | " + SrcServerInfoCtxLen, "tokens", ""},
		{FigSlots, SrcServerInfoMaxRun, "requests", "null when SGLang sizes it automatically"},
		{FigVersion, SrcServerInfoVersion, "", "older servers: GET /get_server_info"},
	},
	HitRate: "delta sglang:cached_tokens_total / delta sglang:prompt_tokens_total over the window (both counted at request finish); " +
		"sglang:cache_hit_rate is the last prefill batch's ratio, not a window's",
	ResetPrefixCache: Endpoint{Method: "POST", Path: "/flush_cache", Note: "GET also accepted; 400 and nothing flushed while requests run or wait"},
	Detect: []string{"/metrics series named sglang:*", `GET /v1/models owned_by "sglang"`,
		"GET /server_info (or /get_server_info before the rename) 200 with max_total_num_tokens"},
	Reference: "sgl-project/sglang python/sglang/srt/metrics/collector.py @00ae9c1590d2, " +
		"python/sglang/srt/entrypoints/http_server.py @0025436eab05 (built from source, no recorded body)",
}

var llamacppCapability = Capability{
	Kind: KindLlamaCpp,
	Figures: []FigureSource{
		{FigRunning, LlamaCppRequestsProcessing, "requests", ""},
		{FigWaiting, LlamaCppRequestsDeferred, "requests", "waiting for a free slot"},
		{FigKVUsage, LlamaCppLegacyKVUsageRatio, "fraction", "older builds only; the recorded build has no KV usage"},
		{FigKVCapacity, SrcPropsKVCapacity, "tokens", "not on /metrics"},
		{FigPrefixQueries, "", "tokens", "no lookup counter: sum usage.prompt_tokens per request"},
		{FigPrefixHits, "", "tokens", "no hit counter: sum usage.prompt_tokens_details.cached_tokens (messages: cache_read_input_tokens) per request"},
		{FigPromptTokens, "", "tokens", "llamacpp:prompt_tokens_total counts computed tokens only: see prompt_computed_tokens"},
		{FigPromptComputed, LlamaCppPromptTokens, "tokens", ""},
		{FigGenerationTokens, LlamaCppTokensPredicted, "tokens", ""},
		{FigPreemptions, "", "requests", "slots are not preempted"},
		{FigRequestsFinished, "", "requests", "not exported: count responses"},
		{FigContextLength, SrcModelsMetaNCtx + " | " + SrcPropsNCtx, "tokens", "per slot (-c divided by -np)"},
		{FigSlots, SrcPropsTotalSlots, "requests", "also GET /slots (one entry per slot)"},
		{FigVersion, SrcPropsBuildInfo, "", "GET /version is 404"},
	},
	HitRate: "no /metrics counter: sum of per-request usage.prompt_tokens_details.cached_tokens / sum of usage.prompt_tokens " +
		"(timings.cache_n / (cache_n + prompt_n); Anthropic: cache_read_input_tokens / (cache_read_input_tokens + input_tokens)); " +
		"as a cross-check, hits = sum usage.prompt_tokens - delta llamacpp:prompt_tokens_total when nothing else uses the server",
	ResetPrefixCache: Endpoint{Note: "POST /reset_prefix_cache is 404; erase each slot with POST /slots/{id}?action=erase " +
		"(not recorded here; a host-RAM prompt cache may survive it), or restart the server to start cold"},
	Detect: []string{"/metrics series named llamacpp:*", "GET /metrics 501 not_supported_error", "GET /props 200 with total_slots",
		`GET /v1/models owned_by "llamacpp"`, "response header Server: llama.cpp"},
	Reference: "llama.cpp tools/server, recorded responses at commit d32676d77426 (internal/scrape/testdata/llamacpp)",
}
