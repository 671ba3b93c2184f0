package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
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
	// home, under the overflow threshold (follow_subagents; parentStep).
	ReasonParent

	numReasons = int(ReasonParent) + 1
)

// Reasons lists every Reason in order, for metrics and status output.
var Reasons = [...]Reason{ReasonSticky, ReasonPlaced, ReasonOverflow, ReasonRehome, ReasonNoKey, ReasonBalanced, ReasonMoved, ReasonPrefix, ReasonResponse, ReasonParent}

// String returns the header/metric value: sticky, placed, overflow, rehome, no-key,
// balanced, moved, prefix, response, parent.
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
	// home starts on its parent's (parentStep, follow_subagents).
	ParentKey    string
	FollowParent bool
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

// Balancer defaults.
const (
	// MinMeasuredPromptTokens: while the responses report no prompt size, bytes
	// per token is measured as the request body bytes the router sent to the
	// replicas over the rate window divided by the prompt tokens they counted
	// (vllm:prompt_tokens_total) over the same window, once that window holds at
	// least this many prompt tokens (Balancer.ObserveSizeWindow).
	MinMeasuredPromptTokens = 10_000
	// DefaultScrapeInterval is how often the router scrapes each upstream's /metrics.
	DefaultScrapeInterval = time.Second
	// DefaultStaleAfter: scraped gauges older than this are ignored (3 x the
	// router's DefaultScrapeInterval).
	DefaultStaleAfter = 3 * DefaultScrapeInterval
)

// BalancerConfig configures one model's Balancer. Zero values mean the documented
// defaults; all durations are simulated time, as read from Now.
type BalancerConfig struct {
	Replicas []string // replica names, e.g. "r0" or "r0/rank1"; at least one
	Affinity bool     // session affinity on (Policy) or off (ShortestQueue)
	// Policy used while affinity is on: one of PolicyNames ("" means
	// DefaultAffinityPolicy). With affinity off the Balancer always uses
	// ShortestQueue.
	Policy string
	// AffinityPolicy, when set, replaces Policy by this implementation
	// (experiments and tests). It is called under the Balancer's lock.
	AffinityPolicy Policy
	// KVCapacityTokens: each replica's KV cache in tokens (num_gpu_blocks x
	// block_size), for policies that compare working sets with the cache; 0 means
	// unknown until ObserveCapacity.
	KVCapacityTokens int64
	// LiveWindow: fixed window of the live-conversation count; 0 means adaptive
	// (see DefaultLiveWindow).
	LiveWindow time.Duration
	// OnDecision, when set, is called after every decision under the Balancer's
	// lock (instrumentation); it must be fast and must not call the Balancer.
	OnDecision func(DecisionEvent)

	MaxNumSeqs int // vLLM --max-num-seqs per replica, for the auto threshold; default VLLMDefaultMaxNumSeqs
	// SlotBased: the replicas run MaxNumSeqs fixed slots (llama.cpp -np); the
	// auto threshold is then SlotOverflowThreshold(MaxNumSeqs).
	SlotBased bool
	// LearnSlots (with SlotBased): MaxNumSeqs was not configured, so the
	// smallest slot count a replica reports (ObserveSlots: llama.cpp GET /props
	// total_slots) replaces it.
	LearnSlots bool
	// OverflowThreshold: a request leaves its home when the home's in-flight count
	// exceeds it. 0 means auto: MaxNumSeqs / 4 (AutoOverflowThreshold).
	OverflowThreshold int
	// OverflowMargin: see Sticky.Margin. 0 means DefaultOverflowMargin.
	OverflowMargin int
	SessionTTL     time.Duration // idle TTL of a session's home; default 1h
	MaxSessions    int           // LRU bound of the session table; default 1,000,000
	ActiveWindow   time.Duration // see DefaultActiveWindow
	// SnapshotInterval: how often the shortest-queue balancer refreshes its view of
	// load, as vLLM's DP coordinator does (~100 ms); between snapshots it adds +1 per
	// request it sent. Default 100ms.
	SnapshotInterval time.Duration
	// StaleAfter: observations (ObserveEngine) older than this are ignored.
	// Default DefaultStaleAfter.
	StaleAfter time.Duration
	Seed       uint64               // tie-break randomness
	Now        func() time.Duration // clock; required
	// Outlier: ejection of a replica whose requests fail while its health
	// check passes (ObserveOutcome); zero values mean the defaults.
	Outlier OutlierConfig
	// Admission configures the admission gate (admission.go); off by default.
	Admission AdmissionConfig
	// Shared, when set, is the state shared with other routers (SharedState:
	// session homes, in-flight counts, live working sets). nil: this Balancer's
	// own state only (one router, the virtual world).
	Shared SharedState
	// Keyless is the placement of requests without a session key while affinity
	// is on: KeylessPrefix or KeylessShortestQueue ("" = DefaultKeyless,
	// prefix; prefix.go).
	Keyless string
	// PrefixPieceTokens is how many tokens one piece of Facts.Prefix stands for
	// (the prefix index's bound is KV capacity / this); default
	// DefaultPrefixPieceTokens.
	PrefixPieceTokens int
}

