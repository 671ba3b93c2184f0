package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

func healthy(n int) []ReplicaState {
	r := make([]ReplicaState, n)
	for i := range r {
		r[i].Healthy = true
	}
	return r
}

func withState(r []ReplicaState, f func([]ReplicaState)) []ReplicaState { f(r); return r }

func TestWorkingSetPick(t *testing.T) {
	newWS := func(move bool, keys ...LoadKey) *WorkingSet {
		w := NewWorkingSet(2, 1, NewShortestQueue(0))
		w.Move = move
		if keys != nil {
			w.Keys = keys
		}
		return w
	}
	tests := []struct {
		name  string
		ws    *WorkingSet
		req   Request
		reps  []ReplicaState
		want  Decision
		anyOf []int // when set, Replica may be any of these (ties at random)
		err   error
	}{
		// docs/router.md failure case 4: under the threshold the home wins on every other signal.
		{"home under threshold stays", newWS(true), Request{Threshold: 8, Key: "k", Home: 1},
			withState(healthy(3), func(r []ReplicaState) {
				r[1].InFlight, r[1].LiveTokens, r[1].Live = 8, 400_000, 9
				r[1].Fresh, r[1].Waiting, r[1].KVUsage = true, 20, 1
			}), Decision{1, ReasonSticky}, nil, nil},
		{"home over threshold moves for good", newWS(true), Request{Threshold: 8, Key: "k", Home: 0},
			withState(healthy(2), func(r []ReplicaState) { r[0].InFlight = 9 }), Decision{1, ReasonMoved}, nil, nil},
		{"without Move it is a one-off overflow", newWS(false), Request{Threshold: 8, Key: "k", Home: 0},
			withState(healthy(2), func(r []ReplicaState) { r[0].InFlight = 9 }), Decision{1, ReasonOverflow}, nil, nil},
		// 9 vs 8: inside the margin of 2, no move (no ping-pong between two loaded replicas).
		{"move needs a clear margin", newWS(true), Request{Threshold: 8, Key: "k", Home: 0},
			withState(healthy(2), func(r []ReplicaState) { r[0].InFlight, r[1].InFlight = 9, 8 }), Decision{0, ReasonSticky}, nil, nil},
		{"unhealthy home rehomes to the least loaded", newWS(true), Request{Threshold: 8, Key: "k", Home: 0},
			withState(healthy(3), func(r []ReplicaState) { r[0].Healthy = false; r[1].InFlight = 3; r[2].InFlight = 1 }),
			Decision{2, ReasonRehome}, nil, nil},
		{"new conversation: fewest in flight", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(3), func(r []ReplicaState) {
				r[0].InFlight, r[1].InFlight, r[2].InFlight = 2, 1, 3
				r[1].LiveTokens = 900_000 // in flight decides first
			}), Decision{1, ReasonPlaced}, nil, nil},
		// Between turns (think time) nothing is in flight: the live working set decides.
		{"in-flight tie: smallest live working set", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(3), func(r []ReplicaState) {
				r[0].LiveTokens, r[1].LiveTokens, r[2].LiveTokens = 30_000, 12_000, 25_000
				r[0].Live, r[1].Live, r[2].Live = 1, 3, 2 // fewer conversations, but bigger
			}), Decision{1, ReasonPlaced}, nil, nil},
		{"tokens tie: fewest live conversations", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(2), func(r []ReplicaState) { r[0].Live, r[1].Live = 2, 1 }), Decision{1, ReasonPlaced}, nil, nil},
		// Every router-side key ties: a fresh scrape showing another client's queue decides.
		{"all tie: fresh scraped queue", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(2), func(r []ReplicaState) {
				r[0].Fresh, r[1].Fresh = true, true
				r[0].Waiting = 5
			}), Decision{1, ReasonPlaced}, nil, nil},
		// One stale scrape: scraped values are ignored for all, so it is a random tie.
		{"stale scrape ignored", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(2), func(r []ReplicaState) { r[0].Fresh, r[0].Waiting = true, 5 }),
			Decision{Reason: ReasonPlaced}, []int{0, 1}, nil},
		// docs/router.md failure case 1: the replica with the biggest cache (most sessions) is never preferred.
		{"placement ignores cache size", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(2), func(r []ReplicaState) { r[0].InFlight, r[0].Sessions = 4, 40 }), Decision{1, ReasonPlaced}, nil, nil},
		{"cache fit key prefers a replica with room", newWS(true, KeyFits, KeyInFlight), Request{Threshold: 8, Key: "k", Home: -1, PromptTokens: 10_000},
			withState(healthy(2), func(r []ReplicaState) {
				r[0].KVCapacityTokens, r[1].KVCapacityTokens = 40_000, 40_000
				r[0].LiveTokens, r[1].LiveTokens = 35_000, 20_000
				r[1].InFlight = 3 // busier, but the conversation fits there
			}), Decision{1, ReasonPlaced}, nil, nil},
		{"unknown capacity: fits ties", newWS(true, KeyFits, KeyInFlight), Request{Threshold: 8, Key: "k", Home: -1, PromptTokens: 10_000},
			withState(healthy(2), func(r []ReplicaState) { r[0].LiveTokens, r[1].InFlight = 90_000, 1 }), Decision{0, ReasonPlaced}, nil, nil},
		{"no key: shortest queue", newWS(true), Request{Threshold: 8, Key: "", Home: -1},
			withState(healthy(2), func(r []ReplicaState) { r[0].InFlight = 3 }), Decision{1, ReasonNoKey}, nil, nil},
		{"nothing healthy", newWS(true), Request{Threshold: 8, Key: "k", Home: -1},
			withState(healthy(2), func(r []ReplicaState) { r[0].Healthy, r[1].Healthy = false, false }), Decision{}, nil, ErrNoReplica},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.ws.Pick(0, tc.req, tc.reps)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.anyOf != nil {
				ok := false
				for _, i := range tc.anyOf {
					ok = ok || got.Replica == i
				}
				if !ok || got.Reason != tc.want.Reason {
					t.Fatalf("got %+v, want reason %v on one of %v", got, tc.want.Reason, tc.anyOf)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWorkingSetTiesAreRandom: four idle replicas, many draws: every replica is
// chosen, none more than about twice its share.
func TestWorkingSetTiesAreRandom(t *testing.T) {
	w := NewWorkingSet(2, 42, NewShortestQueue(0))
	counts := make([]int, 4)
	for i := range 4000 {
		d, err := w.Pick(0, Request{Threshold: 8, Key: fmt.Sprint(i), Home: -1}, healthy(4))
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Replica]++
	}
	for i, c := range counts {
		if c < 500 || c > 1500 {
			t.Fatalf("replica %d chosen %d times of 4000: %v", i, c, counts)
		}
	}
}

// TestRacingPlacements: new conversations arriving at the same instant (the clock
// does not move between them) must see each other's placements, because the
// in-flight count changes atomically with the decision. With n replicas and k*n
// new sessions, every replica gets exactly k.
func TestRacingPlacements(t *testing.T) {
	for _, pol := range []string{PolicyWorkingSet, PolicySticky} {
		for _, tc := range []struct{ replicas, sessions int }{{4, 4}, {4, 16}, {7, 26}} {
			t.Run(fmt.Sprintf("%s/%dx%d", pol, tc.replicas, tc.sessions), func(t *testing.T) {
				b, _ := newTestBalancer(t, tc.replicas, true, func(c *BalancerConfig) { c.Policy = pol })
				got := make([]int, tc.replicas)
				for i := range tc.sessions {
					d, err := b.Acquire(Facts{SessionKey: fmt.Sprint("s", i), PromptTokens: 11_000})
					if err != nil {
						t.Fatal(err)
					}
					got[d.Replica]++
				}
				lo, hi := got[0], got[0]
				for _, c := range got {
					lo, hi = min(lo, c), max(hi, c)
				}
				if hi-lo > 1 {
					t.Fatalf("simultaneous placements piled up: %v", got)
				}
			})
		}
	}
}

// TestRacingPlacementsConcurrent: the same from goroutines (run with -race).
func TestRacingPlacementsConcurrent(t *testing.T) {
	b, _ := newTestBalancer(t, 4, true, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := make([]int, 4)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := b.Acquire(Facts{SessionKey: fmt.Sprint("c", i), PromptTokens: 9000})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[d.Replica]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, c := range got {
		if c != 8 {
			t.Fatalf("32 concurrent placements on 4 replicas: %v, want 8 each", got)
		}
	}
}

// TestRacingPlacementsWithLaggingCount shows why the count must change with the
// decision: the same burst placed from a count that lags (every placement sees
// the counts from before the burst, as a scraped or late-bumped count would)
// lands on one replica.
func TestRacingPlacementsWithLaggingCount(t *testing.T) {
	w := NewWorkingSet(2, 1, NewShortestQueue(0))
	w.Rand = rand.New(rand.NewPCG(1, 1))
	before := healthy(4)
	before[0].InFlight, before[1].InFlight, before[2].InFlight = 1, 1, 1 // replica 3 idle
	got := make([]int, 4)
	for i := range 8 {
		d, err := w.Pick(0, Request{Threshold: 8, Key: fmt.Sprint(i), Home: -1}, before) // never updated
		if err != nil {
			t.Fatal(err)
		}
		got[d.Replica]++
	}
	if got[3] != 8 {
		t.Fatalf("lagging count: %v, want all 8 on replica 3", got)
	}
}

func TestWorkingSetMovesOnOverflow(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.OverflowThreshold = 2 })
	home := mustAcquire(t, b, "s").Replica
	mustAcquire(t, b, "s")
	mustAcquire(t, b, "s") // home: 3 in flight > 2
	d := mustAcquire(t, b, "s")
	if d.Reason != ReasonMoved || d.Replica == home {
		t.Fatalf("over threshold: %+v", d)
	}
	for range 3 {
		b.Release(home)
	}
	// The home is idle again, but the conversation's cache is now on d.Replica: no bounce.
	if d2 := mustAcquire(t, b, "s"); d2 != (Decision{d.Replica, ReasonSticky}) {
		t.Fatalf("bounced back: %+v", d2)
	}
	if st := b.Status(); st[d.Replica].Sessions != 1 || st[home].Sessions != 0 {
		t.Fatalf("session table after the move: %+v", st)
	}
}

