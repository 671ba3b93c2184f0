package virtual

import (
	"strings"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
	"github.com/lmwarden/warden/sim"
)

// traceSynth is the prompt synthesizer for the simulator's tokenizer: one token
// per word, and the template's own tokens (one user message plus the generation
// prompt) counted in Overhead, so a prompt is exactly input_length tokens. bs
// and salt are the scenario's (Scenario.BlockPrompts).
func traceSynth(bs int, salt uint64) *trace.Synth {
	return &trace.Synth{
		BlockSize: bs,
		Overhead:  len(sim.RenderChat(nil, []sim.ChatMessage{{Role: "user", Content: ""}}, true)),
		Salt:      salt,
	}
}

// tracePrompt renders a trace request's synthesized prompt into a new slice
// (a prompt may wait for its engine, on the delayed path, while the next one is
// rendered). The text lives only while it is tokenized.
func (r *run) tracePrompt(tt *loadgen.TraceTurn) []uint32 {
	r.traceText.Reset()
	// A strings.Builder's writes do not fail.
	_ = r.synth.WriteContent(&r.traceText, &tt.Request, tt.Index)
	return sim.RenderChat(make([]uint32, 0, tt.Request.InputLength+1), []sim.ChatMessage{{Role: "user", Content: r.traceText.String()}}, true)
}

// fleetKVTokens is the KV capacity of all engines together (the shared-LRU
// column's cache size).
func (r *run) fleetKVTokens() int64 {
	ec := r.engines[0].Config()
	return int64(len(r.engines)) * int64(ec.NumGPUBlocks-1) * int64(ec.BlockSize)
}

// traceState is the run's trace replay state (zero without a trace).
type traceState struct {
	synth     *trace.Synth
	traceText strings.Builder
}