// DefaultPrefixPieceTokens is the prefix index's piece in tokens: vLLM's default
// KV block size (16, vllm/config/cache.py), the unit its prefix cache hits in.
const DefaultPrefixPieceTokens = 16

// Balancer holds one model's replica pool state, its policies and its session table,
// with no I/O: the HTTP Proxy and the virtual-time world both drive it. Safe for
// concurrent use: every method takes one mutex, held for a few hundred nanoseconds
// at most and never across I/O.
type Balancer struct {
	mu sync.Mutex

	now        func() time.Duration
	staleAfter time.Duration
	maxNumSeqs int
	slotBased  bool
	learnSlots bool // maxNumSeqs follows ObserveSlots (the fewest slots a replica has now)
	configSeqs int  // maxNumSeqs as configured (or its default): what learnSlots falls back to
	// threshold is the overflow threshold as configured (0 = auto), the one
	// copy: Acquire resolves it (overflowThreshold) into Request.Threshold.
	threshold int
	affinity  bool

	reps     []replica
	view     []ReplicaState // scratch for policies, refilled under mu
	sessions *SessionTable
	sq       *ShortestQueue
	sticky   *Sticky
	policy   Policy // affinity-on policy
	polName  string
	onDec    func(DecisionEvent)
	shared   SharedState // nil: none
	margin   int
	seed     uint64
	kvCap    int64        // configured KV capacity per replica, tokens (0 unknown)
	prefix   *PrefixIndex // keyless prefix placement; nil: shortest queue
	// responses maps Responses API ids to the replica that produced them
	// (responsehome.go); made on first use with the session table's TTL and bound.
	responses   *SessionTable
	sessionTTL  time.Duration
	maxSessions int
	outlier     OutlierConfig
	adm         *admission

	// Body size calibration (ObserveSize): decayed sums of body bytes and prompt
	// tokens of finished requests, and how many were seen.
	sizeBytes, sizeTokens float64
	sizeSeen              int
	// Fallback (ObserveSizeWindow): body bytes and prompt tokens of the latest
	// /metrics window that counted enough tokens; 0 none yet.
	winBytes, winTokens float64
}

// SizeSource says where the body bytes per prompt token ratio comes from
// (Balancer.BytesPerToken).
type SizeSource string

const (
	// SizeAssumed: BytesPerTokenEstimate (nothing measured yet).
	SizeAssumed SizeSource = "assumed"
	// SizeResponses: the responses' own prompt_tokens (ObserveSize).
	SizeResponses SizeSource = "responses"
	// SizeMetrics: body bytes routed over vllm:prompt_tokens_total in the
	// scrape window (ObserveSizeWindow), used while responses report no usage
	// (OpenAI streams without stream_options.include_usage).
	SizeMetrics SizeSource = "metrics"
)

// Size calibration (Balancer.ObserveSize): each observation keeps sizeDecay of
// the sums before it (a memory of about 200 requests), and the ratio is used
// once SizeMinSeen requests were seen.
const (
	sizeDecay   = 0.995
	SizeMinSeen = 8
)

type replica struct {
	name     string
	healthy  bool
	inflight int

	observed         bool
	running, waiting int
	kv               float64
	observedAt       time.Duration
	kvCapacity       int64
	// slots and slotTokens: the replica's fixed slots and each slot's context
	// (llama.cpp GET /props total_slots, n_ctx; ObserveSlots), 0 when not
	// slot-based.
	slots      int
	slotTokens int64

	served [numReasons]uint64

	usagePrompt, usageCached uint64 // ObserveCache totals

	out outlierState // ejection (outlier.go)
}

