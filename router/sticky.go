package router

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Overflow defaults.
const (
	// DefaultMaxNumSeqs is the --max-num-seqs the router assumes a real server
	// runs when not told: vLLM's default for `vllm serve` on GPUs under 70 GiB
	// (vllm/engine/arg_utils.py; brief vllm.md "Serve defaults"). `warden route`
	// and `warden bench --replicas` default to it. It differs on purpose from
	// sim.DefaultMaxNumSeqs (32), the reference server the simulator models:
	// with the embedded simulator the router is told the engines' value.
	// Configure max_num_seqs per model to match the server.
	DefaultMaxNumSeqs = 256
	// DefaultOverflowDivisor gives the auto overflow threshold: a request leaves its
	// home when the home has more than max_num_seqs / 4 requests in flight
	// (brief workload.md, "The router's rule"; 8 at max_num_seqs 32).
	DefaultOverflowDivisor = 4
	// DefaultOverflowMargin: an overflowing request only moves to a replica with at
	// least this many fewer requests in flight than its home, so two loaded
	// replicas do not trade requests back and forth.
	DefaultOverflowMargin = 2
)

// AutoOverflowThreshold returns the auto threshold for maxNumSeqs sequences per
// replica: maxNumSeqs / DefaultOverflowDivisor, at least 1.
func AutoOverflowThreshold(maxNumSeqs int) int {
	if maxNumSeqs <= 0 {
		maxNumSeqs = DefaultMaxNumSeqs
	}
	return max(1, maxNumSeqs/DefaultOverflowDivisor)
}

// SlotOverflowThreshold is the auto threshold for a slot-based engine
// (llama.cpp: -np slots, each running one sequence; beyond them the server
// defers a request until a slot frees): slots - 1, at least 1. A request stays
// home while one of the home's slots is free for it (in-flight <= slots - 1)
// and overflows only when it would wait for a slot. vLLM's max_num_seqs / 4
// (AutoOverflowThreshold) is a rule for a batch scheduler whose hundreds of
// sequences share one KV cache; with 4 slots it would give 1 and move a
// conversation as soon as two share a server.
func SlotOverflowThreshold(slots int) int {
	return max(1, slots-1)
}

// Sticky is the session-affinity policy (brief workload.md, "The router's rule"):
//
//   - No session key: shortest-queue placement by NoKey (ReasonNoKey).
//   - Home known and healthy, home in-flight <= Request.Threshold: the home (ReasonSticky).
//     Nothing else is weighed while the home is under the threshold, so load scorers
//     cannot outvote affinity at low load (peers.md router case 4).
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
// which replica holds the most cache (peers.md router case 1).
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

// ParseThreshold parses an overflow threshold as the YAML file
// (overflow_threshold) and the admin API (PUT .../threshold) take it: "auto" (any
// case) or 0, both meaning auto (AutoOverflowThreshold), or a positive integer of
// in-flight requests. It returns 0 for auto. Errors: anything else ("-2", "4.5",
// "lots", "").
func ParseThreshold(s string) (int, error) {
	if strings.EqualFold(s, "auto") {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf(`%q: want "auto", 0 (auto) or a positive integer`, s)
	}
	return n, nil
}
