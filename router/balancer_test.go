package router

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmdp"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%d", i)
	}
	return out
}

func newTestBalancer(t testing.TB, n int, affinity bool, mod func(*BalancerConfig)) (*Balancer, *simclock.Manual) {
	t.Helper()
	clk := &simclock.Manual{}
	cfg := BalancerConfig{Replicas: names(n), Affinity: affinity, MaxNumSeqs: 32, Seed: 1, Now: clk.Now}
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, clk
}

func mustAcquire(t testing.TB, b *Balancer, key string) Decision {
	t.Helper()
	d, err := b.Acquire(Facts{SessionKey: key})
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return d
}

func TestNewBalancerRejectsBadConfig(t *testing.T) {
	_, err := NewBalancer(BalancerConfig{OverflowThreshold: -1})
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{"replicas", "clock", "overflow threshold"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestStickyPick(t *testing.T) {
	idle := func(n int) []ReplicaState {
		r := make([]ReplicaState, n)
		for i := range r {
			r[i].Healthy = true
		}
		return r
	}
	with := func(r []ReplicaState, f func([]ReplicaState)) []ReplicaState { f(r); return r }
	tests := []struct {
		name  string
		req   Request
		reps  []ReplicaState
		want  Decision
		anyOf []int // when set, Replica may be any of these
		errIs error
	}{
		{"home under threshold stays", Request{Key: "k", Home: 2}, with(idle(4), func(r []ReplicaState) { r[2].InFlight = 8 }), Decision{2, ReasonSticky}, nil, nil},
		// Home at 9 > 8, replica 1 has 0: clearly less loaded.
		{"home over threshold overflows", Request{Key: "k", Home: 0}, with(idle(2), func(r []ReplicaState) { r[0].InFlight = 9 }), Decision{1, ReasonOverflow}, nil, nil},
		// Home at 9, the other at 8: within the margin of 2, so no ping-pong.
		{"overflow needs a clear margin", Request{Key: "k", Home: 0}, with(idle(2), func(r []ReplicaState) { r[0].InFlight = 9; r[1].InFlight = 8 }), Decision{0, ReasonSticky}, nil, nil},
		{"home unhealthy rehomes", Request{Key: "k", Home: 1}, with(idle(2), func(r []ReplicaState) { r[1].Healthy = false }), Decision{0, ReasonRehome}, nil, nil},
		{"unknown key placed on fewest in flight", Request{Key: "k", Home: -1}, with(idle(3), func(r []ReplicaState) { r[0].InFlight = 2; r[1].InFlight = 1; r[2].InFlight = 3 }), Decision{1, ReasonPlaced}, nil, nil},
		// Equal in-flight, all fresh: waiting + kv decides.
		{"scraped load breaks in-flight ties", Request{Key: "k", Home: -1}, with(idle(3), func(r []ReplicaState) {
			for i := range r {
				r[i].Fresh = true
			}
			r[0].KVUsage, r[1].KVUsage, r[2].KVUsage = 0.9, 0.2, 0.5
		}), Decision{1, ReasonPlaced}, nil, nil},
		// One stale scrape: scraped gauges are ignored for all, active sessions decide.
		{"stale scrape ignored", Request{Key: "k", Home: -1}, with(idle(3), func(r []ReplicaState) {
			r[0].Fresh, r[1].Fresh = true, true
			r[1].KVUsage = 0.9
			r[0].Active, r[1].Active, r[2].Active = 3, 1, 2
		}), Decision{1, ReasonPlaced}, nil, nil},
		// docs/router.md failure case 1: the replica with the biggest cache is the busiest; never chosen.
		{"placement ignores cache size", Request{Key: "k", Home: -1}, with(idle(2), func(r []ReplicaState) { r[0].InFlight = 4; r[0].Sessions = 40 }), Decision{1, ReasonPlaced}, nil, nil},
		{"full tie is random among equals", Request{Key: "k", Home: -1}, idle(3), Decision{Reason: ReasonPlaced}, []int{0, 1, 2}, nil},
		{"no key uses shortest queue", Request{Key: "", Home: -1}, with(idle(2), func(r []ReplicaState) { r[0].InFlight = 1 }), Decision{1, ReasonNoKey}, nil, nil},
		{"nothing healthy", Request{Key: "k", Home: -1}, with(idle(2), func(r []ReplicaState) { r[0].Healthy = false; r[1].Healthy = false }), Decision{}, nil, ErrNoReplica},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sticky{Margin: 2, Rand: rand.New(rand.NewPCG(1, 2)), NoKey: NewShortestQueue(time.Second)}
			req := tc.req
			req.Threshold = 8
			d, err := s.Pick(0, req, tc.reps)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) {
					t.Fatalf("err = %v, want %v", err, tc.errIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.anyOf != nil {
				ok := false
				for _, i := range tc.anyOf {
					ok = ok || d.Replica == i
				}
				if !ok || d.Reason != tc.want.Reason {
					t.Fatalf("got %+v, want reason %v on one of %v", d, tc.want.Reason, tc.anyOf)
				}
				return
			}
			if d != tc.want {
				t.Fatalf("got %+v, want %+v", d, tc.want)
			}
		})
	}
}

func TestStickyTieBreakSpreadsUniformly(t *testing.T) {
	s := &Sticky{Margin: 2, Rand: rand.New(rand.NewPCG(7, 7)), NoKey: NewShortestQueue(0)}
	reps := make([]ReplicaState, 4)
	for i := range reps {
		reps[i].Healthy = true
	}
	var count [4]int
	for range 4000 {
		count[s.LeastLoaded(reps, -1)]++
	}
	for i, c := range count {
		if c < 800 || c > 1200 { // expected 1000 each; ±20% is > 10 sigma
			t.Errorf("replica %d chosen %d times of 4000", i, c)
		}
	}
}

func TestShortestQueueScore(t *testing.T) {
	q := NewShortestQueue(time.Second)
	reps := []ReplicaState{
		{Healthy: true, InFlight: 3, Fresh: true, Running: 2, Waiting: 0},
		{Healthy: true, InFlight: 1, Fresh: true, Running: 1, Waiting: 2, KVUsage: 0.75},
		{Healthy: true, InFlight: 0, Fresh: false, Running: 9, Waiting: 9}, // stale: ignored
	}
	q.Sync(0, reps)
	want := []float64{
		3,                  // max(3+0, 0+2)
		3 + 2*6*(0.75-0.5), // max(1, 2+1) + waiting*6*(kv-0.5)
		0,                  // stale gauges count as zero
	}
	for i, w := range want {
		if got := q.Score(i); got != w {
			t.Errorf("score(%d) = %v, want %v", i, got, w)
		}
	}
}

func TestShortestQueueRotatesScanStart(t *testing.T) {
	// All equal and the snapshot interval long: the +1 per sent request and the
	// rotating start spread requests round-robin.
	q := NewShortestQueue(time.Hour)
	reps := make([]ReplicaState, 3)
	for i := range reps {
		reps[i].Healthy = true
	}
	var got []int
	for range 6 {
		d, err := q.Pick(0, Request{}, reps)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Replica)
	}
	if fmt.Sprint(got) != "[0 1 2 0 1 2]" {
		t.Fatalf("got %v", got)
	}
	// An exact tie after a full round starts at the rotated position.
	q2 := NewShortestQueue(time.Hour)
	d1, _ := q2.Pick(0, Request{}, reps)
	q2.snap[d1.Replica] = vllmdp.Rank{} // pretend the snapshot showed nothing sent
	d2, _ := q2.Pick(0, Request{}, reps)
	if d1.Replica == d2.Replica {
		t.Fatalf("equal scores, same replica twice: %d", d1.Replica)
	}
}

