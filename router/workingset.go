package router

import (
	"math/rand/v2"
	"time"

	"github.com/lmwarden/warden/internal/vllmdp"
)

// LoadKey is one criterion a placement compares replicas by (smaller wins). A
// placement rule is an ordered list of keys compared lexicographically, with
// remaining ties broken uniformly at random, so a decision can be explained key by
// key.
type LoadKey uint8

const (
	// KeyInFlight: the router's own in-flight count, changed atomically with each
	// decision, so placements at the same instant see each other.
	KeyInFlight LoadKey = iota
	// KeyLiveTokens: the live working set, the summed context estimates of the
	// conversations homed on the replica that were active within the live window.
	KeyLiveTokens
	// KeyLive: the number of those live conversations.
	KeyLive
	// KeyActive: sessions homed on the replica active within the table's fixed
	// 5-minute window (Sticky's third key), which still counts conversations that
	// ended minutes ago.
	KeyActive
	// KeyScraped: waiting + KV usage from the last /metrics scrape, only when every
	// candidate's scrape is fresh (Sticky's second key). It lags by up to a scrape
	// interval and counts idle cached blocks as free.
	KeyScraped
	// KeyFits: 0 when the replica's live working set plus the new conversation's
	// prompt fits its KV cache (ReplicaState.KVCapacityTokens), 1 when not; 0 for
	// every replica when the capacity is unknown.
	KeyFits
	// KeySessions: sessions homed on the replica within the session TTL.
	KeySessions
)

// String names the key (study output, docs).
func (k LoadKey) String() string {
	switch k {
	case KeyInFlight:
		return "in-flight"
	case KeyLiveTokens:
		return "live-tokens"
	case KeyLive:
		return "live"
	case KeyActive:
		return "active"
	case KeyScraped:
		return "scraped"
	case KeyFits:
		return "fits"
	case KeySessions:
		return "sessions"
	}
	return "unknown"
}

// DefaultWorkingSetKeys is WorkingSet's placement rule: fewest requests in flight
// (exact, the router's own count), then the smallest live working set in tokens,
// then the fewest live conversations, and last the scraped queue (the only sign
// of load the router did not send itself, e.g. other clients of the same server).
var DefaultWorkingSetKeys = []LoadKey{KeyInFlight, KeyLiveTokens, KeyLive, KeyScraped}

// WorkingSet is the session-affinity policy that places by what a replica's prefix
// cache must hold. It differs from Sticky in three ways, each measured in
// docs/routing.md:
//
//   - Placement (a new conversation, or a re-home off an unhealthy replica): the
//     least-loaded healthy replica by Keys (default DefaultWorkingSetKeys: the
//     router's exact in-flight count, then the live working set in tokens, then
//     live conversations), ties at random. Sticky's tie-breaks instead read
//     scraped gauges (stale, and blind to idle cached blocks) and a 5-minute
//     "active" count that keeps ended conversations for minutes.
//   - Overflow: while the home is healthy and its in-flight count is at most
//     Request.Threshold, the request stays home (ReasonSticky), whatever else is less
//     loaded (docs/router.md, failure case 4). Above it, the request leaves only for a
//     replica with at least Margin fewer requests in flight; with Move (the
//     default of NewWorkingSet) the conversation then moves for good
//     (ReasonMoved), so its next turn reads the cache it just built there instead
//     of bouncing back to a home whose copy is going stale; without Move it is
//     Sticky's one-off overflow (ReasonOverflow).
//   - No session key: shortest-queue placement by NoKey (ReasonNoKey).
//
// The zero value is not usable; use NewWorkingSet or fill every field.
type WorkingSet struct {
	Margin int  // least in-flight difference for an overflow to move
	Move   bool // an overflow re-homes the conversation (ReasonMoved)
	// FitMove moves a conversation whose home holds more live context than its KV
	// cache to a replica with room for it (see fitTarget; on in NewWorkingSet).
	FitMove bool
	Keys    []LoadKey  // placement rule; nil means DefaultWorkingSetKeys
	Rand    *rand.Rand // tie-break randomness; required
	NoKey   *ShortestQueue

	scratch []ReplicaState
}

// NewWorkingSet returns the policy with the given margin, Move on,
// DefaultWorkingSetKeys, and tie-break randomness seeded by seed.
func NewWorkingSet(margin int, seed uint64, noKey *ShortestQueue) *WorkingSet {
	return &WorkingSet{
		Margin: margin, Move: true, FitMove: true,
		Rand:  rand.New(rand.NewPCG(seed, 0x3053_e7)),
		NoKey: noKey,
	}
}

// Pick applies the rules above. It returns ErrNoReplica when no replica is healthy.
func (w *WorkingSet) Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	if req.Key == "" {
		d, err := w.NoKey.Pick(now, req, reps)
		d.Reason = ReasonNoKey
		return d, err
	}
	h := req.Home
	if h >= 0 && h < len(reps) && reps[h].Healthy {
		if reps[h].InFlight <= req.Threshold {
			if w.FitMove && !req.Side {
				if m := w.fitTarget(reps, h, req.PromptTokens); m >= 0 {
					return Decision{Replica: m, Reason: ReasonMoved}, nil
				}
			}
			return Decision{Replica: h, Reason: ReasonSticky}, nil
		}
		if m := w.LeastLoaded(reps, h, req.PromptTokens); m >= 0 && reps[m].InFlight+w.Margin <= reps[h].InFlight {
			if w.Move && !req.Side {
				return Decision{Replica: m, Reason: ReasonMoved}, nil
			}
			return Decision{Replica: m, Reason: ReasonOverflow}, nil
		}
		return Decision{Replica: h, Reason: ReasonSticky}, nil
	}
	m := w.LeastLoaded(reps, -1, req.PromptTokens)
	if m < 0 {
		return Decision{}, ErrNoReplica
	}
	if h >= 0 {
		return Decision{Replica: m, Reason: ReasonRehome}, nil
	}
	return Decision{Replica: m, Reason: ReasonPlaced}, nil
}