// TestWorkingSetPlacesByLiveWorkingSetBetweenTurns: with think time nothing is in
// flight when a new conversation arrives; the live working set (from the prompt
// sizes of each conversation's last request) steers it to the replica holding
// less. (Sticky's "active" count sees one conversation on each and picks at
// random.)
func TestWorkingSetPlacesByLiveWorkingSetBetweenTurns(t *testing.T) {
	for seed := range uint64(20) {
		b, clk := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.Seed = seed })
		place := func(key string, tokens int) int {
			d, err := b.Acquire(Facts{SessionKey: key, PromptTokens: tokens})
			if err != nil {
				t.Fatal(err)
			}
			b.Release(d.Replica)
			return d.Replica
		}
		long := place("long", 40_000)
		short := place("short", 2_000)
		if long == short {
			t.Fatalf("seed %d: two idle conversations on one replica: %d", seed, long)
		}
		clk.Advance(3 * time.Second) // between turns: nothing in flight
		if d := mustAcquire(t, b, "new"); d.Replica != short {
			t.Fatalf("seed %d: placed on %d; the 40k conversation is on %d, the 2k one on %d", seed, d.Replica, long, short)
		}
	}
}

func TestSessionHashPick(t *testing.T) {
	p := &SessionHash{NoKey: NewShortestQueue(0)}
	key := "session-x"
	h := HashReplica(key, 4)
	tests := []struct {
		name string
		req  Request
		reps []ReplicaState
		want Decision
		err  error
	}{
		{"new key goes to its hash", Request{Threshold: 8, Key: key, Home: -1}, healthy(4), Decision{h, ReasonPlaced}, nil},
		{"known key at its hash is sticky", Request{Threshold: 8, Key: key, Home: h}, healthy(4), Decision{h, ReasonSticky}, nil},
		// Blind to load: a full hashed replica still gets the conversation.
		{"load is ignored", Request{Threshold: 8, Key: key, Home: h}, withState(healthy(4), func(r []ReplicaState) { r[h].InFlight = 100 }), Decision{h, ReasonSticky}, nil},
		{"unhealthy hash probes the next replica", Request{Threshold: 8, Key: key, Home: h},
			withState(healthy(4), func(r []ReplicaState) { r[h].Healthy = false }), Decision{(h + 1) % 4, ReasonRehome}, nil},
		{"no key: shortest queue", Request{Home: -1}, withState(healthy(2), func(r []ReplicaState) { r[0].InFlight = 1 }), Decision{1, ReasonNoKey}, nil},
		{"nothing healthy", Request{Threshold: 8, Key: key, Home: -1}, withState(healthy(2), func(r []ReplicaState) { r[0].Healthy, r[1].Healthy = false, false }), Decision{}, ErrNoReplica},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Pick(0, tc.req, tc.reps)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestHashReplicaStable: the mapping depends on the key and the replica count
// only (not on a per-process seed), and spreads keys over every replica.
func TestHashReplicaStable(t *testing.T) {
	if a, b := HashReplica("abc", 7), HashReplica("abc", 7); a != b {
		t.Fatalf("unstable: %d %d", a, b)
	}
	seen := map[int]bool{}
	for i := range 200 {
		seen[HashReplica(fmt.Sprint("k", i), 7)] = true
	}
	if len(seen) != 7 {
		t.Fatalf("200 keys reached %d of 7 replicas", len(seen))
	}
}

func TestBalancerPolicySelection(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		bad        bool
	}{
		{"", PolicyWorkingSet, false},
		{PolicySticky, PolicySticky, false},
		{PolicySessionHash, PolicySessionHash, false},
		{PolicyShortestQueue, PolicyShortestQueue, false},
		{PolicyWorkingSet, PolicyWorkingSet, false},
		{"round-robin", "", true},
	} {
		t.Run("policy="+tc.name, func(t *testing.T) {
			clk := &simclock.Manual{}
			b, err := NewBalancer(BalancerConfig{Replicas: names(2), Affinity: true, Policy: tc.name, Now: clk.Now})
			if tc.bad {
				if err == nil || !strings.Contains(err.Error(), "policy") {
					t.Fatalf("err = %v, want a policy error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Policy(); got != tc.want {
				t.Fatalf("policy %q, want %q", got, tc.want)
			}
		})
	}
	b, _ := newTestBalancer(t, 2, true, nil)
	if err := b.SetPolicy(PolicySessionHash); err != nil || b.Policy() != PolicySessionHash {
		t.Fatalf("SetPolicy: %v, now %q", err, b.Policy())
	}
	if err := b.SetPolicy("nope"); err == nil || b.Policy() != PolicySessionHash {
		t.Fatalf("SetPolicy(nope): %v, now %q", err, b.Policy())
	}
	d := mustAcquire(t, b, "key")
	if want := HashReplica("key", 2); d.Replica != want {
		t.Fatalf("session-hash placed on %d, want %d", d.Replica, want)
	}
}

// TestOnDecisionSeesTheView: the hook gets every decision with the state the
// policy saw, including the prompt size it was told.
func TestOnDecisionSeesTheView(t *testing.T) {
	var evs []DecisionEvent
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) {
		c.OnDecision = func(ev DecisionEvent) {
			ev.View = append([]ReplicaState(nil), ev.View...)
			evs = append(evs, ev)
		}
		c.KVCapacityTokens = 40_000
	})
	if _, err := b.Acquire(Facts{SessionKey: "a", PromptTokens: 1234}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(Facts{SessionKey: "a", PromptTokens: 1500}); err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	first, second := evs[0], evs[1]
	if first.Home != -1 || first.Decision.Reason != ReasonPlaced || first.Facts.PromptTokens != 1234 || first.Policy != PolicyWorkingSet {
		t.Fatalf("first event %+v", first)
	}
	h := first.Decision.Replica
	v := second.View[h]
	if second.Home != h || v.InFlight != 1 || v.Live != 1 || v.LiveTokens != 1234 || v.KVCapacityTokens != 40_000 {
		t.Fatalf("second event home %d view %+v", second.Home, v)
	}
}

func TestEstimatePromptTokens(t *testing.T) {
	for _, tc := range []struct{ bytes, want int }{{0, 0}, {3, 0}, {4000, 1000}, {50_000, 12_500}} {
		if got := EstimatePromptTokens(tc.bytes); got != tc.want {
			t.Errorf("EstimatePromptTokens(%d) = %d, want %d", tc.bytes, got, tc.want)
		}
	}
}

func BenchmarkWorkingSetPick(b *testing.B) {
	w := NewWorkingSet(2, 1, NewShortestQueue(0))
	reps := healthy(8)
	for i := range reps {
		reps[i].InFlight, reps[i].LiveTokens, reps[i].Live = i%3, int64(i*1000), i
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := w.Pick(0, Request{Threshold: 8, Key: "k", Home: -1}, reps); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWorkingSetOverflowNeedsTheMargin: over the threshold, a request leaves its
// home only for a replica with at least Margin fewer requests in flight (no
// ping-pong between two replicas about equally loaded); exactly Margin fewer is
// enough.
func TestWorkingSetOverflowNeedsTheMargin(t *testing.T) {
	w := NewWorkingSet(2, 1, NewShortestQueue(0))
	w.FitMove = false
	reps := func(home, other int) []ReplicaState {
		return []ReplicaState{{Healthy: true, InFlight: home}, {Healthy: true, InFlight: other}}
	}
	for _, tc := range []struct {
		home, other int
		want        Decision
	}{
		{3, 2, Decision{0, ReasonSticky}}, // 1 fewer: under the margin, stays
		{3, 1, Decision{1, ReasonMoved}},  // exactly the margin: moves
		{4, 1, Decision{1, ReasonMoved}},  // more than the margin
		{2, 0, Decision{0, ReasonSticky}}, // at the threshold: stays whatever the other
	} {
		d, err := w.Pick(0, Request{Key: "s", Home: 0, Threshold: 2}, reps(tc.home, tc.other))
		if err != nil || d != tc.want {
			t.Errorf("home %d, other %d in flight: %+v, %v; want %+v", tc.home, tc.other, d, err, tc.want)
		}
	}
}
