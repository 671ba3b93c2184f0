// Package enginestub is a stand-in inference server that speaks ONE engine's
// formats, for end-to-end tests where the engine itself cannot be installed:
// llama.cpp's llama-server, replaying the bodies recorded in recorded/llamacpp
// (copied verbatim from /work/shared/fixtures/llamacpp, whose README.md says how
// they were recorded; served verbatim where a response does not depend on the
// request, in the recorded shape and key order where it does), or SGLang, whose
// formats were built from SGLang's source (no recording was available; see
// sglang.go).
//
// It serves /v1/chat/completions (streaming, OpenAI SSE), /v1/messages (llama.cpp
// only: SGLang's Anthropic endpoint is newer than the source read here),
// /metrics (or the engine's answer when metrics are off), /v1/models, /health and
// the engine's own info endpoint (/props and /slots; /server_info). Counters grow
// as requests are served, and usage cached_tokens reflects a prompt cache
// modelled on the engine: llama.cpp keeps one cached sequence per slot (the
// request goes to the idle slot sharing the longest prefix, else the least
// recently used), SGLang one radix cache for all requests. A token is one byte of
// the rendered chat template, as with the recorded byte-level vocabulary.
//
// It is not a model: generated text is random printable bytes, timings are
// synthetic (Config.TokenDelay), and nothing but the recorded or source-defined
// shapes should be relied on.
package enginestub

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"time"

	"github.com/lmwarden/warden/internal/engines"
)

// Defaults, from the llama.cpp recording (-c 16384 -np 2, served as "tiny-llama").
const (
	DefaultModel      = "tiny-llama"
	DefaultSlots      = 2
	DefaultContextLen = 8192 // per slot
	// DefaultMaxTokens is how many tokens a request without max_tokens gets
	// (llama-server would generate until EOS); it then finishes with "stop".
	DefaultMaxTokens = 16
	// PromptOverheadTokens is what the recorded server counted beyond the rendered
	// template's bytes: 1472 prompt tokens for a 1470-byte rendering of
	// chat-request.json (BOS and one more).
	PromptOverheadTokens = 2
)

// Config chooses the engine and its knobs. Zero fields take the defaults above.
type Config struct {
	Kind    engines.Kind // engines.KindLlamaCpp or engines.KindSGLang
	Metrics bool         // llama-server --metrics / sglang --enable-metrics
	Model   string       // served model name
	// Slots is llama.cpp's -np (concurrent sequences, each with its own cache) or
	// SGLang's max running requests; more requests wait (llama.cpp counts them in
	// requests_deferred, SGLang in num_queue_reqs).
	Slots int
	// ContextLen is the context in tokens per slot (llama.cpp n_ctx per slot,
	// SGLang context length).
	ContextLen int
	// KVTokens is SGLang's max_total_num_tokens (default Slots x ContextLen).
	KVTokens int
	// CacheReport is SGLang's --enable-cache-report: usage carries
	// prompt_tokens_details.cached_tokens (only when > 0). llama.cpp always does.
	CacheReport bool
	// TokenDelay is slept between streamed tokens (0: none).
	TokenDelay time.Duration
	// MetricsDelay is slept before answering GET /metrics (llama.cpp only; 0:
	// none): llama-server answers /metrics from its busy loop, 1-3 s late
	// during a long prefill (seen on a real 4-server fleet).
	MetricsDelay time.Duration
}

// New returns the stand-in for cfg.Kind as an http.Handler. Errors: a kind other
// than llama.cpp or SGLang, or negative sizes.
func New(cfg Config) (http.Handler, error) {
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.ContextLen == 0 {
		cfg.ContextLen = DefaultContextLen
	}
	if cfg.KVTokens == 0 {
		cfg.KVTokens = cfg.Slots * cfg.ContextLen
	}
	if cfg.Slots < 0 || cfg.ContextLen < 0 || cfg.KVTokens < 0 || cfg.TokenDelay < 0 || cfg.MetricsDelay < 0 {
		return nil, fmt.Errorf("configuring the engine stand-in: negative size in %+v", cfg)
	}
	switch cfg.Kind {
	case engines.KindLlamaCpp:
		return newLlamaCpp(cfg)
	case engines.KindSGLang:
		return newSGLang(cfg), nil
	}
	return nil, fmt.Errorf("configuring the engine stand-in: kind %q: want llamacpp or sglang", cfg.Kind)
}

const idChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomID returns n random alphanumerics (llama-server's chatcmpl- ids are 32).
func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = idChars[int(b[i])%len(idChars)]
	}
	return string(b)
}

// randomText returns n printable ASCII bytes: n tokens of the byte vocabulary.
func randomText(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		c := '!' + b[i]%94
		if c == '"' || c == '\\' {
			c = 'x' // keep JSON escaping out of the token count
		}
		b[i] = c
	}
	return b
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
