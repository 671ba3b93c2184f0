package sim

import "time"

// FrontendCosts is the CPU time vLLM's API server (the `vllm serve` front end, one
// Python process per --api-server-count) spends on a request outside the engine:
// before the engine can schedule it (chat-template rendering, prompt tokenization)
// and after each engine step (the engine-core output hop and detokenization of the
// step's tokens). docs/simulator.md section 9 gives the sources of the values.
// The zero value costs nothing.
type FrontendCosts struct {
	// ChatTemplate is the fixed time per request to parse the request body and
	// render the chat template to a prompt string.
	ChatTemplate time.Duration
	// TokenizePerToken is the time to tokenize one prompt token.
	TokenizePerToken time.Duration
	// EngineCoreHop is the fixed time per engine step whose outputs reach an API
	// server process: the engine core serializes its outputs (msgpack), sends them
	// over ZMQ, and the API server's output handler decodes them.
	EngineCoreHop time.Duration
	// DetokenizePerToken is the time per output token to detokenize it
	// incrementally and render and write its streamed chunk.
	DetokenizePerToken time.Duration
}

// IsZero reports whether every cost is zero.
func (c FrontendCosts) IsZero() bool { return c == FrontendCosts{} }

// Frontend models the API-server processes in front of one or more engines as
// single-threaded FIFO workers in simulated time: every piece of work (a request's
// preprocessing, a step's output handling) runs on one process, after the work
// already queued on it. With one process serving every DP rank, the ranks' work is
// serialized. A new request goes to the process that frees first (lowest index on a
// tie), as an idle process is the one waiting in accept() on the shared listening
// socket; its outputs are handled by the same process.
//
// Frontend is a pure state machine (no clock, no goroutines, not safe for
// concurrent use): the caller passes simulated instants, in non-decreasing order
// for exact results.
type Frontend struct {
	costs FrontendCosts
	free  []time.Duration // per process: the instant its queued work ends
}

// NewFrontend returns a Frontend of processes API-server processes (at least 1).
func NewFrontend(costs FrontendCosts, processes int) *Frontend {
	return &Frontend{costs: costs, free: make([]time.Duration, max(processes, 1))}
}

// Processes returns the number of API-server processes.
func (f *Frontend) Processes() int { return len(f.free) }

// Costs returns the per-request and per-step costs.
func (f *Frontend) Costs() FrontendCosts { return f.costs }

// Next returns the process that Admit would choose now: the one that frees
// first (lowest index on a tie). It changes nothing.
func (f *Frontend) Next() int {
	proc := 0
	for i, t := range f.free {
		if t < f.free[proc] {
			proc = i
		}
	}
	return proc
}

// Admit preprocesses a request of promptTokens tokens that reaches the server at
// now. It returns the process that handles the request and the instant the engine
// receives it (at or after now).
func (f *Frontend) Admit(now time.Duration, promptTokens int) (proc int, ready time.Duration) {
	proc = f.Next()
	start := max(now, f.free[proc])
	ready = start + f.costs.ChatTemplate + time.Duration(promptTokens)*f.costs.TokenizePerToken
	f.free[proc] = ready
	return proc, ready
}

// Emit handles, on process proc, the outputs of one engine step that ended at now
// and carried tokens output tokens for requests of that process. It returns the
// instant they are written to the clients' connections (at or after now).
func (f *Frontend) Emit(proc int, now time.Duration, tokens int) time.Duration {
	start := max(now, f.free[proc])
	done := start + f.costs.EngineCoreHop + time.Duration(tokens)*f.costs.DetokenizePerToken
	f.free[proc] = done
	return done
}