// NewBalancer validates cfg and builds a Balancer. All replicas start healthy.
func NewBalancer(cfg BalancerConfig) (*Balancer, error) {
	var errs []error
	if len(cfg.Replicas) == 0 {
		errs = append(errs, errors.New("replicas: at least one is required"))
	}
	if cfg.Now == nil {
		errs = append(errs, errors.New("now: a clock is required"))
	}
	if cfg.OverflowThreshold < 0 {
		errs = append(errs, fmt.Errorf("overflow threshold: %d is negative (0 means auto)", cfg.OverflowThreshold))
	}
	if cfg.MaxNumSeqs < 0 {
		errs = append(errs, fmt.Errorf("max num seqs: %d is negative", cfg.MaxNumSeqs))
	}
	if !ValidPolicy(cfg.Policy) && cfg.AffinityPolicy == nil {
		errs = append(errs, fmt.Errorf("policy: %q is unknown (have %s)", cfg.Policy, strings.Join(PolicyNames(), ", ")))
	}
	if err := cfg.Admission.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := ValidKeyless(cfg.Keyless); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("building balancer: %w", err)
	}
	maxSeqs := cfg.MaxNumSeqs
	if maxSeqs == 0 {
		maxSeqs = VLLMDefaultMaxNumSeqs
	}
	margin := cfg.OverflowMargin
	if margin <= 0 {
		margin = DefaultOverflowMargin
	}
	stale := cfg.StaleAfter
	if stale <= 0 {
		stale = DefaultStaleAfter
	}
	b := &Balancer{
		now:        cfg.Now,
		staleAfter: stale,
		maxNumSeqs: maxSeqs,
		configSeqs: maxSeqs,
		slotBased:  cfg.SlotBased,
		learnSlots: cfg.SlotBased && cfg.LearnSlots,
		threshold:  cfg.OverflowThreshold,
		affinity:   cfg.Affinity,
		sessions:   NewSessionTable(cfg.Now, cfg.SessionTTL, cfg.MaxSessions, cfg.ActiveWindow),
		sq:         NewShortestQueue(cfg.SnapshotInterval),
	}
	b.sticky = &Sticky{
		Margin: margin,
		Rand:   rand.New(rand.NewPCG(cfg.Seed, 0x5eed_57_1c)),
		NoKey:  b.sq,
	}
	b.sessions.SetLiveWindow(cfg.LiveWindow)
	b.sessionTTL, b.maxSessions = cfg.SessionTTL, cfg.MaxSessions
	b.onDec = cfg.OnDecision
	b.shared = cfg.Shared
	b.margin, b.seed, b.kvCap = margin, cfg.Seed, cfg.KVCapacityTokens
	b.outlier = cfg.Outlier.withDefaults()
	if cfg.AffinityPolicy != nil {
		b.policy, b.polName = cfg.AffinityPolicy, "custom"
	} else {
		b.setPolicy(cfg.Policy)
	}
	for _, name := range cfg.Replicas {
		b.reps = append(b.reps, replica{name: name, healthy: true, kvCapacity: cfg.KVCapacityTokens})
	}
	b.view = make([]ReplicaState, len(b.reps))
	b.sessions.grow(len(b.reps))
	b.adm = newAdmission(cfg.Admission)
	b.adm.shared = cfg.Shared != nil
	if keyless := cfg.Keyless; keyless == KeylessPrefix || (keyless == "" && DefaultKeyless == KeylessPrefix) {
		piece := cfg.PrefixPieceTokens
		if piece <= 0 {
			piece = DefaultPrefixPieceTokens
		}
		b.prefix = NewPrefixIndex(len(b.reps), piece)
	}
	return b, nil
}

// overflowThreshold is the threshold in force: the configured one, or the auto
// threshold of max_num_seqs (caller holds mu).
func (b *Balancer) overflowThreshold() int {
	if b.threshold > 0 {
		return b.threshold
	}
	if b.slotBased {
		return SlotOverflowThreshold(b.maxNumSeqs)
	}
	return AutoOverflowThreshold(b.maxNumSeqs)
}

// fillView refreshes b.view from the replica state at now. avoid masks replicas as
// unhealthy for this decision only.
func (b *Balancer) fillView(now time.Duration, avoid uint64) {
	for i := range b.reps {
		r := &b.reps[i]
		v := &b.view[i]
		v.Healthy = r.healthy && !r.out.ejected && (i >= 64 || avoid&(1<<uint(i)) == 0)
		v.InFlight = r.inflight
		v.Fresh = r.observed && now-r.observedAt <= b.staleAfter
		if v.Fresh {
			v.Running, v.Waiting, v.KVUsage = r.running, r.waiting, r.kv
		} else {
			v.Running, v.Waiting, v.KVUsage = 0, 0, 0
		}
		v.Sessions = b.sessions.Homed(i)
		v.Active = b.sessions.Active(i)
		v.Live = b.sessions.Live(i)
		v.LiveTokens = b.sessions.LiveTokens(i)
		v.KVCapacityTokens = r.kvCapacity
		v.SlotTokens = r.slotTokens
		if b.shared != nil {
			rl := b.shared.Remote(i)
			v.InFlight += rl.InFlight
			v.Live = max(v.Live, rl.Live)
			v.LiveTokens = max(v.LiveTokens, rl.LiveTokens)
		}
	}
}

// sync brings the shortest-queue snapshot up to date before a change of state.
func (b *Balancer) sync(now time.Duration) {
	if b.sq.NeedsSync(now, len(b.reps)) {
		b.fillView(now, 0)
		b.sq.Sync(now, b.view)
	}
}

// Acquire decides where a request goes and, atomically with the decision, counts it
// in flight on that replica. The caller must call Release(d.Replica) exactly once
// when the request ends (stream end, error or client disconnect). With affinity on
// the decision follows the configured policy (BalancerConfig.Policy, default
// WorkingSet), and a placed, re-homed or moved session gets its home in the
// session table in the same critical section, so concurrent first requests of one
// session land on one replica; f.PromptTokens becomes the session's context
// estimate, unless the request is a short side request of the session (under
// half of the estimate set within the live window: Claude Code's title and topic
// requests), which keeps it, and the policy is told that estimate as
// Request.PromptTokens. With affinity off it follows ShortestQueue and the session table is
// left alone. It returns ErrNoReplica when no replica is healthy.
// It returns ErrHold or ErrOverloaded when the admission gate holds or refuses
// a new conversation (Admit says more).
//
// With BalancerConfig.Shared the session's home comes from the shared store
// first and a new home is claimed there (acquireShared): the lock is not held
// while the store is asked, and a store that does not answer leaves the local
// decision in force. The admission gate then decides from this router's view
// (its queue is not shared).
func (b *Balancer) Acquire(f Facts) (Decision, error) {
	d, _, err := b.Admit(f)
	return d, err
}