func TestShortestQueueWorksFromSnapshotNotInstantCounts(t *testing.T) {
	// Exact instant counts flatter "off". Within one snapshot interval a
	// replica that just finished its request still looks busy.
	b, clk := newTestBalancer(t, 2, false, func(c *BalancerConfig) { c.SnapshotInterval = 100 * time.Millisecond })
	clk.Advance(10 * time.Millisecond)
	d1 := mustAcquire(t, b, "a") // replica 0
	d2 := mustAcquire(t, b, "b") // replica 1
	if d1.Replica == d2.Replica {
		t.Fatalf("two requests, one replica: %v %v", d1, d2)
	}
	clk.Advance(100 * time.Millisecond) // past the next grid point
	b.Release(d1.Replica)               // snapshot (1, 1) taken first, then the count drops
	clk.Advance(10 * time.Millisecond)  // same 100 ms window
	mustAcquire(t, b, "c")
	// The snapshot still counts d1's request on its replica (plus "c" if it went
	// there), one more than the exact count; an exact balancer would not.
	q := b.sq
	if got, want := q.Score(d1.Replica), float64(b.Status()[d1.Replica].InFlight+1); got != want {
		t.Fatalf("score of the released replica = %v, want %v until the next grid point", got, want)
	}
	clk.Advance(100 * time.Millisecond)
	mustAcquire(t, b, "d")
	if got, want := q.snap[d1.Replica].InFlight, b.Status()[d1.Replica].InFlight; got != want {
		t.Fatalf("after the grid point snapshot in-flight (with sends since) = %d, want %d", got, want)
	}
}

