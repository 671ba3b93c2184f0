package router

import (
	"sync"
	"time"
)

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
	cur         decision // the decision acquireLocked is making (decide.go)

	// Body size calibration (ObserveSize): decayed sums of body bytes and prompt
	// tokens of finished requests, and how many were seen.
	sizeBytes, sizeTokens float64
	sizeSeen              int
	// Fallback (ObserveSizeWindow): body bytes and prompt tokens of the latest
	// /metrics window that counted enough tokens; 0 none yet.
	winBytes, winTokens float64
}

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

	drain DrainMode // SetDrain; without shared state the one in force (drain.go)
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

// ReleaseSession ends one in-flight request on replica i, as Release, for the
// session sessionKey ("" none): with admission on, the conversation's last
// request ending starts its idle window (admission.go). Callers that know the
// request's session use it instead of Release.
func (b *Balancer) ReleaseSession(i int, sessionKey string) {
	b.ReleaseConv(i, ConvRef{Key: sessionKey})
}

// ReleaseConv ends one in-flight request on replica i, as ReleaseSession, of
// the conversation c (Facts.Conv of its request): a subagent's request ends in
// its own count of the session's tree (admission_tree.go).
func (b *Balancer) ReleaseConv(i int, c ConvRef) {
	sessionKey := c.Key
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
		h, parent, _ := b.admKeys(c)
		if parent == 0 || b.adm.convs[h] == nil {
			h = b.sessions.hash(sessionKey)
		}
		b.adm.released(now, h)
		if b.shared != nil {
			b.shared.Ended(SessionID(sessionKey))
		}
	}
}