// Admit is Acquire that also says what the admission gate decided
// (admission.go): with ErrHold, AdmitInfo.Ticket is what to present in
// Facts.Ticket when asking again.
func (b *Balancer) Admit(f Facts) (Decision, AdmitInfo, error) {
	d, info, _, err := b.AdmitWait(f)
	return d, info, err
}

// AdmitWait is Admit that also returns the wall time the decision waited on the
// shared state (BalancerConfig.Shared: its Home, Refresh and Claim calls, each
// bounded by the store's timeout; SharedState); 0 without shared state. The
// HTTP proxy sums it over a request's decisions (X-Warden-State-Ms).
func (b *Balancer) AdmitWait(f Facts) (Decision, AdmitInfo, time.Duration, error) {
	if b.shared != nil {
		return b.acquireShared(f)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d, info, _, err := b.acquireLocked(f, nil)
	return d, info, 0, err
}

// acquireLocked is Acquire's decision under mu. sv is what the shared state said
// (nil: no shared state, or it did not answer); it also returns what the admission
// gate decided (AdmitInfo); with sv, the shared home is
// adopted into the local table before the decision, and the returned plan, when
// not nil, is the write Acquire must make to the store (the decision is then not
// yet told to the store; without a plan it was, as Acquired).
func (b *Balancer) acquireLocked(f Facts, sv *sharedView) (Decision, AdmitInfo, *claimPlan, error) {
	if f.PromptTokens <= 0 && f.BodyBytes > 0 {
		f.PromptTokens = b.estimateTokens(f.BodyBytes)
	}
	now := b.now()
	b.sync(now)
	b.sessions.expire(now)
	b.fillView(now, f.Avoid)
	var (
		d    Decision
		info AdmitInfo
		err  error
		plan *claimPlan
	)
	home := -1
	reqSide := false
	var shResp *SharedHome
	if sv != nil {
		shResp = sv.response
	}
	if r := b.responseHome(f.ResponseID, shResp); r >= 0 && b.view[r].Healthy {
		d = Decision{Replica: r, Reason: ReasonResponse}
	} else if b.affinity {
		var h uint64
		var lost, side bool
		ctx := f.PromptTokens
		over := -1
		var g gateResult
		gated := f.SessionKey != "" && b.adm.on()
		if f.SessionKey != "" {
			h = b.sessions.hash(f.SessionKey)
			created := false
			if sv != nil && sv.home.Replica >= 0 && sv.home.Replica < len(b.reps) {
				created = b.sessions.adopt(now, h, sv.home.Replica)
			}
			ctx, side = b.sessions.contextTokens(h, now, f.PromptTokens, f.SideMeasure())
			reqSide = side
			f.Continuing = f.Continuing || (gated && b.inAdmittedTree(f))
			if gated {
				// Admission (admission.go): may hold a new conversation, or
				// leave only the replicas with room healthy in the view.
				var remote *RemoteAdmission
				if b.shared != nil {
					remote = b.shared.RemoteAdmission()
					b.adm.remote = remote
				}
				b.adm.expire(now, b.sessions.LiveWindow())
				g, err = b.adm.gate(now, f, h, b.sessions.home(h), side, ctx, b.view, remote)
				if err != nil {
					return Decision{}, g.info(), nil, err
				}
			}
			// A session first seen here through the store has no gap to record.
			home, lost = b.sessions.lookup(now, h, side || created)
			over = b.sessions.overflowTarget(h)
		}
		b.slowStart(now, home)
		byPrefix := false
		if f.SessionKey == "" && b.prefix != nil && !f.NoPrefill {
			if m, _ := b.prefix.Pick(b.view, f.Prefix, b.overflowThreshold()); m >= 0 {
				d, byPrefix = Decision{Replica: m, Reason: ReasonPrefix}, true
			}
		}
		if pd, ok := b.parentStep(f, home); ok && !byPrefix {
			d, byPrefix = pd, true
		}
		if !byPrefix {
			d, err = b.policy.Pick(now, Request{Key: f.SessionKey, Home: home, Overflow: over, HasOverflow: over >= 0, Threshold: b.overflowThreshold(), PromptTokens: ctx, HeldFor: f.HeldFor, CacheLost: lost, NoPrefill: f.NoPrefill, Side: side}, b.view)
		}
		if err == nil && gated {
			b.adm.routed(now, h, SessionID(f.SessionKey), d, ctx, side, g)
			info = g.info()
		}
		if err == nil && f.SessionKey != "" {
			d, plan = b.recordSessionDecision(now, f, sv, h, home, d, side, gated, g)
		}
	} else {
		d, err = b.sq.Pick(now, Request{Key: f.SessionKey, Home: -1, PromptTokens: f.PromptTokens}, b.view)
	}
	if err != nil {
		return Decision{}, info, nil, err
	}
	if b.onDec != nil {
		name := b.polName
		if !b.affinity {
			name = PolicyShortestQueue
		}
		b.onDec(DecisionEvent{Now: now, Facts: f, Home: home, Decision: d, Policy: name, View: b.view})
	}
	r := &b.reps[d.Replica]
	r.inflight++
	r.served[d.Reason]++
	if b.shared != nil && plan == nil {
		b.shared.Acquired(d.Replica)
		if b.affinity && b.adm.on() && f.SessionKey != "" {
			b.shared.Began(SessionID(f.SessionKey), reqSide)
		}
	}
	return d, info, plan, nil
}

// inAdmittedTree reports whether f is a subagent (Facts.ParentKey) whose
// parent has a home: part of a tree already admitted, never held, since its
// parent waits for it (the join).
func (b *Balancer) inAdmittedTree(f Facts) bool {
	return f.ParentKey != "" && b.sessions.home(b.sessions.hash(f.ParentKey)) >= 0
}

// parentStep is the subagent rule "follow": a conversation without a home
// whose parent (Facts.ParentKey) has one starts there while that replica is
// healthy in the view (admission may have taken it out) and not over the
// overflow threshold; otherwise the policy places it as any new conversation.
// The subagent keeps its own key, so its context never stands in for the
// parent's in the session table. Only this router's table is read: through
// shared state a parent homed by another router is not seen.
func (b *Balancer) parentStep(f Facts, home int) (Decision, bool) {
	if !f.FollowParent || f.ParentKey == "" || f.SessionKey == "" || home >= 0 {
		return Decision{}, false
	}
	p := b.sessions.home(b.sessions.hash(f.ParentKey))
	if p < 0 || p >= len(b.view) || !b.view[p].Healthy || b.view[p].InFlight > b.overflowThreshold() {
		return Decision{}, false
	}
	return Decision{Replica: p, Reason: ReasonParent}, true
}

// recordSessionDecision records decision d for the session (hash h, home
// before the decision, side request or not) in the session table under mu: a
// new home, an overflow target, the context estimate; with sv it returns the
// claim the store must see (acquireLocked's plan). gated and g are the
// admission gate's say. A rehome off a healthy home avoided for this request
// only becomes an overflow.
func (b *Balancer) recordSessionDecision(now time.Duration, f Facts, sv *sharedView, h uint64, home int, d Decision, side, gated bool, g gateResult) (Decision, *claimPlan) {
	switch {
	case d.Reason == ReasonRehome && home >= 0 && home < len(b.reps) && b.reps[home].healthy && !b.reps[home].out.ejected && !b.view[home].Healthy:
		// The home is healthy but was avoided for this request only.
		d.Reason = ReasonOverflow
	case d.Reason == ReasonPlaced || d.Reason == ReasonRehome || d.Reason == ReasonMoved || d.Reason == ReasonParent:
		b.sessions.set(now, h, d.Replica)
		b.countPlacement(d.Replica)
	}
	if d.Reason == ReasonOverflow {
		b.sessions.setOverflow(h, d.Replica)
	}
	b.sessions.setTokens(h, now, f.PromptTokens, f.SideMeasure(), side)
	var plan *claimPlan
	if sv != nil {
		if plan = b.plan(sv, h, d); plan != nil {
			plan.gate, plan.side, plan.from = g, side, -1
			if gated {
				plan.res = b.reservation(g, d, h, SessionID(f.SessionKey), plan.cands)
			}
			if plan.res != nil && d.Reason == ReasonMoved {
				plan.from = home
			}
			if plan.res != nil {
				b.adm.pend(h)
			}
		}
	}
	return d, plan
}

// Release ends one in-flight request on replica i. A Release without a matching
// Acquire is ignored (the count never goes negative).
func (b *Balancer) Release(i int) { b.ReleaseSession(i, "") }

// ObserveCache records how much of a finished request's prompt replica i read from
// its prefix cache: promptTokens in total and cachedTokens of them, exact counts
// from the response's usage (OpenAI prompt_tokens_details.cached_tokens, Anthropic
// cache_read_input_tokens; the proxy reads them from the stream, sim.Event gives
// them in virtual mode). They add to the replica's usage totals
// (ReplicaStatus.UsagePromptTokens, UsageCachedTokens) and, with a session key
// and affinity on, feed Request.CacheLost for the session's next request (a
// request served away from the session's home only counts in the totals).
// Ignored for an unknown replica or promptTokens <= 0; cachedTokens is clamped
// to 0..promptTokens.
func (b *Balancer) ObserveCache(sessionKey string, i, promptTokens, cachedTokens int) {
	if promptTokens <= 0 {
		return
	}
	cachedTokens = min(max(cachedTokens, 0), promptTokens)
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return
	}
	b.reps[i].usagePrompt += uint64(promptTokens)
	b.reps[i].usageCached += uint64(cachedTokens)
	if sessionKey == "" || !b.affinity {
		return
	}
	if b.adm.on() && b.adm.observeCache(b.sessions.hash(sessionKey), promptTokens, cachedTokens) && b.shared != nil {
		b.shared.ObserveFirstTurn(cachedTokens)
	}
	b.sessions.observeCache(b.sessions.hash(sessionKey), b.now(), i, promptTokens, cachedTokens)
}

