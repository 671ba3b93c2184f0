package study

import (
	"hash/fnv"
	"time"

	"github.com/lmwarden/warden/router"
)

// cacheFitExp is an experiment: WorkingSet plus a router-side LRU model of every
// replica's prefix cache at conversation granularity. A conversation whose
// predicted stack distance on its home (the contexts of the conversations sent
// there since its own last request, plus its own) exceeds fit x the KV cache is
// taken as evicted: its turn is placed by vLLM's shortest-queue score and the
// conversation re-homed there.
type cacheFitExp struct {
	fit  float64
	ws   *router.WorkingSet
	sq   *router.ShortestQueue
	lru  [][]lruEnt // per replica, most recent first
	seen map[uint64]bool
}

type lruEnt struct {
	key    uint64
	tokens int
}

func cacheFitArm(name string, fit float64) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(seed uint64, thr, margin int) router.Policy {
				return &cacheFitExp{fit: fit, ws: router.NewWorkingSet(thr, margin, seed, router.NewShortestQueue(0)), sq: router.NewShortestQueue(0)}
			}}
	}
}

func keyHash(k string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k))
	return h.Sum64()
}

// dist returns the predicted LRU stack distance of key on replica i in tokens
// (its own context included), or -1 when the replica never saw it.
func (c *cacheFitExp) dist(i int, key uint64) int {
	sum := 0
	for _, e := range c.lru[i] {
		sum += e.tokens
		if e.key == key {
			return sum
		}
	}
	return -1
}

func (c *cacheFitExp) touch(i int, key uint64, tokens int, capTokens int64) {
	l := c.lru[i]
	for j, e := range l {
		if e.key == key {
			copy(l[1:j+1], l[:j])
			l[0] = lruEnt{key, tokens}
			c.trim(i, capTokens)
			return
		}
	}
	l = append(l, lruEnt{})
	copy(l[1:], l)
	l[0] = lruEnt{key, tokens}
	c.lru[i] = l
	c.trim(i, capTokens)
}

func (c *cacheFitExp) trim(i int, capTokens int64) {
	if capTokens <= 0 {
		return
	}
	sum := 0
	for j, e := range c.lru[i] {
		sum += e.tokens
		if float64(sum) > 4*float64(capTokens) {
			c.lru[i] = c.lru[i][:j+1]
			return
		}
	}
}

func (c *cacheFitExp) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	c.sq.Sync(now, reps)
	for len(c.lru) < len(reps) {
		c.lru = append(c.lru, nil)
	}
	var d router.Decision
	var err error
	k := keyHash(req.Key)
	h := req.Home
	cold := false
	if req.Key != "" && h >= 0 && h < len(reps) && reps[h].Healthy && reps[h].KVCapacityTokens > 0 {
		dd := c.dist(h, k)
		cold = dd < 0 || float64(dd) > c.fit*float64(reps[h].KVCapacityTokens)
	}
	if cold {
		d, err = c.sq.Pick(now, req, reps)
		if err == nil {
			if d.Replica == h {
				d.Reason = router.ReasonSticky
			} else {
				d.Reason = router.ReasonMoved
			}
		}
	} else {
		d, err = c.ws.Pick(now, req, reps)
	}
	if err == nil && req.Key != "" {
		c.touch(d.Replica, k, req.PromptTokens, reps[d.Replica].KVCapacityTokens)
	}
	return d, err
}
