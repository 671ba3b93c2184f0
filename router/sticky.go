package router

import (
	"math/rand/v2"
	"time"
)

// Sticky is the session-affinity policy (the reference router's rule,
// docs/measurements.md "The reference measurement"):
//
//   - No session key: shortest-queue placement by NoKey (ReasonNoKey).
//   - Home known and healthy, home in-flight <= Request.Threshold: the home (ReasonSticky).
//     Nothing else is weighed while the home is under the threshold, so load scorers
//     cannot outvote affinity at low load (docs/router.md, failure case 4).
//   - Home known and healthy but over the threshold (in-flight > Request.Threshold): the
//     least-loaded other replica if it has at least Margin fewer requests in flight
//     than the home (ReasonOverflow), else the home (ReasonSticky). The home does
//     not change on overflow: the conversation's prefix cache lives there, so the
//     next turn goes back as soon as the home has room; moving the home for good
//     would throw that cache away because of a momentary burst. While the
//     replica the session's previous overflow went to (Request.Overflow) is
//     healthy and has at least Margin fewer requests in flight than the home,
//     the overflow goes there again, so the turns that leave a busy home find
//     the prefix they left there last time (ties among equally loaded
//     replicas were drawn anew every turn before: r0 r3 r3 r0 ...).
//   - Home unhealthy (or no longer a replica): the least-loaded replica becomes the
//     new home (ReasonRehome).
//   - Unknown key (new or expired session): the least-loaded replica becomes the
//     home (ReasonPlaced).
//
// "Least-loaded" compares healthy replicas by, in order:
//
//  1. InFlight, the router's own exact count (fewer wins);
//  2. Waiting + KVUsage from scrapes (smaller wins): used only when every healthy
//     candidate has a fresh scrape, so a missing or stale scrape never makes a
//     replica look empty or full; waiting dominates, KV fill breaks ties within it;
//  3. Active, the sessions homed there that were active within the table's window
//     (fewer wins);
//
// and breaks remaining ties uniformly at random (Rand). Placement never looks at
// which replica holds the most cache (docs/router.md, failure case 1).
type Sticky struct {
	Margin int            // overflow margin, in-flight requests; see DefaultOverflowMargin
	Rand   *rand.Rand     // tie-break randomness; required
	NoKey  *ShortestQueue // placement of keyless requests; required
}

// Pick applies the rules above. It returns ErrNoReplica when no replica is healthy.
func (s *Sticky) Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	if req.Key == "" {
		d, err := s.NoKey.Pick(now, req, reps)
		d.Reason = ReasonNoKey
		return d, err
	}
	h := req.Home
	if h >= 0 && h < len(reps) && reps[h].Healthy {
		if reps[h].InFlight <= req.Threshold {
			return Decision{Replica: h, Reason: ReasonSticky}, nil
		}
		if o := req.Overflow; req.HasOverflow && o >= 0 && o != h && o < len(reps) && reps[o].Healthy && reps[o].InFlight+s.Margin <= reps[h].InFlight {
			// Where the last overflow went still has room: keep the overflow
			// there rather than drawing among equally loaded replicas anew.
			return Decision{Replica: o, Reason: ReasonOverflow}, nil
		}
		if m := s.LeastLoaded(reps, h); m >= 0 && reps[m].InFlight+s.Margin <= reps[h].InFlight {
			return Decision{Replica: m, Reason: ReasonOverflow}, nil
		}
		return Decision{Replica: h, Reason: ReasonSticky}, nil
	}
	m := s.LeastLoaded(reps, -1)
	if m < 0 {
		return Decision{}, ErrNoReplica
	}
	if h >= 0 {
		return Decision{Replica: m, Reason: ReasonRehome}, nil
	}
	return Decision{Replica: m, Reason: ReasonPlaced}, nil
}

// LeastLoaded returns the least-loaded healthy replica other than exclude (see the
// type's doc), or -1 when there is none.
func (s *Sticky) LeastLoaded(reps []ReplicaState, exclude int) int {
	return leastBy(reps, exclude, 0, stickyKeys, s.Rand)
}

// stickyKeys is Sticky's placement tuple: router in-flight, then scraped waiting +
// KV usage (only when every candidate's scrape is fresh), then active sessions.
var stickyKeys = []LoadKey{KeyInFlight, KeyScraped, KeyActive}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
