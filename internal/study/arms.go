package study

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/lmwarden/warden/router"
)

// Arm names of the comparison (StandardArms).
const (
	ArmShortestQueue  = "shortest-queue"
	ArmSessionHash    = "session-hash"
	ArmSticky         = "sticky"
	ArmWorkingSet     = "working-set"
	ArmUnlimitedCache = "unlimited-cache"
)

// StandardArms are the arms of the comparison in docs/routing.md: vLLM's balancer,
// the two reference placements, the new policy, and the unlimited-cache bound
// (sticky placement on engines that never evict).
func StandardArms() []string {
	return []string{ArmShortestQueue, ArmSessionHash, ArmSticky, ArmWorkingSet, ArmUnlimitedCache}
}

// armTable lists every arm by name: the standard ones and the experiments of the
// reproduction (variants of Sticky and WorkingSet that change one thing each).
var armTable = map[string]func() Arm{
	ArmShortestQueue: func() Arm { return Arm{Name: ArmShortestQueue} },
	ArmSessionHash:   func() Arm { return Arm{Name: ArmSessionHash, Affinity: true, Policy: router.PolicySessionHash} },
	ArmSticky:        func() Arm { return Arm{Name: ArmSticky, Affinity: true, Policy: router.PolicySticky} },
	ArmWorkingSet:    func() Arm { return Arm{Name: ArmWorkingSet, Affinity: true, Policy: router.PolicyWorkingSet} },
	ArmUnlimitedCache: func() Arm {
		return Arm{Name: ArmUnlimitedCache, Affinity: true, Policy: router.PolicySticky, UnlimitedCache: true, Reference: true}
	},
	// Reproduction: Sticky with one input changed.
	"sticky-t4": func() Arm {
		return Arm{Name: "sticky-t4", Affinity: true, Policy: router.PolicySticky, OverflowThreshold: 4}
	},
	"sticky-count-per-attempt": func() Arm {
		return Arm{Name: "sticky-count-per-attempt", Affinity: true, Policy: router.PolicySticky, CountPerAttempt: true}
	},
	"shortest-queue-count-per-attempt": func() Arm {
		return Arm{Name: "shortest-queue-count-per-attempt", CountPerAttempt: true}
	},
	// Sticky's rule written as keys (identical to PolicySticky) and with one key
	// changed.
	"sticky-keys":       keysArm("sticky-keys", false, 0, router.KeyInFlight, router.KeyScraped, router.KeyActive),
	"sticky-no-scrape":  keysArm("sticky-no-scrape", false, 0, router.KeyInFlight, router.KeyActive),
	"sticky-live":       keysArm("sticky-live", false, 0, router.KeyInFlight, router.KeyScraped, router.KeyLive),
	"sticky-fixed-tie":  fixedTieArm("sticky-fixed-tie", router.KeyInFlight, router.KeyScraped, router.KeyActive),
	"place-in-flight":   keysArm("place-in-flight", false, 0, router.KeyInFlight),
	"place-scraped":     keysArm("place-scraped", false, 0, router.KeyScraped),
	"place-active":      keysArm("place-active", false, 0, router.KeyActive, router.KeyInFlight),
	"place-sessions":    keysArm("place-sessions", false, 0, router.KeySessions, router.KeyInFlight),
	"place-live":        keysArm("place-live", false, 0, router.KeyLive, router.KeyInFlight),
	"place-live-tokens": keysArm("place-live-tokens", false, 0, router.KeyLiveTokens, router.KeyInFlight),
	"place-fits":        keysArm("place-fits", false, 0, router.KeyFits, router.KeyInFlight, router.KeyLiveTokens),
	// Placement on an in-flight count that lags (read from a 1 s scrape, or bumped
	// only when the upstream answers), as the brief's "racing placements" warn.
	"place-lagged-in-flight": laggedArm("place-lagged-in-flight", time.Second),
	// WorkingSet variants.
	"working-set-no-move": keysArm("working-set-no-move", false, 0, router.DefaultWorkingSetKeys...),
	"working-set-t4":      keysArm("working-set-t4", true, 4, router.DefaultWorkingSetKeys...),
	"spill-1.5":           spillArm("spill-1.5", 1.5),
	"spill-2":             spillArm("spill-2", 2),
	"spill-1":             spillArm("spill-1", 1),
	"spillu-1.25":         spillUArm("spillu-1.25", 1.25, false),
	"spillu-1.5":          spillUArm("spillu-1.5", 1.5, false),
	"spillu-1.25-move":    spillUArm("spillu-1.25-move", 1.25, true),
	"spillu-1.5-move":     spillUArm("spillu-1.5-move", 1.5, true),
	"cachefit-1":          cacheFitArm("cachefit-1", 1),
	"cachefit-1.25":       cacheFitArm("cachefit-1.25", 1.25),
	"cachefit-1.5":        cacheFitArm("cachefit-1.5", 1.5),
}