// Unplace undoes the home a placement (ReasonPlaced) gave sessionKey on replica
// i when the request that caused it was refused by the upstream (a 4xx: the
// body or model was wrong, so the conversation never reached the replica's
// cache): the session is forgotten, so its next request is placed afresh and a
// client sending only bad requests is not counted as a conversation. It does
// nothing, and returns false, when affinity is off, the key is empty or
// unknown, the session's home is no longer i, or another request of the
// session was routed after the placement (its home is then in use). With
// BalancerConfig.Shared the home is deleted from the store too
// (SharedState.Forget), so the next request through any router places the
// session afresh.
func (b *Balancer) Unplace(sessionKey string, i int) bool {
	ok, _ := b.UnplaceWait(sessionKey, i)
	return ok
}

// UnplaceWait is Unplace that also returns the wall time the store's delete
// waited (0 without shared state or when nothing was undone).
func (b *Balancer) UnplaceWait(sessionKey string, i int) (bool, time.Duration) {
	if sessionKey == "" {
		return false, 0
	}
	b.mu.Lock()
	ok := b.affinity && b.sessions.unplace(b.sessions.hash(sessionKey), i)
	b.mu.Unlock()
	if !ok || b.shared == nil {
		return ok, 0
	}
	wait, _ := b.shared.Forget(sessionKey, i)
	return true, wait
}

