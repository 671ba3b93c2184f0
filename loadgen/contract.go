package loadgen

// This file holds the types other packages (cmd/warden, internal/run/virtual, report)
// use most: Scenario, TurnRequest, Message.

import (
	"time"
)

// Scenario is a workload and run plan, decoded strictly from scenarios/*.yaml
// (LoadScenario; schema in scenarios/README.md). A zero field means its default
// (WithDefaults). Token counts are nominal: the generator writes that many words; the
// server's tokenizer decides the real count (Result.PromptTokens). A token count may
// have a spread (the *Spread fields): each draw is then uniform over the range and
// the int field is the nominal (middle) value.
type Scenario struct {
	Name               string        `yaml:"name" json:"name"`
	Seed               uint64        `yaml:"seed" json:"seed"`                           // default 1
	Model              string        `yaml:"model" json:"model"`                         // served model name; "" = ask /v1/models
	API                string        `yaml:"api" json:"api"`                             // "openai-chat" (default), "anthropic-messages" or "openai-responses"
	SessionHeader      string        `yaml:"session_header" json:"session_header"`       // "claude-code" (default; "codex" for openai-responses), "x-session-id", "codex" or "none"
	SystemPromptTokens int           `yaml:"-" json:"system_prompt_tokens"`              // shared by all sessions; default 3500
	FirstTurnTokens    int           `yaml:"-" json:"first_turn_tokens"`                 // unique first user message; default 6000
	TurnTokens         int           `yaml:"-" json:"turn_tokens"`                       // each later user message; default 400
	Turns              int           `yaml:"turns" json:"turns"`                         // turns per session incl. the first; default 6
	MaxOutputTokens    int           `yaml:"max_output_tokens" json:"max_output_tokens"` // default 256
	ThinkTime          time.Duration `yaml:"-" json:"think_time"`                        // client-side gap between a turn's end and the next send; default 0
	Stages             []int         `yaml:"stages" json:"stages"`                       // concurrent sessions per stage; default 4,8,16,24,32
	StageDuration      time.Duration `yaml:"stage_duration" json:"stage_duration"`       // simulated; default 3m
	Warmup             time.Duration `yaml:"warmup" json:"warmup"`                       // excluded start of each stage; default 0
	Variants           []string      `yaml:"variants" json:"variants"`                   // default ["off","on"]
	ResetCache         *bool         `yaml:"reset_cache" json:"reset_cache"`             // POST /reset_prefix_cache before each variant; default true
	RequestTimeout     time.Duration `yaml:"request_timeout" json:"request_timeout"`     // no byte of a turn's response for this long fails it (simulated time; default 10m)
	// Trace replays a request trace instead of synthetic sessions (TraceSpec;
	// docs/traces.md); stages, turns and token sizes are then unused.
	Trace *TraceSpec `yaml:"trace" json:"trace,omitempty"`
	// Shape is the sessions' shape: "chain" ("" : the default, the linear
	// chain of the fields above) or "agent" (synthesized Claude Code session
	// trees, Agent; stages are then live trees and the chain's sizes unused).
	Shape string `yaml:"shape" json:"shape,omitempty"`
	// Agent holds shape agent's parameters (AgentShape; nil: every default).
	Agent *AgentShape `yaml:"agent" json:"agent,omitempty"`
	// SLO is the service-level objective goodput is counted against (the
	// report's goodput columns); nil = no goodput.
	SLO *SLO `yaml:"slo" json:"slo,omitempty"`
	// SideRequests: short requests a session sends beside some of its turns, as
	// Claude Code sends title and topic requests with the conversation's session id
	// (docs/router.md section 4). nil (the default): none.
	SideRequests *SideRequests `yaml:"side_requests" json:"side_requests,omitempty"`

	// Added by the loadgen implementation (zero = default). In YAML each spread
	// carries its count's key: the count or distribution decodes to the range of
	// its draws ([N, N] for a fixed N) and ParseScenario splits that into the
	// nominal field and the spread (zero when fixed).
	SystemPromptSpread TokenRange    `yaml:"system_prompt_tokens" json:"system_prompt_tokens_spread,omitzero"` // zero: fixed
	FirstTurnSpread    TokenRange    `yaml:"first_turn_tokens" json:"first_turn_tokens_spread,omitzero"`       // zero: fixed
	TurnSpread         TokenRange    `yaml:"turn_tokens" json:"turn_tokens_spread,omitzero"`                   // zero: fixed
	ThinkSpread        DurationRange `yaml:"think_time" json:"think_time_spread,omitzero"`                     // zero: fixed; ThinkTime is then the middle
	FailureBackoff     time.Duration `yaml:"failure_backoff" json:"failure_backoff"`                           // least gap before a failed session's replacement starts, simulated; default 1s

	// RTT is the network round-trip time between the client and the server
	// (simulated time; default 0, no network). A turn's request reaches the router
	// half an RTT after the client sends it, and every streamed event reaches the
	// client half an RTT after the server writes it, so TTFB, the turn's end and
	// the next turn's send (think_time after that end) are all client-side. Applied
	// alike in the virtual world and over HTTP to the embedded simulator; against
	// real servers (warden bench --replicas) the real network provides it and the
	// harness adds none. RTTSpread, when set, draws one RTT per turn (both halves).
	RTT       time.Duration `yaml:"-" json:"rtt,omitzero"`
	RTTSpread DurationRange `yaml:"rtt" json:"rtt_spread,omitzero"` // decodes the rtt key as ThinkSpread does; zero: fixed, RTT is then the middle
	// APIServers is the number of API-server processes of the simulated `vllm
	// serve` in front of all its DP ranks (vLLM's --api-server-count): each runs
	// the profile's front-end work (sim.FrontendCosts: chat template,
	// tokenization, per-step output handling) one piece at a time. 0 (default):
	// the front end is not modelled (requests reach the engine at once). Ignored
	// against real servers.
	APIServers int `yaml:"api_servers" json:"api_servers,omitzero"`
	// VLLMBalancer selects an older vLLM release's internal DP balancer for
	// the "affinity off" policy in the virtual world, with one balancer per
	// API-server process (api_servers of them, required): "v0.24" (fixed scan
	// start per process), "v0.26" (rotating start), "v0.26-dense" (v0.26
	// without engine counts in the coordinator's publications, as for a dense
	// model before vLLM vllm-project/vllm#49204); docs/simulator.md section 11. "" (default):
	// the router's current-main rule with one balancer. The HTTP world does
	// not model it and refuses it.
	VLLMBalancer string `yaml:"vllm_balancer" json:"vllm_balancer,omitzero"`

	source string         // file it was loaded from, for error messages
	lines  map[string]int // YAML key path -> line (yamlpos.KeyLines), for error messages
}

