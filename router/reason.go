package router

import (
	"errors"
	"time"
)

// ErrNoReplica: no healthy replica can take the request (the proxy answers 503).
var ErrNoReplica = errors.New("no healthy replica")

// ErrHold: the policy holds a new conversation at the router instead of placing it
// now (router-side admission, WorkingSet.AdmitHold): no replica has room for its
// context yet, the fleet as a whole does, and one is expected to free soon. The
// caller asks again later (Facts.HeldFor says for how long it has held the request
// so far); the request is not counted anywhere meanwhile.
var ErrHold = errors.New("held for admission")

// Reason says why a replica was chosen. It is sent in the X-Warden-Decision header.
type Reason uint8

const (
	ReasonSticky   Reason = iota // session's home, under the overflow threshold
	ReasonPlaced                 // new session placed on the least-loaded replica
	ReasonOverflow               // home over threshold; served elsewhere this once
	ReasonRehome                 // home unhealthy (or gone); session moved for good
	ReasonNoKey                  // no session key: shortest-queue placement
	ReasonBalanced               // affinity off: vLLM-style shortest-queue
	// ReasonMoved: home over threshold and the conversation moved for good to a
	// clearly less loaded replica (WorkingSet), so it does not bounce back to a
	// home whose copy of its cache is going stale.
	ReasonMoved
	// ReasonPrefix: no session key; the replica that was sent the longest part
	// of the request's prompt prefix (BalancerConfig.Keyless KeylessPrefix).
	ReasonPrefix
	// ReasonResponse: the request continues a Responses API response
	// (previous_response_id) and went to the replica that produced it, whatever
	// its load (responsehome.go).
	ReasonResponse
	// ReasonParent: a Claude Code subagent's first call went to its parent's
	// home, under the overflow threshold (follow_subagents; stepSubagentParent).
	ReasonParent
	// ReasonDrainMove: the session's home drains in move mode (SetDrain,
	// DrainMove): the conversation moved for good to another replica, which
	// does not hold its prefix (its next prefill is cold).
	ReasonDrainMove

	numReasons = int(ReasonDrainMove) + 1
)

// Reasons lists every Reason in order, for metrics and status output.
var Reasons = [...]Reason{ReasonSticky, ReasonPlaced, ReasonOverflow, ReasonRehome, ReasonNoKey, ReasonBalanced, ReasonMoved, ReasonPrefix, ReasonResponse, ReasonParent, ReasonDrainMove}

// String returns the header/metric value: sticky, placed, overflow, rehome, no-key,
// balanced, moved, prefix, response, parent, drain-move.
func (r Reason) String() string {
	switch r {
	case ReasonSticky:
		return "sticky"
	case ReasonPlaced:
		return "placed"
	case ReasonOverflow:
		return "overflow"
	case ReasonRehome:
		return "rehome"
	case ReasonNoKey:
		return "no-key"
	case ReasonBalanced:
		return "balanced"
	case ReasonMoved:
		return "moved"
	case ReasonPrefix:
		return "prefix"
	case ReasonResponse:
		return "response"
	case ReasonParent:
		return "parent"
	case ReasonDrainMove:
		return "drain-move"
	}
	return "unknown"
}

// Facts are what the router knows about a request when it decides.
type Facts struct {
	SessionKey string // "" when the request carries none
	// Avoid is a bit set of replicas (bit i = replica i, first 64 replicas only)
	// not to choose for this request, e.g. one that just failed it before sending a
	// byte. An avoided home is not re-homed: the request overflows instead.
	Avoid uint64
	// PromptTokens is the request's prompt size in tokens, 0 when unknown: exact
	// in virtual mode. The session table keeps the latest value per session as its
	// context estimate (ReplicaState.LiveTokens).
	PromptTokens int
	// BodyBytes is the request body's size; when PromptTokens is 0, Acquire
	// estimates the prompt from it with the tokens-per-byte ratio ObserveSize
	// has calibrated (BytesPerTokenEstimate until then). The HTTP proxy sets it.
	BodyBytes int
	// HeldFor is how long the caller has held this request after ErrHold answers
	// (0 on the first attempt).
	HeldFor time.Duration
	// NoPrefill marks a request that reads no prompt into the KV cache (the proxy
	// sets it for /v1/messages/count_tokens); passed on as Request.NoPrefill.
	NoPrefill bool
	// Ticket is the admission ticket an earlier ErrHold answer gave this request
	// (Decision.Ticket), 0 on the first attempt (admission.go).
	Ticket uint64
	// Continuing: the request continues a conversation (its body already
	// carries an assistant message; in virtual mode, a turn after the first), so
	// admission never holds it even when the router does not know its session.
	Continuing bool
	// HoldLimit caps this request's admission hold below the model's max_hold
	// (0: no cap): the proxy sets router.MaxSilentHold for a request it cannot
	// keep alive while held (admission.go).
	HoldLimit time.Duration
	// ResponseID is the Responses API previous_response_id the request
	// continues ("" none): when the Balancer knows which replica produced it
	// (LearnResponse) and that replica is healthy, the request goes there.
	ResponseID string
	// ParentKey is the session key of the agent that spawned this request's
	// conversation (a Claude Code subagent whose key was split), "" for none.
	// While the parent has a home, admission never holds the subagent: it is
	// part of a tree already admitted. FollowParent: a conversation without a
	// home starts on its parent's (stepSubagentParent, follow_subagents).
	ParentKey    string
	FollowParent bool
	// Agent is the agent id a Claude Code subagent's request carries
	// (X-Claude-Code-Agent-Id), "" for none, whatever the subagent rule. With
	// the key kept (no split) admission counts the subagent's calls as a child
	// of the session's conversation, beside it (admission_tree.go).
	Agent string
	// Tools: the body carries a non-empty tool list. A coding agent's
	// main-loop call does; its side requests (title, topic, quota probe) send
	// none, so a shorter main-loop call of the session's own agent (Agent "")
	// is never taken for a side request: its context really shrank (a
	// compaction) and it sets the estimate.
	Tools bool
	// Process is the simulated vLLM API-server process that accepted the
	// request (virtual world with BalancerConfig.VLLMRelease set), passed on as
	// Request.Process; 0 otherwise.
	Process int
	// Prefix holds the chained hashes of the prompt's leading pieces
	// (PrefixHashes), for keyless placement (BalancerConfig.Keyless); read only
	// when SessionKey is "". nil: unknown.
	Prefix []uint64
}

// SideMeasure is the request size the side-request test compares between the
// requests of one session (SessionTable.contextTokens): BodyBytes when known (the
// HTTP proxy), else PromptTokens (exact in virtual mode). Either is the request's
// own size, so the test does not drift with the bytes-per-token ratio that other
// traffic moves.
func (f Facts) SideMeasure() int {
	if f.BodyBytes > 0 {
		return f.BodyBytes
	}
	return f.PromptTokens
}

// DecisionEvent is what BalancerConfig.OnDecision is told about one decision.
// View is the state the policy saw (index = replica); it is only valid during the
// call.
type DecisionEvent struct {
	Now      time.Duration
	Facts    Facts
	Home     int // the session's home before the decision, -1 none
	Decision Decision
	Policy   string
	View     []ReplicaState
}

// Decision is the outcome of one routing decision.
type Decision struct {
	Replica int // index into the Balancer's replicas
	Reason  Reason
}