// ObserveSize calibrates the prompt estimate from a finished request: its body
// was bodyBytes long and the server counted promptTokens (usage prompt_tokens,
// or input_tokens plus the cache counts on the Anthropic API). Ignored when
// either is <= 0. The ratio of the decayed sums replaces BytesPerTokenEstimate
// once SizeMinSeen requests were seen, so the estimate follows the served
// tokenizer and chat template instead of English's 4 bytes per token (the
// simulator's pseudo-words run at about 3.5 bytes per token, a JSON body of
// Claude Code tool definitions differently again).
func (b *Balancer) ObserveSize(bodyBytes, promptTokens int) {
	if bodyBytes <= 0 || promptTokens <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizeBytes = b.sizeBytes*sizeDecay + float64(bodyBytes)
	b.sizeTokens = b.sizeTokens*sizeDecay + float64(promptTokens)
	b.sizeSeen++
}

// ObserveSizeWindow offers the ratio measured from the replicas' /metrics: the
// request body bytes the router sent to the model's replicas over a scrape window
// and the prompt tokens they counted over it (vllm:prompt_tokens_total). It is
// used only while the responses have not calibrated the estimate (ObserveSize:
// clients that ask for no usage in their streams), and only from a window that
// counted at least MinMeasuredPromptTokens tokens; the latest such window wins.
// Its bias: tokens of traffic that did not pass the router count too, so the
// ratio reads low and the estimates high. With BalancerConfig.Shared it is
// ignored: the other routers' traffic is in the tokens and not in the bytes, so
// the ratio reads low by their share (0.08 bytes per token, estimates 40x too
// high, for a router that had just joined in the two-router e2e test: its live
// working sets then read over the KV cache and WorkingSet's fit move fired);
// the estimate waits for the responses instead.
func (b *Balancer) ObserveSizeWindow(bodyBytes, promptTokens float64) {
	if promptTokens < MinMeasuredPromptTokens || bodyBytes <= 0 || b.shared != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.winBytes, b.winTokens = bodyBytes, promptTokens
}

// BytesPerToken returns the body bytes per prompt token the prompt estimates use
// and its source: the responses (ObserveSize) once SizeMinSeen of them reported
// their prompt size, else the latest /metrics window (ObserveSizeWindow), else
// the assumed BytesPerTokenEstimate.
func (b *Balancer) BytesPerToken() (float64, SizeSource) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tokPerByte, src := b.tokensPerByte()
	return 1 / tokPerByte, src
}

// tokensPerByte is BytesPerToken's ratio inverted (caller holds mu).
func (b *Balancer) tokensPerByte() (float64, SizeSource) {
	switch {
	case b.sizeMeasured():
		return b.sizeTokens / b.sizeBytes, SizeResponses
	case b.winTokens > 0:
		return b.winTokens / b.winBytes, SizeMetrics
	}
	return 1.0 / BytesPerTokenEstimate, SizeAssumed
}

// sizeMeasured reports whether ObserveSize has seen enough requests for its
// ratio to replace BytesPerTokenEstimate (caller holds mu).
func (b *Balancer) sizeMeasured() bool {
	return b.sizeSeen >= SizeMinSeen && b.sizeBytes > 0 && b.sizeTokens > 0
}

// estimateTokens is the prompt estimate for a body of n bytes (caller holds mu).
func (b *Balancer) estimateTokens(n int) int {
	tpb, src := b.tokensPerByte()
	if src == SizeAssumed {
		return EstimatePromptTokens(n)
	}
	return int(float64(n) * tpb)
}

// EstimateTokens is the prompt-token estimate the policies use for a request body
// of n bytes: n times the measured tokens per byte, or EstimatePromptTokens(n)
// before anything was measured (BytesPerToken says which).
func (b *Balancer) EstimateTokens(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.estimateTokens(n)
}

// ObserveEngine records scraped engine load for replica i (from /metrics, or read
// directly in virtual mode) at simulated instant at. The observation is used while
// now - at <= StaleAfter and ignored after that. An observation older than the
// one held is dropped.
func (b *Balancer) ObserveEngine(i int, running, waiting int, kvUsage float64, at time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return
	}
	r := &b.reps[i]
	if r.observed && at < r.observedAt {
		return
	}
	b.sync(b.now())
	r.observed, r.running, r.waiting, r.kv, r.observedAt = true, running, waiting, kvUsage, at
}