// SLO is a request-level service-level objective, as vLLM's benchmark
// (benchmarks/serve.py --goodput ttft:MS tpot:MS), GuideLLM and AIPerf count
// goodput: a turn meets it when it is OK, its TTFB is at most TTFB and its
// time per output token, (LastToken - FirstToken) / (output tokens - 1), at
// most TPOT. A zero field sets no limit on that figure.
type SLO struct {
	TTFB time.Duration `yaml:"ttfb" json:"ttfb_ns"`
	TPOT time.Duration `yaml:"tpot" json:"tpot_ns"`
}

// SideRequests describes the side requests of a scenario (Scenario.SideRequests).
// A side request goes out with the listed turns, at the same instant, carries the
// session's id, and has a prompt of its own: a short system prompt shared by all
// side requests and a user message of PromptTokens words. It is not a turn: the
// closed loop does not wait for it, its reply is not part of the conversation, and
// the report keeps it out of the turn figures (Result.Side).
type SideRequests struct {
	Turns           []int `yaml:"turns" json:"turns"`                         // 0-based turns that send one; e.g. [0]
	PromptTokens    int   `yaml:"prompt_tokens" json:"prompt_tokens"`         // user message words; default 300
	MaxOutputTokens int   `yaml:"max_output_tokens" json:"max_output_tokens"` // default 32
}

// Side-request defaults (SideRequests zero fields).
const (
	DefaultSidePromptTokens    = 300
	DefaultSideMaxOutputTokens = 32
	// SideSystemPromptTokens is the length of the system prompt every side request
	// shares (words).
	SideSystemPromptTokens = 120
)

// SideRequest is the prompt of a side request (TurnRequest.Side).
type SideRequest struct {
	System    string // system prompt shared by all side requests
	MaxTokens int
}

// SystemPrompt returns the system prompt tr is sent with: its side request's, else its
// session's ("" when it has neither).
func (tr *TurnRequest) SystemPrompt() string {
	switch {
	case tr.Side != nil:
		return tr.Side.System
	case tr.Session != nil:
		return tr.Session.System
	}
	return ""
}

// OutputLimit returns the output limit tr is sent with: its side request's, else
// the client's turn limit.
func (tr *TurnRequest) OutputLimit(turnLimit int) int {
	if tr.Side != nil {
		return tr.Side.MaxTokens
	}
	return turnLimit
}

// TurnRequest is one turn the closed loop wants sent. Messages is a snapshot of the
// conversation to send (the session's history ending with this turn's new user
// message); it stays valid while the session goes on, so a sender may read it
// without locking.
type TurnRequest struct {
	Session  *Session
	Turn     int           // 0-based
	Intended time.Duration // simulated instant the loop wants it sent

	Variant             string    // variant the turn belongs to ("" outside a Loop)
	Messages            []Message // history incl. this turn's user message; System is in Session.System
	Last                bool      // the session's final turn
	NominalPromptTokens int       // generator's word count of the whole prompt (system + messages)
	// Side is set for a side request (Scenario.SideRequests), sent beside turn Turn
	// of Session: Messages is then its one user message and Side.System its system
	// prompt; the closed loop ignores it (Loop.Sent, Loop.Finish).
	Side *SideRequest
	// Trace is set when the turn replays a trace request (TraceLoop): its
	// prompt is synthesized from Trace.Request (trace.Synth), not Messages, and
	// it asks for exactly Trace.Request.OutputLength tokens.
	Trace *TraceTurn
}

// Message is one chat message as the generator wrote it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}
