package study

import (
	"time"

	"github.com/lmwarden/warden/router"
)

// Overload experiments: ways of giving up affinity for a turn whose prefix is
// probably gone already, so that it is balanced the way vLLM's own balancer does
// (spill, lruModel) or sent where the queue is shorter (coldMoveArm). All were
// measured and not adopted (docs/routing.md, "What did not work").

// spillArm: router.WorkingSet, except that a request whose home's live working
// set exceeds factor x its KV cache is placed by vLLM's shortest-queue rule for
// this turn (move: and re-homed there). unique counts the shared system prompt
// once per replica instead of once per conversation (knowledge from the
// scenario, PolicyEnv.SharedPrefixTokens).
func spillArm(name string, factor float64, unique, move bool) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				s := &spill{factor: factor, move: move,
					ws: router.NewWorkingSet(env.Margin, env.Seed, router.NewShortestQueue(0)),
					sq: router.NewShortestQueue(0)}
				if unique {
					s.shared = env.SharedPrefixTokens
				}
				return s
			}}
	}
}

type spill struct {
	factor float64
	move   bool
	shared int
	ws     *router.WorkingSet
	sq     *router.ShortestQueue
}

func (s *spill) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	s.sq.Sync(now, reps)
	h := req.Home
	if h >= 0 && h < len(reps) && reps[h].Healthy && reps[h].KVCapacityTokens > 0 {
		ws := reps[h].LiveTokens - int64(max(0, reps[h].Live-1)*s.shared)
		if float64(ws) > s.factor*float64(reps[h].KVCapacityTokens) {
			d, err := s.sq.Pick(now, req, reps)
			switch {
			case err != nil:
			case d.Replica == h:
				d.Reason = router.ReasonSticky
			case s.move:
				d.Reason = router.ReasonMoved
			default:
				d.Reason = router.ReasonOverflow
			}
			return d, err
		}
	}
	return s.ws.Pick(now, req, reps)
}

// lruModelArm: router.WorkingSet plus a router-side LRU model of every replica's
// prefix cache at conversation granularity. A conversation whose predicted stack
// distance on its home (the contexts of the conversations sent there since its
// own last request, plus its own) exceeds fit x the KV cache is taken as evicted:
// its turn is placed by vLLM's shortest-queue score and the conversation re-homed.
func lruModelArm(name string, fit float64) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &lruModel{fit: fit, ws: router.NewWorkingSet(env.Margin, env.Seed, router.NewShortestQueue(0)), sq: router.NewShortestQueue(0)}
			}}
	}
}

type lruModel struct {
	fit float64
	// margin > 0 makes it a cold-move arm (coldMoveArm): a cold conversation
	// moves only to a replica with at least margin fewer requests in flight than
	// its home, else stays; overCap further requires the home's live working set
	// to exceed its KV cache.
	margin  int
	overCap bool
	once    bool                // cold-move: each conversation moves at most once
	moved   map[uint64]struct{} // once: conversations that moved
	ws      *router.WorkingSet
	sq      *router.ShortestQueue
	model   *router.CacheModel // the router's model of each replica's cache (router/coldmove.go)
}

// coldMoveArm: lruModelArm, except that a cold conversation is not placed by
// vLLM's score but moves for good to the least-loaded replica (WorkingSet's
// keys) only when that one has at least margin fewer requests in flight than
// the home (and, with overCap, the home's live working set exceeds its KV
// cache); otherwise WorkingSet decides as usual. A cold turn must recompute its
// prefix wherever it goes, so sending it where the queue is shorter costs its
// home nothing; measured in docs/routing.md ("Moving conversations the cache
// has lost").
func coldMoveArm(name string, fit float64, margin int, overCap, once bool) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &lruModel{fit: fit, margin: margin, overCap: overCap, once: once, moved: map[uint64]struct{}{},
					ws: router.NewWorkingSet(env.Margin, env.Seed, router.NewShortestQueue(0)),
					sq: router.NewShortestQueue(0)}
			}}
	}
}

func (c *lruModel) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	c.sq.Sync(now, reps)
	if c.model == nil {
		c.model = router.NewCacheModel()
	}
	k := c.model.Hash(req.Key)
	h := req.Home
	cold := false
	if req.Key != "" && h >= 0 && h < len(reps) && reps[h].Healthy && reps[h].KVCapacityTokens > 0 {
		cold = c.model.Evicted(h, k, c.fit*float64(reps[h].KVCapacityTokens))
	}
	var (
		d   router.Decision
		err error
	)
	if cold && c.margin > 0 {
		_, movedBefore := c.moved[k]
		if (c.overCap && reps[h].LiveTokens <= reps[h].KVCapacityTokens) || (c.once && movedBefore) {
			cold = false
		} else if m := c.ws.LeastLoaded(reps, h, req.PromptTokens); m >= 0 && reps[m].InFlight+c.margin <= reps[h].InFlight {
			if c.once {
				c.moved[k] = struct{}{}
			}
			c.model.Touch(m, k, req.PromptTokens, reps[m].KVCapacityTokens)
			return router.Decision{Replica: m, Reason: router.ReasonMoved}, nil
		} else {
			cold = false
		}
	}
	if cold {
		d, err = c.sq.Pick(now, req, reps)
		if err == nil {
			d.Reason = router.ReasonMoved
			if d.Replica == h {
				d.Reason = router.ReasonSticky
			}
		}
	} else {
		d, err = c.ws.Pick(now, req, reps)
	}
	if err == nil && req.Key != "" {
		c.model.Touch(d.Replica, k, req.PromptTokens, reps[d.Replica].KVCapacityTokens)
	}
	return d, err
}