// ObserveCapacity records replica i's KV cache size in tokens (num_gpu_blocks x
// block_size from vllm:cache_config_info); tokens <= 0 means unknown.
func (b *Balancer) ObserveCapacity(i int, tokens int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return
	}
	b.reps[i].kvCapacity = max(0, tokens)
}

// setPolicy installs the named affinity-on policy (name valid; "" = default).
func (b *Balancer) setPolicy(name string) {
	if name == "" {
		name = DefaultAffinityPolicy
	}
	b.polName = name
	switch name {
	case PolicySticky:
		b.policy = b.sticky
	case PolicyShortestQueue:
		b.policy = b.sq
	case PolicySessionHash:
		b.policy = &SessionHash{NoKey: b.sq}
	case PolicyWorkingSet:
		b.policy = NewWorkingSet(b.margin, b.seed, b.sq)
	case PolicyColdMove:
		b.policy = NewColdMove(b.margin, b.seed, b.sq)
	}
}

// SetPolicy switches the affinity-on policy at run time (one of PolicyNames; ""
// means DefaultAffinityPolicy). Session homes are kept. Errors: unknown name.
func (b *Balancer) SetPolicy(name string) error {
	if !ValidPolicy(name) {
		return fmt.Errorf("setting policy: %q is unknown (have %s)", name, strings.Join(PolicyNames(), ", "))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setPolicy(name)
	return nil
}

// Policy returns the name of the policy used while affinity is on.
func (b *Balancer) Policy() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.polName
}

// SetHealthy marks replica i healthy or not. Sessions homed on an unhealthy replica
// are re-homed on their next request; a replica marked healthy again takes new
// sessions but gets none of the moved ones back.
func (b *Balancer) SetHealthy(i int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return
	}
	b.sync(b.now())
	b.reps[i].healthy = ok
}

// Healthy reports whether replica i is marked healthy.
func (b *Balancer) Healthy(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return i >= 0 && i < len(b.reps) && b.reps[i].healthy
}

// SetAffinity switches session affinity at run time. Sessions homed before stay in
// the table (subject to the TTL); use ResetSessions to forget them.
func (b *Balancer) SetAffinity(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.affinity = on
}

// Affinity reports whether session affinity is on.
func (b *Balancer) Affinity() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.affinity
}

// ObserveSlots records that replica i runs n fixed slots (llama.cpp GET /props
// total_slots) of slotTokens tokens of context each (default_generation_settings
// .n_ctx, the per-slot context: llama-server sets every slot's n_ctx to
// llama_n_ctx_seq, the -c context divided by -np, tools/server/server-context.cpp
// and src/llama-context.cpp). A slot holds one sequence, so admission counts a
// conversation on such a replica as one whole slot (ReplicaState.SlotTokens).
// Each call replaces the replica's figures (a restarted server with other -np
// or -c is read again). With BalancerConfig.LearnSlots the fewest slots any
// replica has now become max_num_seqs, so the auto threshold is
// SlotOverflowThreshold of the engine's own slots. n <= 0 clears the replica's
// slots.
func (b *Balancer) ObserveSlots(i, n int, slotTokens int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return
	}
	if n <= 0 {
		n, slotTokens = 0, 0
	}
	b.reps[i].slots, b.reps[i].slotTokens = n, max(0, slotTokens)
	if !b.learnSlots {
		return
	}
	fewest := 0
	for j := range b.reps {
		if s := b.reps[j].slots; s > 0 && (fewest == 0 || s < fewest) {
			fewest = s
		}
	}
	b.maxNumSeqs = b.configSeqs
	if fewest > 0 {
		b.maxNumSeqs = fewest
	}
}

// SetOverflowThreshold sets the overflow threshold (in-flight requests); 0 means
// auto (AutoOverflowThreshold of the configured max_num_seqs). Negative values are
// treated as 0.
func (b *Balancer) SetOverflowThreshold(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.threshold = max(0, n)
}

// OverflowThreshold returns the threshold in force and whether it is auto.
func (b *Balancer) OverflowThreshold() (n int, auto bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.overflowThreshold(), b.threshold == 0
}

// ResetSessions forgets every session's home (e.g. between benchmark variants).
func (b *Balancer) ResetSessions() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions.Reset()
	b.adm.reset()
}

// AddReplica appends a replica (healthy) and returns its index. Existing sessions
// keep their homes: the session table maps keys to replicas explicitly, so adding a
// replica moves no session (docs/router.md, failure case 8), unlike a hash ring.
func (b *Balancer) AddReplica(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sync(b.now())
	b.reps = append(b.reps, replica{name: name, healthy: true, kvCapacity: b.kvCap})
	b.view = append(b.view, ReplicaState{})
	b.sessions.grow(len(b.reps))
	return len(b.reps) - 1
}

// Len returns the number of replicas.
func (b *Balancer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.reps)
}

// Name returns replica i's name.
func (b *Balancer) Name(i int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return ""
	}
	return b.reps[i].name
}

