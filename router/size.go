package router

// SizeSource says where the body bytes per prompt token ratio comes from
// (Balancer.BytesPerToken).
type SizeSource string

const (
	// SizeAssumed: BytesPerTokenEstimate (nothing measured yet).
	SizeAssumed SizeSource = "assumed"
	// SizeResponses: the responses' own prompt_tokens (ObserveSize).
	SizeResponses SizeSource = "responses"
	// SizeMetrics: body bytes routed over vllm:prompt_tokens_total in the
	// scrape window (ObserveSizeWindow), used while responses report no usage
	// (OpenAI streams without stream_options.include_usage).
	SizeMetrics SizeSource = "metrics"
)

// Size calibration (Balancer.ObserveSize): each observation keeps sizeDecay of
// the sums before it (a memory of about 200 requests), and the ratio is used
// once SizeMinSeen requests were seen.
const (
	sizeDecay   = 0.995
	SizeMinSeen = 8
)

// ObserveSize calibrates the prompt estimate from a finished request: its body
// was bodyBytes long and the server counted promptTokens (usage prompt_tokens,
// or input_tokens plus the cache counts on the Anthropic API). Ignored when
// either is <= 0. The ratio of the decayed sums replaces BytesPerTokenEstimate
// once SizeMinSeen requests were seen, so the estimate follows the served
// tokenizer and chat template instead of English's 4 bytes per token (the
// simulator's pseudo-words run at about 3.5 bytes per token, a JSON body of
// Claude Code tool definitions differently again).
func (b *Balancer) ObserveSize(bodyBytes, promptTokens int) {
	if bodyBytes <= 0 || promptTokens <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizeBytes = b.sizeBytes*sizeDecay + float64(bodyBytes)
	b.sizeTokens = b.sizeTokens*sizeDecay + float64(promptTokens)
	b.sizeSeen++
}

// ObserveSizeWindow offers the ratio measured from the replicas' /metrics: the
// request body bytes the router sent to the model's replicas over a scrape window
// and the prompt tokens they counted over it (vllm:prompt_tokens_total). It is
// used only while the responses have not calibrated the estimate (ObserveSize:
// clients that ask for no usage in their streams), and only from a window that
// counted at least MinMeasuredPromptTokens tokens; the latest such window wins.
// Its bias: tokens of traffic that did not pass the router count too, so the
// ratio reads low and the estimates high. With BalancerConfig.Shared it is
// ignored: the other routers' traffic is in the tokens and not in the bytes, so
// the ratio reads low by their share (0.08 bytes per token, estimates 40x too
// high, for a router that had just joined in the two-router e2e test: its live
// working sets then read over the KV cache and WorkingSet's fit move fired);
// the estimate waits for the responses instead.
func (b *Balancer) ObserveSizeWindow(bodyBytes, promptTokens float64) {
	if promptTokens < MinMeasuredPromptTokens || bodyBytes <= 0 || b.shared != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.winBytes, b.winTokens = bodyBytes, promptTokens
}

// BytesPerToken returns the body bytes per prompt token the prompt estimates use
// and its source: the responses (ObserveSize) once SizeMinSeen of them reported
// their prompt size, else the latest /metrics window (ObserveSizeWindow), else
// the assumed BytesPerTokenEstimate.
func (b *Balancer) BytesPerToken() (float64, SizeSource) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tokPerByte, src := b.tokensPerByte()
	return 1 / tokPerByte, src
}

// tokensPerByte is BytesPerToken's ratio inverted (caller holds mu).
func (b *Balancer) tokensPerByte() (float64, SizeSource) {
	switch {
	case b.sizeMeasured():
		return b.sizeTokens / b.sizeBytes, SizeResponses
	case b.winTokens > 0:
		return b.winTokens / b.winBytes, SizeMetrics
	}
	return 1.0 / BytesPerTokenEstimate, SizeAssumed
}

// sizeMeasured reports whether ObserveSize has seen enough requests for its
// ratio to replace BytesPerTokenEstimate (caller holds mu).
func (b *Balancer) sizeMeasured() bool {
	return b.sizeSeen >= SizeMinSeen && b.sizeBytes > 0 && b.sizeTokens > 0
}

// estimateTokens is the prompt estimate for a body of n bytes (caller holds mu).
func (b *Balancer) estimateTokens(n int) int {
	tpb, src := b.tokensPerByte()
	if src == SizeAssumed {
		return EstimatePromptTokens(n)
	}
	return int(float64(n) * tpb)
}

// EstimateTokens is the prompt-token estimate the policies use for a request body
// of n bytes: n times the measured tokens per byte, or EstimatePromptTokens(n)
// before anything was measured (BytesPerToken says which).
func (b *Balancer) EstimateTokens(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.estimateTokens(n)
}

// BytesPerTokenEstimate is the body bytes the proxy counts per prompt token when it
// estimates a request's size before any response has told it better: about 4
// characters per token of English text (the usual rule of thumb for BPE
// tokenizers). Once responses report their prompt_tokens, the Balancer uses the
// measured ratio instead (Balancer.ObserveSize): the estimate is compared with KV
// capacities in tokens (WorkingSet's fit move, ColdMove), so its scale matters.
const BytesPerTokenEstimate = 4

// EstimatePromptTokens estimates a request's prompt size in tokens from its body
// size in bytes (Facts.PromptTokens in the HTTP proxy).
func EstimatePromptTokens(bodyBytes int) int { return bodyBytes / BytesPerTokenEstimate }