func TestShortestQueueScattersTurnsOfOneConversation(t *testing.T) {
	// Affinity off: one conversation's consecutive turns (no other load) rotate over
	// the replicas, as behind vLLM's own balancer.
	b, clk := newTestBalancer(t, 4, false, nil)
	seen := map[int]bool{}
	for range 4 {
		d := mustAcquire(t, b, "conv")
		if d.Reason != ReasonBalanced {
			t.Fatalf("reason %v", d.Reason)
		}
		seen[d.Replica] = true
		clk.Advance(time.Second)
		b.Release(d.Replica)
		clk.Advance(time.Second)
	}
	if len(seen) != 4 {
		t.Fatalf("4 turns used %d replicas, want 4", len(seen))
	}
}

func TestPlaceNewSessionsByLoadNotCache(t *testing.T) {
	// docs/router.md failure case 1: the replica with the biggest cache (many sessions, high KV) is
	// also the busiest; new sessions must go by load.
	b, clk := newTestBalancer(t, 4, true, nil)
	for i := range 6 {
		d := mustAcquire(t, b, fmt.Sprintf("old%d", i))
		_ = d
	}
	// Pretend replica 0 has a big warm cache and is the busiest.
	b.ObserveEngine(0, 8, 2, 0.95, clk.Now())
	for i := 1; i < 4; i++ {
		b.ObserveEngine(i, 0, 0, 0.1, clk.Now())
	}
	before := b.Status()
	for i := range 12 {
		mustAcquire(t, b, fmt.Sprintf("new%d", i))
	}
	after := b.Status()
	for i := range after {
		got := after[i].InFlight - before[i].InFlight
		if got < 2 || got > 4 {
			t.Errorf("replica %d took %d of 12 new sessions; want an even share by load", i, got)
		}
	}
}

func TestConcurrentPlacementsSeeEachOther(t *testing.T) {
	// The in-flight bump is atomic with the decision: 8 sessions placed "at the
	// same instant" on 4 idle replicas spread 2 per replica instead of piling up.
	b, _ := newTestBalancer(t, 4, true, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { mustAcquire(t, b, fmt.Sprintf("s%d", i)) })
	}
	wg.Wait()
	for _, s := range b.Status() {
		if s.InFlight != 2 {
			t.Fatalf("status %+v: want 2 in flight on every replica", b.Status())
		}
	}
}

func TestConcurrentFirstRequestsOfOneSessionLandTogether(t *testing.T) {
	b, _ := newTestBalancer(t, 8, true, nil)
	var wg sync.WaitGroup
	got := make([]int, 8) // up to the threshold (8): no overflow expected
	for i := range got {
		wg.Go(func() { got[i] = mustAcquire(t, b, "one-session").Replica })
	}
	wg.Wait()
	for _, r := range got {
		if r != got[0] {
			t.Fatalf("one session on several replicas: %v", got)
		}
	}
}

func TestStaysHomeWhileHealthyAndUnderThreshold(t *testing.T) {
	// docs/router.md failure case 4: soft affinity must not be outvoted at low load. Make the home
	// look worse on every secondary signal; it still wins up to the threshold.
	// Sticky: a one-off overflow keeps the home (WorkingSet moves it, see
	// TestWorkingSetMovesOnOverflow).
	b, clk := newTestBalancer(t, 3, true, func(c *BalancerConfig) { c.Policy = PolicySticky }) // threshold auto = 32/4 = 8
	home := mustAcquire(t, b, "s").Replica
	for i := range 3 {
		kv := 0.0
		if i == home {
			kv = 0.99
		}
		b.ObserveEngine(i, 0, 0, kv, clk.Now())
	}
	for range 7 { // home now has 8 in flight, the others 0
		if d := mustAcquire(t, b, "s"); d != (Decision{home, ReasonSticky}) {
			t.Fatalf("got %+v, want sticky on %d", d, home)
		}
	}
	d := mustAcquire(t, b, "s") // home has 8 in flight: 8 > 8 is false, so... sticky
	if d.Reason != ReasonSticky {
		t.Fatalf("at exactly the threshold: %+v", d)
	}
	d = mustAcquire(t, b, "s") // home has 9 > 8: overflow to an idle replica
	if d.Reason != ReasonOverflow || d.Replica == home {
		t.Fatalf("over threshold: %+v", d)
	}
	b.Release(d.Replica)
	for range 9 {
		b.Release(home)
	}
	if d := mustAcquire(t, b, "s"); d != (Decision{home, ReasonSticky}) {
		t.Fatalf("overflow moved the home: %+v", d)
	}
}

