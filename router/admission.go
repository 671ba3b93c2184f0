package router

import (
	"errors"
	"fmt"
	"slices"
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

// ticket is one waiter in the queue.
type ticket struct {
	id     uint64
	issued time.Duration
	polled time.Duration
}

// admConv is one conversation the gate counts.
type admConv struct {
	sid      uint64 // SessionID: the id other routers know it by
	replica  int
	ctx      int64 // context estimate, tokens
	peak     int64 // largest ctx seen
	first    int64 // its first prompt (the prior's base), 0 unknown
	inflight int
	lastEnd  time.Duration
	requests int
	counted  bool
	// firstDone: the cached tokens of its first request were sampled (or it had
	// none to sample).
	firstDone bool
	// trueFirst (shared state): its request in flight is the conversation's
	// first placement in the store with no assistant message, a sample of S.
	trueFirst bool
}

type idleMark struct {
	h  uint64
	at time.Duration
}

type endedSample struct {
	peak int64
	at   time.Duration
}

// AdmissionOutcomes counts the gate's outcomes since the Balancer was built.
type AdmissionOutcomes struct {
	Admitted       uint64  `json:"admitted"`            // new conversations admitted without a wait
	AfterHold      uint64  `json:"admitted_after_hold"` // admitted after a wait
	AtLimit        uint64  `json:"admitted_at_limit"`   // admitted at max_hold / max_queue
	Refused        uint64  `json:"refused"`             // refused at a limit
	GaveUp         uint64  `json:"gave_up"`             // waiters that left (disconnect, ticket expired)
	HeldSecondsSum float64 `json:"held_seconds_sum"`    // total wait of the admitted and refused
}

// admission is the gate's state; guarded by the Balancer's lock.
type admission struct {
	cfg AdmissionConfig // defaults resolved

	convs map[uint64]*admConv
	// idleQ: conversations whose last request ended, in order of the end, to
	// stop counting after the idle window; endQ: those no longer counted, to
	// forget (and sample as ended) after the live window.
	idleQ []idleMark
	endQ  []idleMark

	queue   []*ticket
	tickets map[uint64]*ticket
	nextID  uint64

	ended  ring[endedSample]
	endedN int // conversations seen to end in all

	prefix ring[int]

	gaps    gapWindow // end -> next request gaps -> idleWin
	idleWin time.Duration

	// shared: the Balancer shares state with other routers (BalancerConfig.Shared);
	// remote: what the store said at the last decision (nil: it did not
	// answer), whose S and idle window, learned from every router's
	// conversations, stand in for this gate's own while the store answers.
	shared bool
	remote *RemoteAdmission

	out AdmissionOutcomes
}

func newAdmission(cfg AdmissionConfig) *admission {
	a := &admission{convs: map[uint64]*admConv{}, tickets: map[uint64]*ticket{},
		ended:  newRing[endedSample](endedSamples),
		prefix: newRing[int](prefixSamples),
		gaps:   newGapWindow(idleSamples, minIdleGaps, idleRecompute, IdleFactor, MinIdleWindow, 0),
	}
	a.cfg = cfg.WithDefaults()
	return a
}

func (a *admission) on() bool { return a != nil && a.cfg.Mode == AdmissionFit }

// reset forgets conversations and waiters (ResetSessions); the learned
// estimates and the outcome counts stay.
func (a *admission) reset() {
	clear(a.convs)
	a.idleQ = a.idleQ[:0]
	a.endQ = a.endQ[:0]
	for _, t := range a.queue {
		delete(a.tickets, t.id)
	}
	a.queue = a.queue[:0]
}

// sharedPrefix is S in tokens (0 until learned): with shared state the one
// every router learns together while the store answers.
func (a *admission) sharedPrefix() int64 {
	if a.remote != nil {
		if a.remote.PrefixSamples < MinSharedPrefixSamples {
			return 0
		}
		return a.remote.SharedPrefix
	}
	if a.prefix.len() < MinSharedPrefixSamples {
		return 0
	}
	s := slices.Clone(a.prefix.values())
	slices.Sort(s)
	return int64(s[len(s)/2])
}

// estimates are the rule's learned terms at one instant (admission.estimates).
type estimates struct {
	s       int64 // S
	q, m    int64 // ExpectedContextQuantile and median of the ended peaks
	learned bool  // q and m are learned (MinEndedConversations ended)
}

// priorPeak is the prior expected peak of a conversation whose first context
// was first tokens, with shared prefix s: its own part once more (the rule
// above).
func priorPeak(first, s int64) int64 { return first + max(first-s, 0) }

// capped is an expected peak est capped at c tokens (<= 0 unknown: no cap;
// estimates.cap), never below the context now, ctx.
func capped(ctx, est, c int64) int64 {
	if c > 0 {
		est = min(est, c)
	}
	return max(ctx, est)
}

// cap is C on a replica that fits fit tokens: fit for learned estimates, half
// of it for the prior (the rule above).
func (x estimates) cap(fit int64) int64 {
	if x.learned {
		return fit
	}
	return fit / 2
}

// running is the growth target G of a counted conversation of first prompt
// first (0 unknown: G is 0 until M is learned, the conversation counted at its
// size now): M once learned, else its prior.
func (x estimates) running(first int64) int64 {
	if x.learned {
		return x.m
	}
	return priorPeak(first, x.s)
}

// fresh is the growth target of a new conversation of first prompt p: the
// ended peaks' quantile once learned, else its prior.
func (x estimates) fresh(p int64) int64 {
	if x.learned {
		return x.q
	}
	return priorPeak(p, x.s)
}

// estimates returns S and the ended peaks' quantile and median (learned
// false until MinEndedConversations have ended within endedHorizon).
func (a *admission) estimates(now time.Duration) estimates {
	x := estimates{s: a.sharedPrefix()}
	var s []int64
	for _, e := range a.ended.values() {
		if now-e.at <= endedHorizon {
			s = append(s, e.peak)
		}
	}
	if len(s) < MinEndedConversations {
		return x
	}
	slices.Sort(s)
	x.q = s[min(len(s)-1, int(ExpectedContextQuantile*float64(len(s))))]
	x.m = s[len(s)/2]
	x.learned = true
	return x
}

// fit is replica r's F: the tokens its counted working sets may fill (0 when
// its KV capacity is unknown).
func (a *admission) fit(r *ReplicaState) int64 {
	return int64(float64(r.KVCapacityTokens) * a.cfg.FillTarget)
}

// counts are the counted conversations and their summed expected peaks per
// replica, the left side of the rule (sums).
type counts struct {
	n   []int
	sum []int64
}

// used is replica i's counted working set in tokens, the shared prefix once.
func (c counts) used(i int, s int64) int64 {
	if i >= len(c.n) || c.n[i] == 0 {
		return 0
	}
	return s + c.sum[i] - int64(c.n[i])*s
}

// sums counts the conversations on each replica of view, each at its expected
// peak P on it: this gate's and, with shared state, the other routers' gates'
// (remote, nil none: the union by SessionID, so a conversation both count
// counts once, on this gate's replica). A conversation's P comes from the
// union of what the gates know of it, the largest context and the first
// prompt of the gate that admitted it, so every gate and the store count it
// alike.
func (a *admission) sums(x estimates, remote *RemoteAdmission, view []ReplicaState) counts {
	nrep := len(view)
	c := counts{n: make([]int, nrep), sum: make([]int64, nrep)}
	fit := func(i int) int64 { return a.fit(&view[i]) }
	var local map[uint64]bool
	if remote != nil {
		local = make(map[uint64]bool, len(a.convs))
	}
	for _, cv := range a.convs {
		if !cv.counted || cv.replica >= nrep {
			continue
		}
		ctx := cv.ctx
		if rc, ok := remote.conv(cv.sid); ok {
			// Another gate saw its first turn: this one learns it.
			ctx, cv.first = max(ctx, rc.Tokens), minFirst(cv.first, rc.First)
		}
		if local != nil {
			local[cv.sid] = true
		}
		c.n[cv.replica]++
		c.sum[cv.replica] += capped(ctx, x.running(cv.first), x.cap(fit(cv.replica)))
	}
	if remote != nil {
		for id, rc := range remote.Convs {
			if local[id] || rc.Replica < 0 || rc.Replica >= nrep {
				continue
			}
			c.n[rc.Replica]++
			c.sum[rc.Replica] += capped(rc.Tokens, x.running(rc.First), x.cap(fit(rc.Replica)))
		}
	}
	return c
}

// conv is the other gates' view of conversation id (false: none counts it).
func (r *RemoteAdmission) conv(id uint64) (RemoteConv, bool) {
	if r == nil {
		return RemoteConv{}, false
	}
	rc, ok := r.Convs[id]
	return rc, ok
}

// minFirst is the smaller of two first contexts, a value <= 0 meaning unknown.
func minFirst(a, b int64) int64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// room reports whether replica r (index i) has room for a conversation of
// context ctx now and growth target g (its E or P is capped(ctx, g, C)).
func (a *admission) room(i int, r *ReplicaState, x estimates, ctx, g int64, c counts) bool {
	if r.SlotTokens > 0 {
		// Fixed slots (llama.cpp): a conversation holds one slot, one
		// sequence, whatever its size, and slots share no prefix.
		n := 0
		if i < len(c.n) {
			n = c.n[i]
		}
		return float64(int64(n+1)*r.SlotTokens) <= float64(r.KVCapacityTokens)*a.cfg.FillTarget
	}
	fit := a.fit(r)
	tot := capped(ctx, g, x.cap(fit))
	if i < len(c.n) && c.n[i] > 0 {
		tot = c.used(i, x.s) + max(tot-x.s, 0)
	}
	return tot <= fit
}

// idleWindow is the idle window in force: the learned one (0 until minIdleGaps
// gaps were seen, then the live window stands in), never longer than the
// session table's live window liveWin.
//
// With shared state it is learned only from the gaps every router measures
// together (a conversation's turns through several routers make one router's
// own gaps those of its turns, not the client's pauses): the live window until
// the store holds minIdleGaps.
func (a *admission) idleWindow(liveWin time.Duration) time.Duration {
	liveWin = max(liveWin, MinIdleWindow)
	if a.shared {
		if a.remote == nil || a.remote.GapSamples < minIdleGaps {
			return liveWin
		}
		return min(max(IdleFactor*a.remote.GapP90, MinIdleWindow), liveWin)
	}
	if a.idleWin == 0 {
		return liveWin
	}
	return min(a.idleWin, liveWin)
}

// expire drops conversations idle past the idle window (at most liveWin) and
// tickets not presented within TicketTTL.
func (a *admission) expire(now, liveWin time.Duration) {
	win := a.idleWindow(liveWin)
	k := 0
	for k < len(a.idleQ) && now-a.idleQ[k].at > win {
		m := a.idleQ[k]
		k++
		c := a.convs[m.h]
		if c == nil || c.inflight > 0 || c.lastEnd != m.at {
			continue
		}
		a.uncount(c)
		a.endQ = append(a.endQ, m)
	}
	if k > 0 {
		a.idleQ = append(a.idleQ[:0], a.idleQ[k:]...)
	}
	// A conversation no longer counted is kept until the live window has
	// passed, so that one that comes back records its real gap (a gap longer
	// than the idle window would otherwise never be seen, and the window would
	// never learn it); only then is it taken as ended.
	k = 0
	for k < len(a.endQ) && now-a.endQ[k].at > max(liveWin, win) {
		m := a.endQ[k]
		k++
		c := a.convs[m.h]
		if c == nil || c.inflight > 0 || c.counted || c.lastEnd != m.at {
			continue
		}
		a.ended.add(endedSample{peak: c.peak, at: now})
		a.endedN++
		delete(a.convs, m.h)
	}
	if k > 0 {
		a.endQ = append(a.endQ[:0], a.endQ[k:]...)
	}
	for i := 0; i < len(a.queue); {
		t := a.queue[i]
		if now-t.polled > TicketTTL {
			a.drop(i)
			a.out.GaveUp++
			continue
		}
		i++
	}
}

func (a *admission) uncount(c *admConv) {
	if !c.counted {
		return
	}
	c.counted = false
}

func (a *admission) count(c *admConv) {
	if c.counted {
		return
	}
	c.counted = true
}

// drop removes the i-th waiter.
func (a *admission) drop(i int) {
	delete(a.tickets, a.queue[i].id)
	a.queue = slices.Delete(a.queue, i, i+1)
}

func (a *admission) position(id uint64) int {
	if id == 0 {
		return -1
	}
	for i, t := range a.queue {
		if t.id == id {
			return i
		}
	}
	return -1
}

// gateResult is what gate decided.
type gateResult struct {
	outcome Admission
	ticket  uint64
	held    time.Duration
	tk      *ticket // the waiter an admission took off the queue (nil none)
}

// gate decides for one request of a session with hash h whose home is home
// (-1 none). For an admitted new conversation it marks the replicas without
// room unhealthy in view, so the policy picks among those with room. It returns
// ErrHold (a ticket in the result) or ErrOverloaded.
func (a *admission) gate(now time.Duration, f Facts, h uint64, home int, side bool, prompt int, view []ReplicaState, remote *RemoteAdmission) (gateResult, error) {
	if home >= 0 || side || f.Continuing || a.convs[h] != nil {
		if home >= 0 && home < len(view) && view[home].Healthy && !side {
			a.maskFull(now, a.convs[h], home, view, remote)
		}
		return gateResult{outcome: AdmitPass}, nil
	}
	pos := a.position(f.Ticket)
	var held time.Duration
	if pos >= 0 {
		held = now - a.queue[pos].issued
	}
	healthy, unknown := 0, false
	for i := range view {
		if view[i].Healthy {
			healthy++
			unknown = unknown || view[i].KVCapacityTokens <= 0
		}
	}
	if healthy == 0 {
		return gateResult{outcome: AdmitPass}, nil // the policy answers ErrNoReplica
	}
	if unknown {
		if pos >= 0 {
			a.drop(pos)
		}
		return gateResult{outcome: AdmitCapacityUnknown, held: held}, nil
	}
	x := a.estimates(now)
	p := int64(prompt)
	g := x.fresh(p)
	cnt := a.sums(x, remote, view)
	fits := 0
	for i := range view {
		if view[i].Healthy && a.room(i, &view[i], x, p, g, cnt) {
			fits++
		}
	}
	// Another router's waiter that has waited longer goes first (FIFO across
	// routers, to a poll: SharedFIFOSlack); a router whose queue is gone stops
	// publishing it within the store's key TTL.
	behind := remote != nil && remote.Waiting > 0 && remote.OldestHeld > held+SharedFIFOSlack
	if fits > 0 && !behind && (len(a.queue) == 0 || pos == 0) {
		for i := range view {
			if view[i].Healthy && !a.room(i, &view[i], x, p, g, cnt) {
				view[i].Healthy = false
			}
		}
		out := AdmitAdmitted
		var tk *ticket
		if pos >= 0 {
			tk = a.queue[pos]
			a.drop(pos)
			out = AdmitHeld
		}
		return gateResult{outcome: out, held: held, tk: tk}, nil
	}
	limit := a.cfg.MaxHold
	if f.HoldLimit > 0 && (limit < 0 || f.HoldLimit < limit) {
		limit = f.HoldLimit
	}
	over := (pos < 0 && a.cfg.MaxQueue > 0 && len(a.queue) >= a.cfg.MaxQueue) ||
		(pos >= 0 && limit > 0 && held >= limit)
	if over {
		if pos >= 0 {
			a.drop(pos)
		}
		if a.cfg.OnLimit == AdmitLimitRefuse {
			a.out.Refused++
			a.out.HeldSecondsSum += held.Seconds()
			why := fmt.Errorf("%w: %d conversations waiting, max_queue %d", ErrOverloaded, len(a.queue), a.cfg.MaxQueue)
			if pos >= 0 {
				why = fmt.Errorf("%w: held %v, max_hold %v", ErrOverloaded, held.Round(time.Millisecond), limit)
			}
			return gateResult{outcome: AdmitRefused, held: held}, why
		}
		return gateResult{outcome: AdmitLimit, held: held}, nil
	}
	if pos < 0 {
		a.nextID++
		t := &ticket{id: a.nextID, issued: now}
		a.queue = append(a.queue, t)
		a.tickets[t.id] = t
		pos = len(a.queue) - 1
	}
	a.queue[pos].polled = now
	return gateResult{outcome: AdmitWaiting, ticket: a.queue[pos].id, held: held}, ErrHold
}

// maskFull marks unhealthy in view every replica other than home (healthy)
// without room for counted conversation c, so a policy that moves or
// overflows it for load moves it only where its working set fits: a move is
// a placement of its context on the new replica, and one into a full replica
// over-admits it as surely as a new conversation would.
func (a *admission) maskFull(now time.Duration, c *admConv, home int, view []ReplicaState, remote *RemoteAdmission) {
	if c == nil || !c.counted {
		return
	}
	x := a.estimates(now)
	var cnt counts
	for i := range view {
		if i == home || !view[i].Healthy || view[i].KVCapacityTokens <= 0 {
			continue
		}
		if cnt.n == nil {
			cnt = a.sums(x, remote, view)
		}
		if !a.room(i, &view[i], x, c.ctx, x.running(c.first), cnt) {
			view[i].Healthy = false
		}
	}
}

// routed records a routed request of the session with hash h (a new
// conversation admitted, or one that passed) on decision d; ctx is its context
// estimate (the policy's Request.PromptTokens), side whether it was a side
// request.
func (a *admission) routed(now time.Duration, h, sid uint64, d Decision, ctx int, side bool, g gateResult) {
	switch g.outcome {
	case AdmitAdmitted:
		a.out.Admitted++
	case AdmitHeld:
		a.out.AfterHold++
		a.out.HeldSecondsSum += g.held.Seconds()
	case AdmitLimit:
		a.out.AtLimit++
		a.out.HeldSecondsSum += g.held.Seconds()
	}
	c := a.convs[h]
	if c == nil {
		c = &admConv{replica: d.Replica, sid: sid}
		a.convs[h] = c
	} else if c.inflight == 0 && c.lastEnd > 0 && !side {
		a.recordGap(now - c.lastEnd)
	}
	if d.Reason != ReasonOverflow && d.Replica != c.replica {
		a.uncount(c)
		c.replica = d.Replica
	}
	if !side && ctx > 0 {
		c.ctx = int64(ctx)
		c.peak = max(c.peak, c.ctx)
		if c.first == 0 && c.requests == 0 && g.outcome != AdmitPass {
			c.first = c.ctx // its first turn, through this gate
		}
	}
	a.count(c)
	c.inflight++
	if !side {
		c.requests++
	}
}

// pend stops counting the conversation with hash h while the shared store
// decides where it goes (a placement or move with a reservation): counted on
// the policy's pick meanwhile, it showed on a replica the store did not choose
// (/status of two routers: 4 conversations where 3 fit, for the claim's round
// trip). The store's reservation counts it for every router until confirm.
func (a *admission) pend(h uint64) {
	if c := a.convs[h]; c != nil {
		a.uncount(c)
	}
}

// confirm counts the conversation with hash h on replica i, where the store
// placed it (after pend).
func (a *admission) confirm(h uint64, i int) {
	if c := a.convs[h]; c != nil {
		a.uncount(c)
		c.replica = i
		a.count(c)
	}
}

// rehome counts the conversation with hash h on replica i (the shared store
// chose another replica than the policy, or kept its home).
func (a *admission) rehome(h uint64, i int) {
	c := a.convs[h]
	if c == nil || c.replica == i {
		return
	}
	was := c.counted
	a.uncount(c)
	c.replica = i
	if was {
		a.count(c)
	}
}

// released ends one request of the session with hash h.
func (a *admission) released(now time.Duration, h uint64) {
	c := a.convs[h]
	if c == nil || c.inflight == 0 {
		return
	}
	c.inflight--
	if c.inflight == 0 {
		c.lastEnd = now
		a.idleQ = append(a.idleQ, idleMark{h: h, at: now})
	}
}

// observeCache samples S from a conversation's first request: the cached
// tokens of a new conversation's first turn are the prefix it shares with the
// conversations before it. With shared state only a true first turn is a
// sample (admConv.trueFirst: a router that first sees a conversation at its
// turn 2 would sample the whole turn 1); it reports whether it sampled.
func (a *admission) observeCache(h uint64, prompt, cached int) bool {
	c := a.convs[h]
	if c == nil || c.firstDone {
		return false
	}
	c.firstDone = true
	if c.requests != 1 || prompt <= 0 || (a.shared && !c.trueFirst) {
		return false
	}
	a.prefix.add(cached)
	return true
}

// unadmit undoes routed for a new conversation (hash h) the gate admitted (g)
// whose reservation the shared store refused: it is counted nowhere, and its
// waiter (or a new one) is back at the head of the queue. Returns the hold.
func (a *admission) unadmit(now time.Duration, h uint64, g gateResult) gateResult {
	if c := a.convs[h]; c != nil {
		a.uncount(c)
		delete(a.convs, h)
	}
	switch g.outcome {
	case AdmitAdmitted:
		a.out.Admitted--
	case AdmitHeld:
		a.out.AfterHold--
		a.out.HeldSecondsSum -= g.held.Seconds()
	}
	t := g.tk
	if t == nil {
		a.nextID++
		t = &ticket{id: a.nextID, issued: now}
	}
	t.polled = now
	a.queue = slices.Insert(a.queue, 0, t)
	a.tickets[t.id] = t
	return gateResult{outcome: AdmitWaiting, ticket: t.id, held: g.held}
}

func (a *admission) recordGap(g time.Duration) {
	if !a.gaps.add(g) {
		return
	}
	if d, ok := a.gaps.window(); ok {
		a.idleWin = d
	}
}

// cancel drops a waiter's ticket (its client went away).
func (a *admission) cancel(id uint64) {
	if pos := a.position(id); pos >= 0 {
		a.drop(pos)
		a.out.GaveUp++
	}
}

// home returns the home of hash h without touching it (-1 when unknown).
func (t *SessionTable) home(h uint64) int {
	if idx, ok := t.index[h]; ok {
		return int(t.ents[idx].home)
	}
	return -1
}

// ReleaseSession ends one in-flight request on replica i, as Release, for the
// session sessionKey ("" none): with admission on, the conversation's last
// request ending starts its idle window (admission.go). Callers that know the
// request's session use it instead of Release.
func (b *Balancer) ReleaseSession(i int, sessionKey string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) || b.reps[i].inflight == 0 {
		return
	}
	now := b.now()
	b.sync(now)
	b.reps[i].inflight--
	if b.shared != nil {
		b.shared.Released(i)
	}
	if sessionKey != "" && b.adm.on() {
		b.adm.released(now, b.sessions.hash(sessionKey))
		if b.shared != nil {
			b.shared.Ended(SessionID(sessionKey))
		}
	}
}

