package router

import (
	"hash/maphash"
	"time"
)

// Cold-move defaults (docs/routing.md, "Moving conversations the cache has lost
// to a shorter queue"; measured as the study arm cold-move-1-into-over).
const (
	// DefaultColdFit: a conversation counts as evicted from its home when the
	// contexts sent there since its own last request, plus its own, exceed this
	// many times the home's KV cache. Above 1 because the model counts a shared
	// system prompt once per conversation and ignores that vLLM frees a finished
	// request's blocks last-in first-out; 1 and 1.25 moved conversations whose
	// prefix was still cached (study arms lru-model-1, lru-model-1.25).
	DefaultColdFit = 1.5
	// DefaultColdMargin: a cold conversation moves only to a replica with at least
	// this many fewer requests in flight than its home.
	DefaultColdMargin = 1
	// maxColdEntries bounds the conversations the model keeps per replica.
	maxColdEntries = 4096
)

// CacheModel is a router-side model of each replica's prefix cache at
// conversation granularity: per replica, the conversations sent there, most
// recent first, each with the context size its latest request there was routed
// with (Request.PromptTokens; side requests are not recorded). The
// predicted LRU stack distance of a conversation on a replica is the sum of the
// prompts above it in that list plus its own; past fit x the replica's KV cache
// the conversation is taken as evicted (its next request there recomputes the
// prefix). A list keeps the entries up to and including the one that takes it past
// 4x the replica's cache in tokens (anything deeper is evicted in any reading of
// the model), and at most maxColdEntries entries; a
// conversation missing from a list counts as evicted only once the list has
// dropped entries (before that it was never seen there, e.g. the policy was
// switched on mid-conversation). Nothing is recorded for a replica whose KV
// capacity is unknown.
//
// Lookups scan the list (conversations per replica, typically tens: about 50 for
// 12,000-token prompts on a 150,000-token cache; BenchmarkAcquirePolicies
// measures a decision at 493 ns there vs 276 ns for WorkingSet, and 6.1 us at
// the 4,096-entry bound); not safe for concurrent use (the Balancer's lock
// guards it).
type CacheModel struct {
	seed maphash.Seed
	lru  [][]coldEntry
	// trimmed[i]: replica i's list has dropped entries, so a conversation missing
	// from it may have been pushed out; before that, missing means not seen.
	trimmed []bool
}

type coldEntry struct {
	key    uint64
	tokens int
}

// NewCacheModel returns an empty model.
func NewCacheModel() *CacheModel { return &CacheModel{seed: maphash.MakeSeed()} }

// Hash is the key the model files a session id under.
func (m *CacheModel) Hash(key string) uint64 { return maphash.String(m.seed, key) }

func (m *CacheModel) grow(n int) {
	for len(m.lru) < n {
		m.lru = append(m.lru, nil)
		m.trimmed = append(m.trimmed, false)
	}
}

// Evicted reports whether the model takes key as gone from replica i's cache:
// its stack distance exceeds limit tokens, or the list dropped it.
func (m *CacheModel) Evicted(i int, key uint64, limit float64) bool {
	d := m.Distance(i, key)
	if d < 0 {
		return i < len(m.trimmed) && m.trimmed[i]
	}
	return float64(d) > limit
}

// Distance returns key's predicted stack distance on replica i in tokens, or -1
// when the replica's list does not hold it.
func (m *CacheModel) Distance(i int, key uint64) int {
	if i >= len(m.lru) {
		return -1
	}
	sum := 0
	for _, e := range m.lru[i] {
		sum += e.tokens
		if e.key == key {
			return sum
		}
	}
	return -1
}

// Touch records a request of key with tokens of prompt sent to replica i, whose
// KV cache holds capTokens. With the capacity unknown (<= 0) nothing is recorded:
// the rule cannot act then, and an unbounded list would cost a scan per request.
func (m *CacheModel) Touch(i int, key uint64, tokens int, capTokens int64) {
	if capTokens <= 0 {
		return
	}
	m.grow(i + 1)
	l := m.lru[i]
	j := 0
	for j < len(l) && l[j].key != key {
		j++
	}
	if j == len(l) {
		l = append(l, coldEntry{})
	}
	copy(l[1:j+1], l[:j])
	l[0] = coldEntry{key, max(tokens, 0)}
	sum := int64(0)
	for k, e := range l {
		sum += int64(e.tokens)
		if k+1 >= maxColdEntries || sum > 4*capTokens {
			if k+1 < len(l) {
				m.trimmed[i] = true
			}
			l = l[:k+1]
			break
		}
	}
	m.lru[i] = l
}

