package router

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