// fitTarget returns where a conversation of prompt tokens should move because its
// home h holds more live context than its KV cache while another replica has room
// for it, or -1 to stay. The home must be over its cache (LiveTokens >
// KVCapacityTokens: its conversations evict each other, so this one's prefix is
// being lost anyway). A target must be healthy, have room for the conversation
// (LiveTokens + prompt <= KVCapacityTokens), no more requests in flight than the
// home, and either be empty (no live conversation) or the home must be over its
// cache by more than this conversation (even without it the others would not
// fit). That margin keeps the estimate's noise (a shared system prompt counted
// once per conversation, a conversation that just ended still counted live) from
// trading conversations between two replicas that are both about full. Among
// targets the least loaded by Keys wins. After the move the target still fits, so
// the conversation does not move again unless its new home overfills later: no
// back and forth.
func (w *WorkingSet) fitTarget(reps []ReplicaState, h, prompt int) int {
	home := &reps[h]
	if prompt <= 0 || home.KVCapacityTokens <= 0 || home.LiveTokens <= home.KVCapacityTokens {
		return -1
	}
	wellOver := home.LiveTokens > home.KVCapacityTokens+int64(prompt)
	w.scratch = append(w.scratch[:0], reps...)
	any := false
	for i := range w.scratch {
		r := &w.scratch[i]
		fits := r.KVCapacityTokens > 0 && r.LiveTokens+int64(prompt) <= r.KVCapacityTokens
		if i == h || !r.Healthy || !fits || r.InFlight > home.InFlight || !(wellOver || r.Live == 0) {
			r.Healthy = false
			continue
		}
		any = true
	}
	if !any {
		return -1
	}
	return w.LeastLoaded(w.scratch, h, prompt)
}

// VLLMScore is the load score vLLM's DP balancer gives a replica
// (vllmdp.Rank.Score; see ShortestQueue) on the state a policy sees: InFlight,
// Waiting, Running and KVUsage, the gauges zero unless the scrape is fresh.
// Smaller is less loaded; the unit is requests.
func VLLMScore(r *ReplicaState) float64 {
	return vllmdp.Rank{InFlight: r.InFlight, Waiting: r.Waiting, Running: r.Running, KVUsage: r.KVUsage}.Score()
}

// LeastLoaded returns the healthy replica other than exclude that is smallest by
// Keys (ties at random), or -1 when there is none. prompt is the new request's
// prompt size in tokens (for KeyFits).
func (w *WorkingSet) LeastLoaded(reps []ReplicaState, exclude, prompt int) int {
	keys := w.Keys
	if keys == nil {
		keys = DefaultWorkingSetKeys
	}
	return leastBy(reps, exclude, prompt, keys, w.Rand)
}

// leastBy returns the healthy replica other than exclude that is smallest by keys
// compared in order, ties broken uniformly at random by reservoir sampling, or -1.
func leastBy(reps []ReplicaState, exclude, prompt int, keys []LoadKey, rng *rand.Rand) int {
	useScrape := true
	for i := range reps {
		if i != exclude && reps[i].Healthy && !reps[i].Fresh {
			useScrape = false
			break
		}
	}
	best, ties := -1, 0
	for i := range reps {
		if i == exclude || !reps[i].Healthy {
			continue
		}
		if best < 0 {
			best, ties = i, 1
			continue
		}
		c := 0
		for _, k := range keys {
			if c = cmpKey(k, &reps[i], &reps[best], prompt, useScrape); c != 0 {
				break
			}
		}
		switch {
		case c < 0:
			best, ties = i, 1
		case c == 0:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// cmpKey compares two replicas by one key: -1 when a is less loaded.
func cmpKey(k LoadKey, a, b *ReplicaState, prompt int, useScrape bool) int {
	switch k {
	case KeyInFlight:
		return cmpInt(a.InFlight, b.InFlight)
	case KeyLiveTokens:
		return cmpInt64(a.LiveTokens, b.LiveTokens)
	case KeyLive:
		return cmpInt(a.Live, b.Live)
	case KeyActive:
		return cmpInt(a.Active, b.Active)
	case KeySessions:
		return cmpInt(a.Sessions, b.Sessions)
	case KeyScraped:
		if !useScrape {
			return 0
		}
		la, lb := float64(a.Waiting)+a.KVUsage, float64(b.Waiting)+b.KVUsage
		switch {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	case KeyFits:
		return cmpInt(overCache(a, prompt), overCache(b, prompt))
	}
	return 0
}

// overCache is 1 when r's live working set plus prompt exceeds its known KV cache.
func overCache(r *ReplicaState, prompt int) int {
	if r.KVCapacityTokens <= 0 || r.LiveTokens+int64(prompt) <= r.KVCapacityTokens {
		return 0
	}
	return 1
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
