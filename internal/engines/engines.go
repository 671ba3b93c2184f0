// Package engines names the inference engines a fleet may run (vLLM, SGLang,
// llama.cpp) and holds what one scrape or probe learned about a replica as
// figures that carry their own source: every figure is a Value whose Source names
// the series or endpoint it was read from, and a figure the engine does not have
// has an empty Source, never a silent zero (docs/bench.md, failure case 4: a
// missing series is not zero). Capability says,
// per engine, which figures exist and where they come from, as data that the
// router's /status and the harness's manifest can print.
//
// The package is pure (no net/http): internal/scrape fills Stats from a /metrics
// body, internal/engineapi fills Info from the JSON endpoints (/v1/models,
// /props, /server_info, /version).
package engines

import (
	"fmt"
	"strings"
)

// Kind is an engine family. The zero value is not a kind; use KindUnknown.
type Kind string

const (
	KindUnknown  Kind = "unknown"
	KindVLLM     Kind = "vllm"
	KindSGLang   Kind = "sglang"
	KindLlamaCpp Kind = "llamacpp"
)

// Kinds lists the known engine kinds, KindUnknown excluded, in a fixed order.
var Kinds = []Kind{KindVLLM, KindSGLang, KindLlamaCpp}

// ParseKind reads a configured kind: "vllm", "sglang", "llamacpp" (also
// "llama.cpp" and "llama-server"), or "" / "auto" / "unknown" for KindUnknown
// (detect). Matching ignores case and surrounding space. Any other word is an
// error naming the accepted ones.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto", "unknown":
		return KindUnknown, nil
	case "vllm":
		return KindVLLM, nil
	case "sglang":
		return KindSGLang, nil
	case "llamacpp", "llama.cpp", "llama-server", "llama_cpp":
		return KindLlamaCpp, nil
	}
	return KindUnknown, fmt.Errorf("parsing engine kind %q: want vllm, sglang, llamacpp or auto", s)
}

// Value is one figure with where it came from. Source is the series name (e.g.
// "vllm:num_requests_running") or the endpoint and field (e.g. "GET /props
// total_slots"); an empty Source means the engine did not report the figure and V
// is meaningless. A derived figure names its inputs and the formula.
type Value struct {
	V      float64
	Source string
}

// Has reports whether the figure was reported.
func (v Value) Has() bool { return v.Source != "" }

// Get returns the value and whether it was reported.
func (v Value) Get() (float64, bool) { return v.V, v.Source != "" }

// String is the value with its source, or "absent".
func (v Value) String() string {
	if !v.Has() {
		return "absent"
	}
	return fmt.Sprintf("%g (%s)", v.V, v.Source)
}

// Of makes a reported Value.
func Of(v float64, source string) Value { return Value{V: v, Source: source} }

// Stats is one engine's (one DP rank's) figures from one /metrics scrape.
// Counters are cumulative since the server started; take deltas with
// vllmmetrics.CounterDelta.
type Stats struct {
	Kind  Kind
	Rank  string // vLLM's engine label (DP rank); "" for a server without ranks
	Model string // model_name label where the engine has one

	Running Value // requests being computed (vLLM running, SGLang running, llama.cpp processing)
	Waiting Value // requests queued for admission (llama.cpp: deferred for want of a slot)
	KVUsage Value // fraction 0..1 of the KV cache in use (idle cached blocks count as free)

	// KVCapacityTokens is the KV cache size in tokens (vLLM: blocks x block size
	// without the null block; SGLang: max_total_num_tokens). llama.cpp has none on
	// /metrics: see engineapi.Info.KVCapacityTokens (slots x n_ctx from /props).
	KVCapacityTokens Value

	// PrefixQueries and PrefixHits are the cumulative prompt tokens looked up in and
	// found in the prefix cache (vLLM may count blocks, see PrefixUnit); the hit
	// rate over a window is delta hits / delta queries. Absent on llama.cpp, whose
	// hit rate must come from per-request usage (Capability.HitRate).
	PrefixQueries Value
	PrefixHits    Value
	PrefixUnit    string // "tokens" or "blocks"; "" when the counters are absent

	PromptTokens         Value // prompt tokens admitted, cached ones included
	PromptComputedTokens Value // prompt tokens actually prefilled (not served from cache)
	GenerationTokens     Value // tokens generated
	Preemptions          Value // requests preempted (SGLang: retracted)
	RequestsFinished     Value // requests finished
}

// Snapshot is one parsed /metrics body of one engine kind.
type Snapshot struct {
	Kind Kind
	// Ranks holds one Stats per vLLM DP rank, in label order; other engines have
	// exactly one. Empty when the body carried none of the kind's series.
	Ranks []*Stats
}

// Rank returns the Stats with the given rank label, or nil.
func (s *Snapshot) Rank(label string) *Stats {
	for _, r := range s.Ranks {
		if r.Rank == label {
			return r
		}
	}
	return nil
}