func TestStaleMetricsFallBackToRouterCounts(t *testing.T) {
	// docs/router.md failure case 5: stale gauges are neither "saturated" nor blocking; placement
	// works from the router's own counts.
	b, clk := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.StaleAfter = 3 * time.Second })
	b.ObserveEngine(0, 50, 50, 1.0, 0) // looks saturated...
	b.ObserveEngine(1, 0, 0, 0, 0)
	clk.Advance(10 * time.Second) // ...but is 10 s old
	b.Acquire(Facts{SessionKey: "busy"})
	// Router counts: one replica has 1 in flight; the next session goes to the other.
	first := b.Status()
	d := mustAcquire(t, b, "x")
	if first[d.Replica].InFlight != 0 {
		t.Fatalf("placed on the replica with more in flight: %+v", d)
	}
	st := b.Status()
	if st[0].ScrapeFresh || st[0].ScrapeAgeS != 10 {
		t.Fatalf("status %+v: want stale, age 10 s", st[0])
	}
	// Fresh again: the fresh gauges count.
	b.ObserveEngine(0, 50, 50, 1.0, clk.Now())
	b.ObserveEngine(1, 0, 0, 0, clk.Now())
	b.Release(0)
	b.Release(1)
	b.Release(0)
	b.Release(1)
	if d := mustAcquire(t, b, "y"); d.Replica != 1 {
		t.Fatalf("fresh gauges ignored: %+v", d)
	}
}

func TestRehomeOnUnhealthy(t *testing.T) {
	b, _ := newTestBalancer(t, 3, true, nil)
	home := mustAcquire(t, b, "s").Replica
	b.Release(home)
	b.SetHealthy(home, false)
	d := mustAcquire(t, b, "s")
	if d.Reason != ReasonRehome || d.Replica == home {
		t.Fatalf("got %+v", d)
	}
	b.Release(d.Replica)
	b.SetHealthy(home, true) // the old home is back: the session stays moved
	if d2 := mustAcquire(t, b, "s"); d2 != (Decision{d.Replica, ReasonSticky}) {
		t.Fatalf("got %+v, want sticky on new home %d", d2, d.Replica)
	}
	for i := range 3 {
		b.SetHealthy(i, false)
	}
	if _, err := b.Acquire(Facts{SessionKey: "s"}); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("err = %v", err)
	}
}

func TestAvoidedHomeOverflowsWithoutRehome(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, nil)
	home := mustAcquire(t, b, "s").Replica
	b.Release(home)
	d, err := b.Acquire(Facts{SessionKey: "s", Avoid: 1 << uint(home)})
	if err != nil || d.Reason != ReasonOverflow || d.Replica == home {
		t.Fatalf("got %+v, %v", d, err)
	}
	b.Release(d.Replica)
	if d := mustAcquire(t, b, "s"); d != (Decision{home, ReasonSticky}) {
		t.Fatalf("home changed: %+v", d)
	}
}

func TestAddingReplicaMovesNoSession(t *testing.T) {
	// docs/router.md failure case 8: a hash ring remaps sessions when a backend is added; the table
	// does not.
	b, _ := newTestBalancer(t, 3, true, nil)
	homes := map[string]int{}
	for i := range 30 {
		k := fmt.Sprintf("s%d", i)
		homes[k] = mustAcquire(t, b, k).Replica
		b.Release(homes[k])
	}
	if idx := b.AddReplica("r3"); idx != 3 {
		t.Fatalf("new index %d", idx)
	}
	for k, h := range homes {
		d := mustAcquire(t, b, k)
		if d.Replica != h {
			t.Fatalf("session %s moved %d -> %d (%v)", k, h, d.Replica, d.Reason)
		}
		b.Release(d.Replica)
	}
	if d := mustAcquire(t, b, "fresh"); d.Replica != 3 || d.Reason != ReasonPlaced {
		t.Fatalf("new session not placed on the empty new replica: %+v", d)
	}
}