// ArmNames lists every known arm, sorted.
func ArmNames() []string {
	out := make([]string, 0, len(armTable))
	for k := range armTable {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// LookupArm returns the arm called name. Errors: unknown name.
func LookupArm(name string) (Arm, error) {
	f, ok := armTable[name]
	if !ok {
		return Arm{}, fmt.Errorf("looking up arm %q: unknown (have %s)", name, strings.Join(ArmNames(), ", "))
	}
	return f(), nil
}

// keysArm is a WorkingSet with the given placement keys, Move and threshold.
func keysArm(name string, move bool, threshold int, keys ...router.LoadKey) func() Arm {
	keys = slices.Clone(keys)
	return func() Arm {
		return Arm{Name: name, Affinity: true, OverflowThreshold: threshold,
			NewPolicy: func(seed uint64, thr, margin int) router.Policy {
				return &router.WorkingSet{Threshold: thr, Margin: margin, Move: move, Keys: keys,
					Rand: rand.New(rand.NewPCG(seed, 0x3053_e7)), NoKey: router.NewShortestQueue(0)}
			}}
	}
}

// fixedTieArm is keysArm with ties always going to the last tied replica in
// index order instead of at random.
func fixedTieArm(name string, keys ...router.LoadKey) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(seed uint64, thr, margin int) router.Policy {
				return &router.WorkingSet{Threshold: thr, Margin: margin, Keys: keys,
					Rand: rand.New(zeroSource{}), NoKey: router.NewShortestQueue(0)}
			}}
	}
}

// zeroSource always yields 0, so rand.IntN(n) is always 0.
type zeroSource struct{}

func (zeroSource) Uint64() uint64 { return 0 }

func laggedArm(name string, every time.Duration) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(seed uint64, thr, margin int) router.Policy {
				return &laggedInFlight{every: every, inner: &router.WorkingSet{Threshold: thr, Margin: margin,
					Keys: []router.LoadKey{router.KeyInFlight}, Rand: rand.New(rand.NewPCG(seed, 7)), NoKey: router.NewShortestQueue(0)}}
			}}
	}
}

// laggedInFlight shows its inner policy in-flight counts as they were at the last
// multiple of every (a scrape, or a count bumped only when the upstream answers),
// so placements between two refreshes do not see each other.
type laggedInFlight struct {
	every time.Duration
	inner router.Policy
	epoch int64
	snap  []int
	view  []router.ReplicaState
}

func (l *laggedInFlight) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	if e := int64(now / l.every); e != l.epoch || len(l.snap) != len(reps) {
		l.epoch = e
		l.snap = l.snap[:0]
		for _, r := range reps {
			l.snap = append(l.snap, r.InFlight)
		}
	}
	l.view = append(l.view[:0], reps...)
	for i := range l.view {
		l.view[i].InFlight = l.snap[i]
	}
	return l.inner.Pick(now, req, l.view)
}

// spillUArm is spillArm with the shared system prompt (shared tokens) counted
// once per replica instead of once per conversation; move re-homes a spilled turn.
func spillUArm(name string, factor float64, move bool) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true, sharedPrefix: true,
			NewPolicy: func(seed uint64, thr, margin int) router.Policy {
				return &spill{factor: factor, move: move, ws: router.NewWorkingSet(thr, margin, seed, router.NewShortestQueue(0)), sq: router.NewShortestQueue(0)}
			}}
	}
}

// spillArm: WorkingSet, except that a request whose home's live working set
// exceeds factor x its KV cache (its prefix is most likely evicted already) is
// placed by vLLM's shortest-queue rule for this turn only.
func spillArm(name string, factor float64) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(seed uint64, thr, margin int) router.Policy {
				return &spill{factor: factor, ws: router.NewWorkingSet(thr, margin, seed, router.NewShortestQueue(0)), sq: router.NewShortestQueue(0)}
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
	if h := req.Home; h >= 0 && h < len(reps) && reps[h].Healthy && reps[h].KVCapacityTokens > 0 &&
		float64(reps[h].LiveTokens-int64(max(0, reps[h].Live-1)*s.shared)) > s.factor*float64(reps[h].KVCapacityTokens) {
		d, err := s.sq.Pick(now, req, reps)
		if d.Replica != h {
			d.Reason = router.ReasonOverflow
			if s.move {
				d.Reason = router.ReasonMoved
			}
		} else {
			d.Reason = router.ReasonSticky
		}
		return d, err
	}
	return s.ws.Pick(now, req, reps)
}
