package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/vllmdp"
)

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
	// VLLMRelease, when set, makes the shortest-queue balancer follow an older
	// vLLM release's rule with one balancer per API-server process
	// (ShortestQueue.Release, vllmdp.Releases; docs/simulator.md section 11).
	// "" (default): current main's rule, one balancer. With
	// vllmdp.ReleaseV026Dense and no SnapshotInterval, snapshots come every
	// vllmdp.IdlePublishInterval.
	VLLMRelease string
	// APIServerProcesses is the number of API-server processes VLLMRelease
	// models (ShortestQueue.Processes); requests name theirs in Facts.Process.
	APIServerProcesses int
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
	// Drains are the replicas' drain modes at start, in Replicas order (nil or
	// shorter: the rest DrainNone); with Shared they are written to the store
	// (SetDrain).
	Drains []DrainMode
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
	if err := vllmdp.ValidRelease(cfg.VLLMRelease); err != nil {
		errs = append(errs, err)
	}
	if cfg.APIServerProcesses < 0 {
		errs = append(errs, fmt.Errorf("api-server processes: %d is negative", cfg.APIServerProcesses))
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
	if cfg.VLLMRelease != "" {
		if cfg.VLLMRelease == vllmdp.ReleaseV026Dense && cfg.SnapshotInterval == 0 {
			b.sq.Interval = vllmdp.IdlePublishInterval
		}
		b.sq.Release, b.sq.Processes = cfg.VLLMRelease, cfg.APIServerProcesses
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
	b.startDrains(cfg.Drains)
	if keyless := cfg.Keyless; keyless == KeylessPrefix || (keyless == "" && DefaultKeyless == KeylessPrefix) {
		piece := cfg.PrefixPieceTokens
		if piece <= 0 {
			piece = DefaultPrefixPieceTokens
		}
		b.prefix = NewPrefixIndex(len(b.reps), piece)
	}
	return b, nil
}
