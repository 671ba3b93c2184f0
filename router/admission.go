package router

import (
	"errors"
	"fmt"
	"time"
)

// Admission: a new conversation whose expected working set fits no replica's KV
// cache waits at the router, in FIFO order, before its first request, so the
// conversations that run keep their prefix cache (docs/routing.md,
// "Admission"). The gate is per model (one per Balancer) and pure: the HTTP proxy
// and the virtual-time world run the same code.
//
// The rule. Replica i has room for a new conversation when
//
//	S + sum_j (P_j - S) + (E - S) <= F_i,  F_i = KVCapacityTokens_i x FillTarget
//
// over the conversations j counted on i, where
//
//   - P_j is conversation j's expected peak: max(ctx_j, min(G_j, C_i)), with
//     ctx_j its context estimate (its latest full-size request's prompt
//     tokens, as the session table keeps it) and G_j M once learned, else its
//     prior. A conversation keeps growing until it ends, so it is counted at
//     the size it is expected to reach, not at today's (on the 7-GPU fleet two
//     fit a replica at their peak and three at their first turn). C_i caps
//     the estimate: F_i for a learned one (a conversation measured to outgrow
//     a replica runs alone there), F_i / 2 for the prior: a guess nothing has
//     measured yet never holds a replica to one conversation, two whose
//     prompts fit always do (the cost of holding the second is certain, half
//     the replica's batch; reference 4-session stage and 7-GPU fleet start
//     measured in docs/routing.md "Admission").
//   - M is the median peak context of the ended conversations E is learned
//     from: the size conversations were measured to reach.
//   - The prior, until M is learned, is priorPeak(c_j, S) = c_j + (c_j - S),
//     c_j the conversation's first prompt as the gate that admitted it saw it
//     (fixed then; one whose first turn no gate saw, such as a continuing
//     conversation the router forgot, counts at ctx_j). An agent's first
//     request is S plus its own part (the task, the files it quotes) and
//     every later turn adds a reply and the next input; how many turns follow
//     is unknown until conversations end, so the rest is taken to add as much
//     again as that first own part, the one addition measured. It comes from
//     the request alone, no scenario's figure: it covers this repository's
//     workloads (first prompt p50 to peak p50: reference 11.3k to 15.0k with
//     S 4.1k, 7-GPU fleet 56.6k to 69.3k) but not long real sessions
//     (../shared/fixtures/traces/claude-code/README.md: first call p50 21k,
//     calls p50 101k), which M covers once learned.
//   - S is the prefix every conversation shares (the system prompt with its
//     template): a new conversation's first turn reads it from the cache, so the
//     median of recent first turns' cached tokens tells its size (0 until
//     MinSharedPrefixSamples first turns reported usage: counted per
//     conversation, the cautious side); it takes room once per replica;
//   - E is the expected peak context of a new conversation of first prompt p:
//     max(p, min(G, C_i)) with G the ExpectedContextQuantile of the peak
//     contexts of the last endedSamples conversations seen to end (none older
//     than endedHorizon) once MinEndedConversations have ended, else
//     priorPeak(p, S);
//   - a conversation is counted on its replica while a request of it is in
//     flight or its last request ended at most the idle window ago (IdleFactor x
//     the 90th percentile of recent end-to-next-request gaps, at least
//     MinIdleWindow, at most the session table's live window). The live window
//     measures request to request, which includes the turn itself (tens of
//     seconds under load); the idle window measures only the client's pause, so
//     a conversation that has ended stops counting within about a second of its
//     last response instead of a live window later (docs/routing.md says why:
//     the replacement conversation of a closed loop arrives the instant its
//     predecessor's last turn ends).
//
// Only a new conversation's first request is gated: a request of a session the
// router knows, a side request, and a request whose body already carries an
// assistant message (Facts.Continuing: a conversation whose home the router
// forgot) always pass. A new conversation is admitted when it is at the head of
// the queue (or the queue is empty) and some healthy replica has room; the policy
// then picks among the replicas with room. Otherwise it waits (ErrHold with a
// ticket to present when it asks again). Past MaxHold, or when the queue already
// holds MaxQueue tickets, it is admitted anyway (AdmitLimitAdmit, the default)
// or refused (ErrOverloaded). A ticket not presented again within TicketTTL is
// dropped (a waiter that vanished cannot block the head), and CancelHold drops
// one at once (a client that disconnected). With the KV capacity of a healthy
// replica unknown the gate passes everything (AdmissionStatus.State says so).
//
// With shared state (BalancerConfig.Shared) the rule is also evaluated in the
// store, atomically with the home's claim, over every router's counted
// conversations and recent reservations (SharedState.Claim with a
// Reservation): a new conversation is admitted only if the store finds room
// too, so two gates never admit into the same room. Each gate publishes (and
// reserves) its conversations' context and first context (SharedConv), and
// every router and the store compute P from the union (the largest context,
// the smallest first context any gate saw), so they count a conversation
// alike (each with its own M once learned); S comes from true first turns
// only and S and the idle window from every router's conversations
// (RemoteAdmission), docs/routing.md "Admission".