// CancelHold drops the admission ticket of a held request whose client went
// away, so the queue forgets it at once (counted as gave up). Unknown tickets
// are ignored.
func (b *Balancer) CancelHold(ticket uint64) {
	if ticket == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.adm.cancel(ticket)
}

// SetAdmission replaces the admission configuration at run time. Switching it
// on starts with no conversation counted: the gate counts a conversation from
// its next request, so it may over-admit for about one turn. Switching it off
// lets every waiter through at its next ask. Errors: an invalid config.
func (b *Balancer) SetAdmission(cfg AdmissionConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("setting admission: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.adm.on()
	b.adm.cfg = cfg.WithDefaults()
	if !b.adm.on() || !was {
		b.adm.reset()
	}
	return nil
}

// AdmissionConfig returns the admission configuration in force (defaults
// resolved).
func (b *Balancer) AdmissionConfig() AdmissionConfig {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.adm.cfg
}

// AdmissionStatus is the gate's state as /status and the card show it.
type AdmissionStatus struct {
	AdmissionConfig
	// State: "off", "on", or "capacity-unknown" (on, but a healthy replica's KV
	// capacity is unknown, so everything passes).
	State string `json:"state"`
	// Queue: waiters now; OldestHeldS how long the head has waited, seconds.
	Queue       int     `json:"queue"`
	OldestHeldS float64 `json:"oldest_held_s"`
	// ExpectedContextTokens is E's learned growth target for a new
	// conversation, with ExpectedSource "ended-p90": the
	// ExpectedContextQuantile of the EndedSamples peak contexts of recently
	// ended conversations; before it is learned 0 and "prior": each
	// conversation is expected to reach priorPeak of its first prompt.
	ExpectedContextTokens int64  `json:"expected_context_tokens"`
	ExpectedSource        string `json:"expected_source"`
	// RunningPeakTokens is M, the size a running conversation is counted at
	// when smaller (the median peak of the same ended conversations; 0 until
	// learned: counted at its prior).
	RunningPeakTokens int64 `json:"running_peak_tokens"`
	EndedSamples      int   `json:"ended_samples"`
	EndedTotal        int   `json:"ended_total"`
	// SharedPrefixTokens is S (0 until MinSharedPrefixSamples first turns
	// reported their cached tokens; SharedPrefixSamples says how many did).
	// With shared state: conversations only other routers' gates count (in
	// Counted and WorkingTokens too), their waiters, and the longest wait among
	// them, seconds.
	RemoteConversations int     `json:"remote_conversations,omitempty"`
	RemoteQueue         int     `json:"remote_queue,omitempty"`
	RemoteOldestHeldS   float64 `json:"remote_oldest_held_s,omitempty"`
	SharedPrefixTokens  int64   `json:"shared_prefix_tokens"`
	SharedPrefixSamples int     `json:"shared_prefix_samples"`
	// IdleWindowS: a conversation stops counting this long after its last
	// request ended, seconds.
	IdleWindowS float64 `json:"idle_window_s"`
	// Per replica (index = replica): counted conversations and their working
	// set in tokens (S once per replica, each at its expected peak P), the
	// left side of the rule.
	Counted       []int             `json:"counted_conversations"`
	WorkingTokens []int64           `json:"working_set_tokens"`
	Outcomes      AdmissionOutcomes `json:"outcomes"`
}

// Admission returns the gate's state.
func (b *Balancer) Admission() AdmissionStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.adm
	now := b.now()
	st := AdmissionStatus{AdmissionConfig: a.cfg, State: "off"}
	if a.on() {
		a.expire(now, b.sessions.LiveWindow())
		st.State = "on"
		for i := range b.reps {
			if b.reps[i].healthy && b.reps[i].kvCapacity <= 0 {
				st.State = "capacity-unknown"
			}
		}
	}
	st.Outcomes = a.out
	st.Queue = len(a.queue)
	if len(a.queue) > 0 {
		st.OldestHeldS = (now - a.queue[0].issued).Seconds()
	}
	var remote *RemoteAdmission
	if b.shared != nil && a.on() {
		remote = b.shared.RemoteAdmission()
		a.remote = remote
	}
	if remote != nil {
		st.RemoteConversations, st.RemoteQueue, st.RemoteOldestHeldS = len(remote.Convs), remote.Waiting, remote.OldestHeld.Seconds()
	}
	x := a.estimates(now)
	st.ExpectedSource = "prior"
	if x.learned {
		st.ExpectedContextTokens, st.ExpectedSource, st.RunningPeakTokens = x.q, "ended-p90", x.m
	}
	cnt := a.sums(x, remote, b.capacityView())
	st.EndedSamples, st.EndedTotal = a.ended.len(), a.endedN
	st.SharedPrefixTokens, st.SharedPrefixSamples = a.sharedPrefix(), a.prefix.len()
	if a.remote != nil {
		st.SharedPrefixSamples = a.remote.PrefixSamples
	}
	st.IdleWindowS = a.idleWindow(b.sessions.LiveWindow()).Seconds()
	for i := range b.reps {
		st.Counted = append(st.Counted, cnt.n[i])
		st.WorkingTokens = append(st.WorkingTokens, cnt.used(i, x.s))
	}
	return st
}

// capacityView is the replicas' KV capacities as a view (the rest zero), for
// the gate's sums outside a decision (caller holds mu).
func (b *Balancer) capacityView() []ReplicaState {
	v := make([]ReplicaState, len(b.reps))
	for i := range b.reps {
		v[i].KVCapacityTokens = b.reps[i].kvCapacity
	}
	return v
}

// AdmitInfo is what the admission gate decided for one request (Balancer.Admit).
type AdmitInfo struct {
	Admission Admission     // AdmitNone when the gate is off
	Held      time.Duration // how long the request has waited in the queue
	Ticket    uint64        // with ErrHold: present it in Facts.Ticket when asking again
}

func (g gateResult) info() AdmitInfo {
	return AdmitInfo{Admission: g.outcome, Held: g.held, Ticket: g.ticket}
}