// ColdMove is WorkingSet plus one rule: a conversation whose prefix the
// router's cache model says its home has evicted (stack distance above Fit x the
// home's KV cache) moves for good (ReasonMoved) to the least-loaded replica by
// WorkingSet's keys among those whose live working set already exceeds their KV
// cache, when that replica has at least ColdMargin fewer requests in flight than the
// home. Such a turn recomputes its prefix wherever it goes, so sending it where
// fewer requests wait costs the home nothing, and a replica whose conversations
// still fit its cache never receives one. Otherwise WorkingSet decides.
//
// Measured in docs/routing.md ("Moving conversations the cache has lost to a
// shorter queue"): on the reference workload with 3 s between turns it removes
// WorkingSet's tail losses at 16 and 24 sessions (20-minute stages, p95 15.6 ->
// 8.5 s and 25.8 -> 23.1 s); with turns back to back it never fires; on the
// bf16 fleet scenario's 16-session half it trades median for tail (84 samples
// over seeds and stage lengths: p50 +11 s, p95 -21 s, tokens/min -2 %). The model needs the replicas' KV capacity (ReplicaState
// KVCapacityTokens, from vllm:cache_config_info) and uses Request.PromptTokens,
// which the HTTP proxy estimates from body bytes with the ratio calibrated from
// responses (Balancer.ObserveSize); over HTTP (scenarios/reference-gap-16.yaml,
// seed 1) it then cut the 16-session p95 from 14.9 to 8.3 s, as in virtual time.
type ColdMove struct {
	*WorkingSet
	Fit        float64 // stack distance / KV cache above which a conversation is cold
	ColdMargin int     // least in-flight difference for a cold move (WorkingSet.Margin is the overflow's)

	model   *CacheModel
	scratch []ReplicaState
}

// NewColdMove returns the policy with DefaultColdFit and DefaultColdMargin over
// NewWorkingSet(margin, seed, noKey).
func NewColdMove(margin int, seed uint64, noKey *ShortestQueue) *ColdMove {
	return &ColdMove{WorkingSet: NewWorkingSet(margin, seed, noKey),
		Fit: DefaultColdFit, ColdMargin: DefaultColdMargin, model: NewCacheModel()}
}

// Pick applies the cold-move rule, then WorkingSet's, and records the request
// in the cache model. A request without a session key, one that reads nothing
// into the cache (Request.NoPrefill: count_tokens) and a side request
// (Request.Side) go to WorkingSet alone and are not recorded; so the model under-counts a replica's cache when
// keyless traffic shares it. The cold-move rule runs before WorkingSet's fit
// move, so a cold conversation whose home is over its cache goes to an
// over-cache replica with fewer requests in flight even when another replica
// has room (the order measured in docs/routing.md).
func (c *ColdMove) Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	if req.Key == "" || req.NoPrefill || req.Side {
		return c.WorkingSet.Pick(now, req, reps)
	}
	k := c.model.Hash(req.Key)
	d, ok := c.coldMove(k, req, reps)
	if !ok {
		var err error
		if d, err = c.WorkingSet.Pick(now, req, reps); err != nil {
			return d, err
		}
	}
	c.model.Touch(d.Replica, k, req.PromptTokens, reps[d.Replica].KVCapacityTokens)
	return d, nil
}

func (c *ColdMove) coldMove(k uint64, req Request, reps []ReplicaState) (Decision, bool) {
	h := req.Home
	if h < 0 || h >= len(reps) || !reps[h].Healthy || reps[h].KVCapacityTokens <= 0 {
		return Decision{}, false
	}
	if !c.model.Evicted(h, k, c.Fit*float64(reps[h].KVCapacityTokens)) {
		return Decision{}, false
	}
	c.scratch = append(c.scratch[:0], reps...)
	for i := range c.scratch {
		r := &c.scratch[i]
		if r.KVCapacityTokens <= 0 || r.LiveTokens <= r.KVCapacityTokens {
			r.Healthy = false
		}
	}
	m := c.LeastLoaded(c.scratch, h, req.PromptTokens)
	if m < 0 || reps[m].InFlight+c.ColdMargin > reps[h].InFlight {
		return Decision{}, false
	}
	return Decision{Replica: m, Reason: ReasonMoved}, true
}