// Admission modes (AdmissionConfig.Mode, the `admission:` YAML field).
const (
	AdmissionOff = "off" // no gate (the default)
	AdmissionFit = "fit" // hold a new conversation until its working set fits
)

// What happens at a limit (AdmissionConfig.OnLimit).
const (
	AdmitLimitAdmit  = "admit"  // admitted anyway (the default)
	AdmitLimitRefuse = "refuse" // refused: ErrOverloaded (429 / 529 at the proxy)
)

// Admission defaults and estimator constants.
const (
	// DefaultFillTarget is the share of a replica's KV cache the counted working
	// sets, at their expected peaks, may fill (see the rule above): 1, they fit;
	// docs/routing.md "Admission" has the measurements of 0.9-1.2.
	DefaultFillTarget = 1.0
	// DefaultMaxHold is the longest a new conversation waits before the limit
	// action. On the 7-GPU fleet (bf16 KV) waits reach 5-8 minutes: a fleet
	// conversation lasts tens of minutes; 10 minutes is above every measured
	// wait there and on the reference (docs/routing.md "Admission"). A held
	// streaming request outlasts Claude Code's 5 minutes without a byte through
	// keep-alive events (KeepAliveAfter); others are capped at MaxSilentHold.
	DefaultMaxHold = 10 * time.Minute
	// MaxSilentHold caps the hold of a request the proxy cannot keep alive (not
	// streaming, or keep-alive off): Claude Code gives up after 5 minutes
	// without a byte (docs/router.md section 4), so the hold plus the first token's own
	// wait must stay under that; 4 minutes leaves a minute.
	MaxSilentHold = 4 * time.Minute
	// DefaultKeepAliveAfter: a streaming request held this long gets its
	// headers and keep-alive events (KeepAliveAfter); holds shorter than it
	// keep the plain HTTP statuses.
	DefaultKeepAliveAfter = time.Minute
	// KeepAliveInterval is the gap between keep-alive events while held.
	KeepAliveInterval = 15 * time.Second
	// DefaultMaxQueue bounds the waiters per model.
	DefaultMaxQueue = 1024
	// TicketTTL: a held request that has not asked again for this long has gone
	// (the virtual world asks every 0.5 s, the proxy every HoldPoll).
	TicketTTL = 5 * time.Second
	// SharedFIFOSlack: with shared state, a new conversation waits behind
	// another router's waiter that has waited this much longer than it (one
	// poll: the other router's queue is read up to a heartbeat late).
	SharedFIFOSlack = 250 * time.Millisecond
	// HoldPoll is how often a held request asks again (the proxy's wait; the
	// virtual world uses its own HoldRetry).
	HoldPoll = 250 * time.Millisecond

	// MinEndedConversations ended conversations are needed before E is learned.
	MinEndedConversations = 8
	// ExpectedContextQuantile of the ended conversations' peak contexts is E.
	ExpectedContextQuantile = 0.9
	// MinSharedPrefixSamples first turns with usage are needed before S is used.
	MinSharedPrefixSamples = 8
	// MinIdleWindow and IdleFactor: see the rule above.
	MinIdleWindow = time.Second
	IdleFactor    = 2

	// AdmissionPrefixSamples and AdmissionIdleSamples: how many S samples and
	// gaps are kept (here and, with shared state, in the store).
	AdmissionPrefixSamples = prefixSamples
	AdmissionIdleSamples   = idleSamples

	endedSamples  = 64        // ring of the peak contexts of ended conversations
	endedHorizon  = time.Hour // older samples are forgotten
	prefixSamples = 32        // ring of first turns' cached tokens
	idleSamples   = 128       // ring of end -> next request gaps
	minIdleGaps   = 16        // gaps needed before the idle window adapts
	idleRecompute = 16        // recompute the idle window every this many gaps
)

// ErrOverloaded: the admission queue is over a limit (MaxHold, MaxQueue) and the
// model is configured to refuse (AdmitLimitRefuse). The proxy answers in the
// API's overload shape: OpenAI 429 with Retry-After, Anthropic 529
// overloaded_error.
var ErrOverloaded = errors.New("overloaded: admission limit reached")

