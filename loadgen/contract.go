package loadgen

// This file holds the types other packages (cmd/warden, internal/virtual, report)
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
	Seed               uint64        `yaml:"seed" json:"seed"`                                 // default 1
	Model              string        `yaml:"model" json:"model"`                               // served model name; "" = ask /v1/models
	API                string        `yaml:"api" json:"api"`                                   // "openai-chat" (default) or "anthropic-messages"
	SessionHeader      string        `yaml:"session_header" json:"session_header"`             // "claude-code" (default) or "x-session-id"
	SystemPromptTokens int           `yaml:"system_prompt_tokens" json:"system_prompt_tokens"` // shared by all sessions; default 3500
	FirstTurnTokens    int           `yaml:"first_turn_tokens" json:"first_turn_tokens"`       // unique first user message; default 6000
	TurnTokens         int           `yaml:"turn_tokens" json:"turn_tokens"`                   // each later user message; default 400
	Turns              int           `yaml:"turns" json:"turns"`                               // turns per session incl. the first; default 6
	MaxOutputTokens    int           `yaml:"max_output_tokens" json:"max_output_tokens"`       // default 256
	ThinkTime          time.Duration `yaml:"think_time" json:"think_time"`                     // client-side gap between a turn's end and the next send; default 0
	Stages             []int         `yaml:"stages" json:"stages"`                             // concurrent sessions per stage; default 4,8,16,24,32
	StageDuration      time.Duration `yaml:"stage_duration" json:"stage_duration"`             // simulated; default 3m
	Warmup             time.Duration `yaml:"warmup" json:"warmup"`                             // excluded start of each stage; default 0
	Variants           []string      `yaml:"variants" json:"variants"`                         // default ["off","on"]
	ResetCache         *bool         `yaml:"reset_cache" json:"reset_cache"`                   // POST /reset_prefix_cache before each variant; default true
	RequestTimeout     time.Duration `yaml:"request_timeout" json:"request_timeout"`           // per turn, simulated; default 10m

	// Added by the loadgen implementation (zero = default).
	SystemPromptSpread TokenRange    `yaml:"-" json:"system_prompt_tokens_spread,omitzero"` // zero: fixed
	FirstTurnSpread    TokenRange    `yaml:"-" json:"first_turn_tokens_spread,omitzero"`    // zero: fixed
	TurnSpread         TokenRange    `yaml:"-" json:"turn_tokens_spread,omitzero"`          // zero: fixed
	FailureBackoff     time.Duration `yaml:"failure_backoff" json:"failure_backoff"`        // least gap before a failed session's replacement starts, simulated; default 1s

	source string         // file it was loaded from, for error messages
	lines  map[string]int // top-level YAML key -> line, for error messages
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
}

// Message is one chat message as the generator wrote it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}