func TestAffinitySwitchAndThreshold(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, nil)
	if n, auto := b.OverflowThreshold(); n != 8 || !auto {
		t.Fatalf("threshold %d auto %v", n, auto)
	}
	b.SetOverflowThreshold(3)
	if n, auto := b.OverflowThreshold(); n != 3 || auto {
		t.Fatalf("threshold %d auto %v", n, auto)
	}
	b.SetAffinity(false)
	if b.Affinity() {
		t.Fatal("affinity still on")
	}
	if d := mustAcquire(t, b, "s"); d.Reason != ReasonBalanced {
		t.Fatalf("off: %+v", d)
	}
	if b.Sessions() != 0 {
		t.Fatal("affinity off must not record sessions")
	}
	b.SetAffinity(true)
	if d := mustAcquire(t, b, "s"); d.Reason != ReasonPlaced {
		t.Fatalf("on: %+v", d)
	}
}

func TestReleaseNeverGoesNegative(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, nil)
	b.Release(0)
	b.Release(5)
	d := mustAcquire(t, b, "s")
	b.Release(d.Replica)
	b.Release(d.Replica)
	for _, s := range b.Status() {
		if s.InFlight != 0 {
			t.Fatalf("%+v", s)
		}
	}
}

func TestStatusCountsServedByReason(t *testing.T) {
	b, _ := newTestBalancer(t, 1, true, nil)
	mustAcquire(t, b, "a")
	mustAcquire(t, b, "a")
	mustAcquire(t, b, "")
	st := b.Status()[0]
	if st.ServedBy["placed"] != 1 || st.ServedBy["sticky"] != 1 || st.ServedBy["no-key"] != 1 || st.ServedTotal != 3 {
		t.Fatalf("%+v", st)
	}
	if st.Sessions != 1 || st.Active != 1 {
		t.Fatalf("sessions %+v", st)
	}
}

// docs/router.md failure case 5, the "stale = saturated" half: a replica whose scrape went stale
// while a fresh one reports load must not be treated as saturated. With equal
// router counts, vLLM's balancer (affinity off) sends the request to the stale
// replica, whose gauges count as 0, not to the fresh one with requests waiting.
// Placement with affinity on ignores scraped gauges unless every candidate's are
// fresh, so the two replicas tie and the stale one must win some of the
// (seeded) random tie-breaks.
func TestStaleReplicaIsNotTreatedAsSaturated(t *testing.T) {
	for _, affinity := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[affinity], func(t *testing.T) {
			const trials = 16
			onStale := 0
			for trial := range trials {
				b, clk := newTestBalancer(t, 2, affinity, func(c *BalancerConfig) {
					c.StaleAfter = 3 * time.Second
					c.Seed = uint64(trial + 1)
				})
				b.ObserveEngine(0, 4, 4, 0.95, 0) // replica 0's last scrape ...
				clk.Advance(10 * time.Second)     // ... is 10 s old
				b.ObserveEngine(1, 3, 2, 0.9, clk.Now())
				clk.Advance(200 * time.Millisecond) // past vLLM's snapshot interval
				if mustAcquire(t, b, "new-"+strconv.Itoa(trial)).Replica == 0 {
					onStale++
				}
			}
			if !affinity && onStale != trials {
				t.Errorf("off: %d of %d requests went to the stale replica, want all (its gauges count as 0)", onStale, trials)
			}
			if affinity && onStale == 0 {
				t.Errorf("on: no new conversation of %d went to the stale replica: it is treated as loaded", trials)
			}
		})
	}
}