// AdmissionConfig configures one model's admission gate. Zero values mean the
// documented defaults.
type AdmissionConfig struct {
	// Mode: AdmissionOff ("" too) or AdmissionFit.
	Mode string `json:"mode" yaml:"mode"`
	// FillTarget: share of each replica's KV cache the working sets may fill;
	// 0 means DefaultFillTarget.
	FillTarget float64 `json:"fill_target" yaml:"fill_target"`
	// MaxHold: longest wait before the limit action; 0 means DefaultMaxHold,
	// NoLimitDuration (-1s; -1ns too) no limit (waits until there is room);
	// any other negative value is an error (Validate).
	MaxHold time.Duration `json:"max_hold" yaml:"max_hold"`
	// MaxQueue: most waiters; 0 means DefaultMaxQueue, NoLimit (-1) no limit,
	// any other negative value an error.
	MaxQueue int `json:"max_queue" yaml:"max_queue"`
	// OnLimit: AdmitLimitAdmit ("" too) or AdmitLimitRefuse.
	OnLimit string `json:"on_limit" yaml:"on_limit"`
	// KeepAliveAfter: a held streaming request gets its response headers and
	// the API's keep-alive events after this long held, so the hold may outlast
	// a client's no-byte timeout; 0 means DefaultKeepAliveAfter,
	// NoLimitDuration never (its hold is then capped at MaxSilentHold, as a
	// non-streaming request's); any other negative value is an error.
	KeepAliveAfter time.Duration `json:"keepalive_after" yaml:"keepalive_after"`
}

// Validate reports every problem of c.
func (c AdmissionConfig) Validate() error {
	var errs []error
	switch c.Mode {
	case "", AdmissionOff, AdmissionFit:
	default:
		errs = append(errs, fmt.Errorf("admission: mode %q is unknown (have off, fit)", c.Mode))
	}
	switch c.OnLimit {
	case "", AdmitLimitAdmit, AdmitLimitRefuse:
	default:
		errs = append(errs, fmt.Errorf("admission: on_limit %q is unknown (have admit, refuse)", c.OnLimit))
	}
	if c.FillTarget < 0 || c.FillTarget > 4 {
		errs = append(errs, fmt.Errorf("admission: fill_target %g is out of range (0 default, else (0, 4])", c.FillTarget))
	}
	errs = append(errs, checkNoLimit(c))
	return errors.Join(errs...)
}

// NoLimit (MaxQueue) and NoLimitDuration (MaxHold, KeepAliveAfter) mean "no
// limit" ("never" for KeepAliveAfter); a Go caller's -1ns is taken as
// NoLimitDuration too. Other negative values are refused, so a typo such as
// max_queue: -5 is not silently "no limit".
const (
	NoLimit         = -1
	NoLimitDuration = -time.Second
)

// checkNoLimit reports the negative limits of c that are not the no-limit value.
func checkNoLimit(c AdmissionConfig) error {
	var errs []error
	if c.MaxQueue < 0 && c.MaxQueue != NoLimit {
		errs = append(errs, fmt.Errorf("admission: max_queue %d is negative (-1 means no limit)", c.MaxQueue))
	}
	for _, d := range []struct {
		key, means string
		v          time.Duration
	}{{"max_hold", "no limit", c.MaxHold}, {"keepalive_after", "never", c.KeepAliveAfter}} {
		if d.v < 0 && d.v != NoLimitDuration && d.v != -1 {
			errs = append(errs, fmt.Errorf("admission: %s %v is negative (-1s means %s)", d.key, d.v, d.means))
		}
	}
	return errors.Join(errs...)
}

// WithDefaults resolves the zero values.
func (c AdmissionConfig) WithDefaults() AdmissionConfig {
	if c.Mode == "" {
		c.Mode = AdmissionOff
	}
	if c.FillTarget == 0 {
		c.FillTarget = DefaultFillTarget
	}
	if c.MaxHold == 0 {
		c.MaxHold = DefaultMaxHold
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.OnLimit == "" {
		c.OnLimit = AdmitLimitAdmit
	}
	if c.KeepAliveAfter == 0 {
		c.KeepAliveAfter = DefaultKeepAliveAfter
	}
	return c
}

// Admission is what the gate decided for one request (Decision.Admission).
type Admission uint8

const (
	AdmitNone            Admission = iota // no gate (off, affinity off, no session key)
	AdmitPass                             // not a new conversation: passes
	AdmitAdmitted                         // new conversation, admitted without a wait
	AdmitHeld                             // admitted after waiting in the queue
	AdmitLimit                            // admitted at max_hold or max_queue (OnLimit admit)
	AdmitCapacityUnknown                  // passed: a healthy replica's KV capacity is unknown
	AdmitWaiting                          // waiting (with ErrHold)
	AdmitRefused                          // refused at a limit (with ErrOverloaded)
)

// String is the X-Warden-Admission header value; each outcome is named for it
// (AdmitWaiting "waiting" is wire.AdmissionWaiting).
func (a Admission) String() string {
	switch a {
	case AdmitPass:
		return "pass"
	case AdmitAdmitted:
		return "admitted"
	case AdmitHeld:
		return "held"
	case AdmitLimit:
		return "limit"
	case AdmitCapacityUnknown:
		return "capacity-unknown"
	case AdmitWaiting:
		return "waiting"
	case AdmitRefused:
		return "refused"
	}
	return "none"
}