// LiveWindow returns the session table's live window in force (fixed by
// Config.LiveWindow or adaptive; see DefaultLiveWindow): the span of Live and
// LiveTokens.
func (b *Balancer) LiveWindow() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions.LiveWindow()
}

// Sessions returns the number of sessions in the table.
func (b *Balancer) Sessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions.Len()
}

// ReplicaStatus is one replica's state as reported by Status.
type ReplicaStatus struct {
	Name     string `json:"name"`
	Healthy  bool   `json:"healthy"`
	InFlight int    `json:"in_flight"`
	// Scraped gauges as last observed (also when stale), and their age in
	// simulated seconds (-1 when never observed).
	Running     int               `json:"running"`
	Waiting     int               `json:"waiting"`
	KVUsage     float64           `json:"kv_usage"`
	ScrapeAgeS  float64           `json:"scrape_age_s"`
	ScrapeFresh bool              `json:"scrape_fresh"`
	Sessions    int               `json:"sessions_homed"`
	Active      int               `json:"sessions_active"`
	ServedBy    map[string]uint64 `json:"served_by_reason"`
	ServedTotal uint64            `json:"served_total"`
	// Prompt tokens of the finished requests whose usage reported a cache count
	// (ObserveCache), and how many of them the replica read from its prefix
	// cache: the per-request view of its hit rate, which unlike vLLM's counters
	// is never inflated by repeated scheduling attempts (docs/routing.md,
	// "Measurement check").
	UsagePromptTokens uint64 `json:"usage_prompt_tokens"`
	UsageCachedTokens uint64 `json:"usage_cached_tokens"`
	// KVCapacityTokens is the replica's KV cache in tokens as the policies see it
	// (ObserveCapacity); 0 unknown, which switches off the fit move and cold-move.
	KVCapacityTokens int64 `json:"kv_capacity_tokens"`
	// Live conversations homed on the replica (last request within the session
	// table's live window) and the sum of their context estimates in tokens:
	// the working set the policies compare with KVCapacityTokens
	// (ReplicaState.Live, LiveTokens).
	Live       int   `json:"live_conversations"`
	LiveTokens int64 `json:"live_tokens"`
	// Ejected: out of placement after consecutive failed requests
	// (ObserveOutcome) while its health check may pass; EjectedForS is how
	// long until a probe may return it (0 when due), EjectReason the failure
	// that ejected it, Ejections how many times it was ejected in all.
	Ejected     bool    `json:"ejected"`
	EjectedForS float64 `json:"ejected_for_s"`
	EjectReason string  `json:"eject_reason,omitempty"`
	Ejections   uint64  `json:"ejections"`
	// SharedInFlight is what the other routers sharing this one's state
	// (BalancerConfig.Shared) have in flight on the replica; InFlight is this
	// router's own count. Absent without shared state.
	SharedInFlight int `json:"shared_in_flight,omitempty"`
	// SharedLive and SharedLiveTokens are the largest live-conversation count
	// and live working set (tokens) any other router's session table holds for
	// the replica (RemoteLoad). The policies decide on the larger of these and
	// Live, LiveTokens (DecidedLive). Absent without shared state.
	SharedLive       int   `json:"shared_live_conversations,omitempty"`
	SharedLiveTokens int64 `json:"shared_live_tokens,omitempty"`
}

// DecidedLive returns the live conversations and live tokens the policies
// decide on for the replica: this router's, or with shared state the larger
// of this router's and the largest another router reports (Balancer.fillView).
func (s ReplicaStatus) DecidedLive() (int, int64) {
	return max(s.Live, s.SharedLive), max(s.LiveTokens, s.SharedLiveTokens)
}

// Status returns every replica's state, in replica order.
func (b *Balancer) Status() []ReplicaStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sessions.expire(now)
	out := make([]ReplicaStatus, len(b.reps))
	for i := range b.reps {
		r := &b.reps[i]
		s := ReplicaStatus{
			Name: r.name, Healthy: r.healthy, InFlight: r.inflight,
			Running: r.running, Waiting: r.waiting, KVUsage: r.kv, ScrapeAgeS: -1,
			Sessions: b.sessions.Homed(i), Active: b.sessions.Active(i),
			ServedBy: make(map[string]uint64, numReasons),
		}
		if r.observed {
			s.ScrapeAgeS = (now - r.observedAt).Seconds()
			s.ScrapeFresh = now-r.observedAt <= b.staleAfter
		}
		for _, reason := range Reasons {
			s.ServedBy[reason.String()] = r.served[reason]
			s.ServedTotal += r.served[reason]
		}
		s.UsagePromptTokens, s.UsageCachedTokens = r.usagePrompt, r.usageCached
		s.KVCapacityTokens = r.kvCapacity
		s.Live, s.LiveTokens = b.sessions.Live(i), b.sessions.LiveTokens(i)
		s.Ejected, s.EjectReason, s.Ejections = r.out.ejected, r.out.reason, r.out.total
		if r.out.ejected && r.out.until > now {
			s.EjectedForS = (r.out.until - now).Seconds()
		}
		if b.shared != nil {
			rl := b.shared.Remote(i)
			s.SharedInFlight, s.SharedLive, s.SharedLiveTokens = rl.InFlight, rl.Live, rl.LiveTokens
		}
		out[i] = s
	}
	return out
}
