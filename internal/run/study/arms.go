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
// (working-set placement on engines that never evict).
func StandardArms() []string {
	return []string{ArmShortestQueue, ArmSessionHash, ArmSticky, ArmWorkingSet, ArmUnlimitedCache}
}

// armTable lists every arm by name: the standard ones and the experiments of the
// reproduction, each changing one thing (docs/routing.md).
var armTable = map[string]func() Arm{
	ArmShortestQueue: func() Arm { return Arm{Name: ArmShortestQueue} },
	ArmSessionHash:   func() Arm { return Arm{Name: ArmSessionHash, Affinity: true, Policy: router.PolicySessionHash} },
	ArmSticky:        func() Arm { return Arm{Name: ArmSticky, Affinity: true, Policy: router.PolicySticky} },
	ArmWorkingSet:    func() Arm { return Arm{Name: ArmWorkingSet, Affinity: true, Policy: router.PolicyWorkingSet} },
	ArmUnlimitedCache: func() Arm {
		return Arm{Name: ArmUnlimitedCache, Affinity: true, Policy: router.PolicyWorkingSet, UnlimitedCache: true, Reference: true}
	},

	// Sticky with the overflow threshold at 4 instead of 8 (the reference
	// measurement says that did not change its 24-32 session rows:
	// docs/measurements.md, "The reference measurement").
	"sticky-t4": func() Arm {
		return Arm{Name: "sticky-t4", Affinity: true, Policy: router.PolicySticky, OverflowThreshold: 4}
	},
	// The old vLLM double counting of prefix-cache stats (measurement check).
	"sticky-count-per-attempt": func() Arm {
		return Arm{Name: "sticky-count-per-attempt", Affinity: true, Policy: router.PolicySticky, CountPerAttempt: true}
	},
	"shortest-queue-count-per-attempt": func() Arm {
		return Arm{Name: "shortest-queue-count-per-attempt", CountPerAttempt: true}
	},

	// Placement inputs, one rule each, with Sticky's overflow (WorkingSet with Keys,
	// no moves). "sticky-keys" is Sticky's own rule written as keys.
	"sticky-keys":       keysArm("sticky-keys", router.KeyInFlight, router.KeyScraped, router.KeyActive),
	"sticky-no-scrape":  keysArm("sticky-no-scrape", router.KeyInFlight, router.KeyActive),
	"sticky-live":       keysArm("sticky-live", router.KeyInFlight, router.KeyScraped, router.KeyLive),
	"sticky-fixed-tie":  fixedTieArm("sticky-fixed-tie", router.KeyInFlight, router.KeyScraped, router.KeyActive),
	"place-in-flight":   keysArm("place-in-flight", router.KeyInFlight),
	"place-scraped":     keysArm("place-scraped", router.KeyScraped),
	"place-active":      keysArm("place-active", router.KeyActive, router.KeyInFlight),
	"place-sessions":    keysArm("place-sessions", router.KeySessions, router.KeyInFlight),
	"place-live":        keysArm("place-live", router.KeyLive, router.KeyInFlight),
	"place-live-tokens": keysArm("place-live-tokens", router.KeyLiveTokens, router.KeyInFlight),
	"place-fits":        keysArm("place-fits", router.KeyFits, router.KeyInFlight, router.KeyLiveTokens),
	// Placement on an in-flight count that lags by up to a second (read from a
	// scrape, or bumped only when the upstream answers): racing placements.
	"place-lagged-in-flight": laggedArm("place-lagged-in-flight", time.Second),

	// WorkingSet without its moves (placement keys only).
	"working-set-no-move": keysArm("working-set-no-move", router.DefaultWorkingSetKeys...),
	"working-set-t4": func() Arm {
		return Arm{Name: "working-set-t4", Affinity: true, Policy: router.PolicyWorkingSet, OverflowThreshold: 4}
	},

	// Overload experiments (experiments.go), measured and not adopted.
	"spill-1.5":        spillArm("spill-1.5", 1.5, false, false),
	"spill-2":          spillArm("spill-2", 2, false, false),
	"spill-u-1.25":     spillArm("spill-u-1.25", 1.25, true, false),
	"spill-u-1.5":      spillArm("spill-u-1.5", 1.5, true, false),
	"spill-u-1.5-move": spillArm("spill-u-1.5-move", 1.5, true, true),
	"lru-model-1":      lruModelArm("lru-model-1", 1),
	"lru-model-1.25":   lruModelArm("lru-model-1.25", 1.25),
	"lru-model-1.5":    lruModelArm("lru-model-1.5", 1.5),
	"cold-move-1":      coldMoveArm("cold-move-1", 1.5, 1, false, false),
	"cold-move-2-over": coldMoveArm("cold-move-2-over", 1.5, 2, true, false),
	"cold-move-1-once": coldMoveArm("cold-move-1-once", 1.5, 1, false, true),
	// Moving only into a replica already over its cache: the router's ColdMove
	// (router/coldmove.go), the same rule as the arm "cold-move" below.
	"cold-move-1-into-over": func() Arm { return Arm{Name: "cold-move-1-into-over", Affinity: true, Policy: router.PolicyColdMove} },
	// The router's ColdMove policy (the arm above, in router/coldmove.go).
	"cold-move": func() Arm { return Arm{Name: "cold-move", Affinity: true, Policy: router.PolicyColdMove} },
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

// keysArm is a router.WorkingSet placing by the given keys, with Sticky's one-off
// overflow and no fit moves: one placement input changed at a time.
func keysArm(name string, keys ...router.LoadKey) func() Arm {
	keys = slices.Clone(keys)
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &router.WorkingSet{Margin: env.Margin, Keys: keys,
					Rand: rand.New(rand.NewPCG(env.Seed, 0x3053_e7)), NoKey: router.NewShortestQueue(0)}
			}}
	}
}

// fixedTieArm is keysArm with ties always going to the last tied replica in
// index order instead of at random.
func fixedTieArm(name string, keys ...router.LoadKey) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &router.WorkingSet{Margin: env.Margin, Keys: keys,
					Rand: rand.New(oneSource{}), NoKey: router.NewShortestQueue(0)}
			}}
	}
}

// oneSource always yields 1, so rand.IntN(n) is always 0 (with 0 the
// rejection sampling of IntN would never end).
type oneSource struct{}

func (oneSource) Uint64() uint64 { return 1 }

func laggedArm(name string, every time.Duration) func() Arm {
	return func() Arm {
		return Arm{Name: name, Affinity: true,
			NewPolicy: func(env PolicyEnv) router.Policy {
				return &laggedInFlight{every: every, inner: &router.WorkingSet{Margin: env.Margin,
					Keys: []router.LoadKey{router.KeyInFlight}, Rand: rand.New(rand.NewPCG(env.Seed, 7)), NoKey: router.NewShortestQueue(0)}}
			}}
	}
}

// laggedInFlight shows its inner policy the in-flight counts as they were at the
// first decision after the last multiple of every (a scrape, or a count bumped
// only when the upstream answers), so placements between two refreshes do not
// see each other.
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