// Unplace forgets a session only while the refused request that placed it is the
// only one routed for it, and only at the replica it was placed on.
func TestUnplaceForgetsOnlyAnUnusedPlacement(t *testing.T) {
	b, _ := newTestBalancer(t, 3, true, nil)
	d := mustAcquire(t, b, "a")
	if d.Reason != ReasonPlaced {
		t.Fatalf("first request: %v", d.Reason)
	}
	b.Release(d.Replica)
	if b.Unplace("a", (d.Replica+1)%3) {
		t.Error("unplaced at a replica that is not the home")
	}
	if !b.Unplace("a", d.Replica) || b.Sessions() != 0 {
		t.Fatalf("placement not forgotten: %d sessions", b.Sessions())
	}
	if b.Unplace("a", d.Replica) || b.Unplace("", 0) {
		t.Error("unplaced twice, or an empty key")
	}
	if d2 := mustAcquire(t, b, "a"); d2.Reason != ReasonPlaced {
		t.Errorf("after unplacing, the next request is %v, want placed", d2.Reason)
	}

	// A second request routed before the first was refused keeps the home.
	d = mustAcquire(t, b, "b")
	if d2 := mustAcquire(t, b, "b"); d2.Reason != ReasonSticky || d2.Replica != d.Replica {
		t.Fatalf("second request: %+v, want sticky to %d", d2, d.Replica)
	}
	if b.Unplace("b", d.Replica) {
		t.Error("unplaced a home another request used")
	}

	// Affinity off: nothing to forget.
	off, _ := newTestBalancer(t, 3, false, nil)
	d = mustAcquire(t, off, "c")
	if off.Unplace("c", d.Replica) {
		t.Error("unplaced with affinity off")
	}
}

// Acquire estimates a prompt from the body size: 4 bytes per token until
// ObserveSize has seen SizeMinSeen requests, then the measured ratio.
func TestBodySizeEstimateCalibrates(t *testing.T) {
	var got []int
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) {
		c.OnDecision = func(ev DecisionEvent) { got = append(got, ev.Facts.PromptTokens) }
	})
	acquire := func(f Facts) {
		d, err := b.Acquire(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Release(d.Replica)
	}
	acquire(Facts{SessionKey: "a", BodyBytes: 40_000})
	for range SizeMinSeen - 1 {
		b.ObserveSize(39_908, 11_357) // the simulator: 3.5 bytes per token
	}
	b.ObserveSize(0, 100) // ignored
	acquire(Facts{SessionKey: "a", BodyBytes: 40_000})
	b.ObserveSize(39_908, 11_357)
	acquire(Facts{SessionKey: "a", BodyBytes: 40_000})
	acquire(Facts{SessionKey: "a", BodyBytes: 40_000, PromptTokens: 123}) // exact counts win
	want := []int{10_000, 10_000, 11_383, 123}
	if len(got) != len(want) {
		t.Fatalf("%d decisions", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("decision %d: prompt estimate %d, want %d", i, got[i], want[i])
		}
	}
}

// Before any scrape or response the ratio is the assumed 4 bytes per token,
// and /status says so.
func TestBytesPerTokenAssumedAtStart(t *testing.T) {
	b, _ := newTestBalancer(t, 1, true, nil)
	if r, src := b.BytesPerToken(); r != BytesPerTokenEstimate || src != SizeAssumed {
		t.Errorf("BytesPerToken = %.2f from %s, want %d assumed", r, src, BytesPerTokenEstimate)
	}
	b.ObserveSizeWindow(30_000, MinMeasuredPromptTokens-1) // too few tokens: ignored
	if r, src := b.BytesPerToken(); r != BytesPerTokenEstimate || src != SizeAssumed {
		t.Errorf("after a short window: %.2f from %s, want %d assumed", r, src, BytesPerTokenEstimate)
	}
}

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"auto", 0, true},
		{"AUTO", 0, true},
		{"0", 0, true}, // auto, as in the YAML file and --overflow-threshold 0
		{"6", 6, true},
		{"-2", 0, false},
		{"4.5", 0, false},
		{"lots", 0, false},
		{"", 0, false},
	} {
		got, err := ParseThreshold(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseThreshold(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// vLLM's optimistic +1 goes on the snapshot's waiting count
// (vllmdp.Rank.Sent), so a request sent to a replica over half full makes the
// KV term count at once: the next request goes to the other replica, where
// adding the send to the in-flight term alone (before) sent it to the same one.
func TestShortestQueueSendRaisesWaiting(t *testing.T) {
	q := NewShortestQueue(time.Hour)
	reps := []ReplicaState{
		{Healthy: true, Fresh: true, Running: 2, KVUsage: 0.9},
		{Healthy: true, Fresh: true, Running: 3, KVUsage: 0.1},
	}
	var got []int
	for range 2 {
		d, err := q.Pick(0, Request{}, reps)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Replica)
	}
	if fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("picks %v, want [0 1]", got)
	}
	if s, want := q.Score(0), 3+1*6*0.4; math.Abs(s-want) > 1e-9 {
		t.Errorf("replica 0 after one send: score %v, want %v", s, want)
	}
}
