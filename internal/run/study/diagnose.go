package study

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/lmwarden/warden/router"
)

// Diagnosis of the 32-session gap (docs/routing.md, "What did not work"): which
// part of vLLM's balancer gives it more output tokens per minute than any sticky
// placement once the cache is thrashing. Each arm drops affinity entirely (every
// turn is placed as if its conversation were new) and changes one thing.

// homeless places every turn with inner as if the conversation had no home.
type homeless struct{ inner router.Policy }

func (h homeless) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	req.Home = -1
	return h.inner.Pick(now, req, reps)
}

// homelessArm: no affinity; each turn goes to the least-loaded replica by keys
// (exact router counts, ties at random).
func homelessArm(name string, keys ...router.LoadKey) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return homeless{&router.WorkingSet{Margin: env.Margin, Keys: keys,
					Rand: rand.New(rand.NewPCG(env.Seed, 0x3053_e7)), NoKey: router.NewShortestQueue(0)}}
			}}
	}
}

// exactSQArm: vLLM's scoring on an exact snapshot at every decision (no 100 ms
// staleness).
func exactSQArm(name string) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return homeless{router.NewShortestQueue(-1)}
			}}
	}
}

// randomArm: every turn to a uniformly random healthy replica.
type randomPick struct{ rng *rand.Rand }

func (r randomPick) Pick(_ time.Duration, _ router.Request, reps []router.ReplicaState) (router.Decision, error) {
	n := 0
	pick := -1
	for i := range reps {
		if reps[i].Healthy {
			n++
			if r.rng.IntN(n) == 0 {
				pick = i
			}
		}
	}
	if pick < 0 {
		return router.Decision{}, router.ErrNoReplica
	}
	return router.Decision{Replica: pick, Reason: router.ReasonPlaced}, nil
}

func randomArm(name string) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return randomPick{rand.New(rand.NewPCG(env.Seed, 99))}
			}}
	}
}

func init() {
	armTable["diag-homeless-in-flight"] = homelessArm("diag-homeless-in-flight", router.KeyInFlight)
	armTable["diag-homeless-scraped"] = homelessArm("diag-homeless-scraped", router.KeyInFlight, router.KeyScraped)
	armTable["diag-exact-sq"] = exactSQArm("diag-exact-sq")
	armTable["diag-random"] = randomArm("diag-random")
}

// vllmScore is vLLM's DP balancer score of a replica (router.VLLMScore).
func vllmScore(r *router.ReplicaState) float64 { return router.VLLMScore(r) }

// scoreOverflow: WorkingSet, except that a request whose home scores at least
// margin more than the best replica by vLLM's score goes to that replica (and,
// with move, is re-homed there).
type scoreOverflow struct {
	margin float64
	move   bool
	ws     *router.WorkingSet
}

func (s *scoreOverflow) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	h := req.Home
	if req.Key != "" && h >= 0 && h < len(reps) && reps[h].Healthy && reps[h].Fresh {
		best, bs := -1, 0.0
		for i := range reps {
			if !reps[i].Healthy || !reps[i].Fresh {
				continue
			}
			if sc := vllmScore(&reps[i]); best < 0 || sc < bs {
				best, bs = i, sc
			}
		}
		if best >= 0 && best != h && vllmScore(&reps[h])-bs >= s.margin {
			reason := router.ReasonOverflow
			if s.move {
				reason = router.ReasonMoved
			}
			return router.Decision{Replica: best, Reason: reason}, nil
		}
	}
	return s.ws.Pick(now, req, reps)
}

func scoreOverflowArm(name string, margin float64, move bool) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &scoreOverflow{margin: margin, move: move,
					ws: router.NewWorkingSet(env.Margin, env.Seed, router.NewShortestQueue(0))}
			}}
	}
}

func init() {
	for _, m := range []struct {
		n string
		v float64
	}{{"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}} {
		armTable["diag-score-over-"+m.n] = scoreOverflowArm("diag-score-over-"+m.n, m.v, false)
		armTable["diag-score-move-"+m.n] = scoreOverflowArm("diag-score-move-"+m.n, m.v, true)
	}
}

// admitArm: WorkingSet with router-side admission in front (admit): a new
// conversation is held at the router (router.ErrHold; the virtual world asks again
// every virtual.HoldRetry) for at most hold while no replica has room for its
// context but the fleet as a whole has.
func admitArm(name string, hold time.Duration) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &admit{hold: hold, ws: router.NewWorkingSet(env.Margin, env.Seed, router.NewShortestQueue(0))}
			}}
	}
}

type admit struct {
	hold time.Duration
	ws   *router.WorkingSet
}

