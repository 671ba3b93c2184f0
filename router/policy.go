package router

import "time"

// ReplicaState is one replica as a Policy sees it at the instant of a decision. The
// Balancer fills a slice of them (index = replica index) under its lock; a Policy
// reads it and must not keep it.
type ReplicaState struct {
	// Healthy is false for a replica marked down (health check, passive failure) or
	// one the caller asked to avoid for this request (Facts.Avoid).
	Healthy bool
	// InFlight is the router's own count of requests sent to the replica and not yet
	// ended: exact, changed atomically with each decision.
	InFlight int
	// Running, Waiting and KVUsage are the engine's gauges as last scraped
	// (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
	// the latter a fraction 0..1). They are zero when Fresh is false.
	Running, Waiting int
	KVUsage          float64
	// Fresh says the gauges come from an observation no older than
	// BalancerConfig.StaleAfter. Stale gauges are ignored, never read as "saturated"
	// (docs/router.md, failure case 5).
	Fresh bool
	// Sessions is the number of sessions homed on the replica in the session table
	// (idle at most the session TTL); Active those of them that sent a request
	// within the table's active window.
	Sessions, Active int
	// Live is the number of sessions homed on the replica whose last request is
	// within the session table's live window (derived from the observed gaps
	// between a session's requests; SessionTable.LiveWindow), and LiveTokens the
	// sum of their context estimates (the prompt tokens of each one's latest
	// full-size request, Facts.PromptTokens; a short side request does not
	// shrink it, SessionTable.SetTokens): the working set the replica's prefix
	// cache is asked to hold. LiveTokens is 0 when no request carried a size.
	Live       int
	LiveTokens int64
	// KVCapacityTokens is the replica's KV cache in tokens (num_gpu_blocks x
	// block_size, vllm:cache_config_info), 0 when unknown.
	KVCapacityTokens int64
	// SlotTokens is the context of one of the replica's fixed slots (llama.cpp:
	// each slot holds one sequence of up to this many tokens;
	// Balancer.ObserveSlots), 0 for a paged KV cache (vLLM, SGLang).
	SlotTokens int64
}

// Request is what a Policy is told about the request being routed.
type Request struct {
	Key  string // session key; "" when the request carries none
	Home int    // the session's home replica, or -1 when it has none (or Key is "")
	// Process is the vLLM API-server process that handles the request, when
	// the caller models them (Facts.Process); ShortestQueue reads it under an
	// older release's rule (ShortestQueue.Release). 0 otherwise.
	Process int
	// Overflow is the replica the session's latest overflow (ReasonOverflow)
	// went to, when HasOverflow (false: none, so a zero Request names no
	// replica); it is forgotten when the home changes. Sticky sends the next
	// overflow there while it still qualifies, so a busy home's overflow does
	// not ping-pong between equally loaded replicas.
	Overflow    int
	HasOverflow bool
	// Threshold is the overflow threshold in force, in in-flight requests: a
	// healthy home whose InFlight exceeds it overflows (Sticky, WorkingSet,
	// ColdMove). The Balancer sets it from its one stored setting
	// (BalancerConfig.OverflowThreshold, SetOverflowThreshold), auto resolved
	// (AutoOverflowThreshold); policies keep no copy.
	Threshold int
	// PromptTokens is the size in tokens of the context the request asks its
	// replica to hold: its prompt size as the caller knows it (exact in virtual
	// mode, estimated from the body size by the proxy), except that a short side
	// request of a session (under half of the session's estimate set within the
	// live window; Balancer.Acquire) carries the session's estimate, so a title
	// request does not make a conversation look small enough to move. 0 when
	// unknown.
	PromptTokens int
	// HeldFor is how long the request has been held at the router so far after
	// ErrHold answers (0 on the first attempt).
	HeldFor time.Duration
	// CacheLost says the session's latest request served at its home read less
	// than half of its previous request's prompt from the prefix cache
	// (Balancer.ObserveCache): its context did not survive on the home between
	// turns. False when the home has not reported usage twice.
	CacheLost bool
	// NoPrefill: the request reads no prompt into the KV cache (Anthropic's
	// /v1/messages/count_tokens); ColdMove neither moves nor records it.
	NoPrefill bool
	// Side: a short side request of a session (under half of its context
	// estimate set within the live window; Balancer.Acquire), such as Claude
	// Code's title and topic requests. It reads none of the conversation's
	// prefix, so it never moves the conversation: WorkingSet sends it home, or
	// away for this request only when the home is over the overflow threshold;
	// ColdMove neither moves nor records it.
	Side bool
}

// Policy decides which replica serves a request, from the request and a snapshot of
// replica state. Implementations do no I/O and read no clock but the now they are
// given, so the HTTP proxy and the virtual-time world make identical decisions. A
// Policy may keep state of its own (ShortestQueue keeps its load snapshot); the
// Balancer calls it under its lock, so it need not be safe for concurrent use.
//
// Pick returns ErrNoReplica when no replica in reps is healthy. It does not change
// reps; the Balancer applies the decision (in-flight count, session home).
type Policy interface {
	Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error)
}

var (
	_ Policy = (*Sticky)(nil)
	_ Policy = (*ShortestQueue)(nil)
	_ Policy = (*SessionHash)(nil)
	_ Policy = (*WorkingSet)(nil)
	_ Policy = (*ColdMove)(nil)
)

// Policy names, as BalancerConfig.Policy and the `policy:` YAML field take them.
const (
	// PolicySticky: Sticky, the reference router's rule (docs/measurements.md,
	// "The reference measurement").
	PolicySticky = "sticky"
	// PolicyShortestQueue: ShortestQueue, vLLM's own DP balancer (no affinity).
	PolicyShortestQueue = "shortest-queue"
	// PolicySessionHash: SessionHash, hash of the session id mod replicas (the
	// reference router's earlier placement).
	PolicySessionHash = "session-hash"
	// PolicyWorkingSet: WorkingSet, placement by in-flight then live working set,
	// overflow that moves a conversation for good.
	PolicyWorkingSet = "working-set"
	// PolicyColdMove: ColdMove, WorkingSet plus moving a conversation a cache
	// model calls evicted to a replica with fewer requests in flight.
	PolicyColdMove = "cold-move"
	// DefaultAffinityPolicy is the policy used with affinity on when none is named.
	DefaultAffinityPolicy = PolicyWorkingSet
)

// PolicyNames lists the selectable policies.
func PolicyNames() []string {
	return []string{PolicyWorkingSet, PolicyColdMove, PolicySticky, PolicySessionHash, PolicyShortestQueue}
}

// ValidPolicy reports whether name is a known policy name ("" is valid: default).
func ValidPolicy(name string) bool {
	if name == "" {
		return true
	}
	for _, n := range PolicyNames() {
		if n == name {
			return true
		}
	}
	return false
}