func (a *admit) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	if req.Key != "" && req.Home < 0 && a.holds(req, reps) {
		return router.Decision{}, router.ErrHold
	}
	return a.ws.Pick(now, req, reps)
}

// holds reports whether a new conversation of req.PromptTokens waits: the hold is
// not used up, every healthy replica's KV capacity is known, no healthy replica
// has room for it (LiveTokens + prompt > KVCapacityTokens everywhere: placing it
// now makes one thrash) and the fleet as a whole has (summed LiveTokens + prompt
// <= summed capacity: the shortage is one of indivisibility, so a replica frees
// room when one of its conversations ends). When the fleet itself is over its
// cache no replica frees room in useful time and holding would only add a wait.
func (a *admit) holds(req router.Request, reps []router.ReplicaState) bool {
	if req.HeldFor >= a.hold || req.PromptTokens <= 0 {
		return false
	}
	p := int64(req.PromptTokens)
	var live, capTokens int64
	healthy := 0
	for i := range reps {
		r := &reps[i]
		if !r.Healthy {
			continue
		}
		if r.KVCapacityTokens <= 0 || r.LiveTokens+p <= r.KVCapacityTokens {
			return false
		}
		healthy++
		live += r.LiveTokens
		capTokens += r.KVCapacityTokens
	}
	return healthy > 0 && live+p <= capTokens
}

func init() {
	armTable["admit-30s"] = admitArm("admit-30s", 30*time.Second)
	armTable["admit-120s"] = admitArm("admit-120s", 2*time.Minute)
}

// bandScore: every turn (no affinity) to the replica with the lowest vLLM score
// among those with at most band more requests in flight than the least loaded
// (the router's exact counts), ties at random.
type bandScore struct {
	band int
	rng  *rand.Rand
}

func (b bandScore) Pick(_ time.Duration, _ router.Request, reps []router.ReplicaState) (router.Decision, error) {
	least := -1
	for i := range reps {
		if reps[i].Healthy && (least < 0 || reps[i].InFlight < least) {
			least = reps[i].InFlight
		}
	}
	if least < 0 {
		return router.Decision{}, router.ErrNoReplica
	}
	return router.Decision{Replica: leastScore(reps, least+b.band, b.rng), Reason: router.ReasonPlaced}, nil
}

// leastScore returns the healthy replica with at most maxInFlight requests in
// flight that has the lowest vLLM score, ties at random; -1 when there is none.
func leastScore(reps []router.ReplicaState, maxInFlight int, rng *rand.Rand) int {
	best, bs, ties := -1, 0.0, 0
	for i := range reps {
		r := &reps[i]
		if !r.Healthy || r.InFlight > maxInFlight {
			continue
		}
		sc := vllmScore(r)
		switch {
		case best < 0 || sc < bs:
			best, bs, ties = i, sc, 1
		case sc == bs:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

func bandArm(name string, band int) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return bandScore{band: band, rng: rand.New(rand.NewPCG(env.Seed, 5))}
			}}
	}
}

// lostRebalance: WorkingSet, except that a request whose conversation's context
// did not survive at its home (router.Request.CacheLost, fed back from the
// previous turn's usage by Balancer.ObserveCache) is placed like vLLM's balancer
// would, by vLLM's score over the healthy replicas (ties at random), and the
// conversation is re-homed where it goes: with its prefix gone there is nothing
// left to keep at the home. The conversation stays marked lost until a turn
// served at its (new) home reads its previous context from the cache.
type lostRebalance struct {
	rng *rand.Rand
	ws  *router.WorkingSet
}

func (l *lostRebalance) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	h := req.Home
	if req.Key == "" || !req.CacheLost || h < 0 || h >= len(reps) || !reps[h].Healthy {
		return l.ws.Pick(now, req, reps)
	}
	best := leastScore(reps, math.MaxInt, l.rng)
	if best == h {
		return router.Decision{Replica: h, Reason: router.ReasonSticky}, nil
	}
	return router.Decision{Replica: best, Reason: router.ReasonMoved}, nil
}

func lostRebalanceArm(name string) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &lostRebalance{rng: rand.New(rand.NewPCG(env.Seed, 11)),
					ws: router.NewWorkingSet(env.Margin, env.Seed, router.NewShortestQueue(0))}
			}}
	}
}

func init() {
	armTable["lost-rebalance"] = lostRebalanceArm("lost-rebalance")
	armTable["diag-band-0"] = bandArm("diag-band-0", 0)
	armTable["diag-band-1"] = bandArm("diag-band-1", 1)
	armTable["diag-band-2"] = bandArm("diag-band-2", 2)
}
