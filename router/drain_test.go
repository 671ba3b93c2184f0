package router

import (
	"fmt"
	"testing"
)

// drainPolicies are the affinity-on policies a drain must hold under.
var drainPolicies = []string{PolicyWorkingSet, PolicyColdMove, PolicySticky, PolicySessionHash, PolicyShortestQueue}

// New conversations never land on a draining replica, in either mode and
// under every policy, and do again once the drain ends.
func TestDrainNewConversationsAvoidReplica(t *testing.T) {
	for _, pol := range drainPolicies {
		for _, m := range []DrainMode{DrainMove, DrainFinish} {
			t.Run(pol+"/"+m.String(), func(t *testing.T) {
				b, _ := newTestBalancer(t, 3, true, func(c *BalancerConfig) { c.Policy = pol })
				b.SetDrain(1, m)
				for i := range 60 {
					d := mustAcquire(t, b, fmt.Sprint("new", i))
					if d.Replica == 1 {
						t.Fatalf("conversation %d placed on the draining replica (%v)", i, d.Reason)
					}
					if i%2 == 0 {
						b.Release(d.Replica)
					}
				}
				if st := b.Status()[1]; st.Draining != m.String() || st.Sessions != 0 {
					t.Errorf("status of the drained replica: draining %q, sessions %d; want %q, 0", st.Draining, st.Sessions, m)
				}
				b.SetDrain(1, DrainNone)
				if b.Status()[1].Draining != "" {
					t.Error("draining still reported after the drain ended")
				}
				got := 0
				for i := range 30 {
					if mustAcquire(t, b, fmt.Sprint("after", i)).Replica == 1 {
						got++
					}
				}
				if got == 0 {
					t.Error("no new conversation reached the replica after its drain ended")
				}
			})
		}
	}
}

// Affinity off and keyless requests avoid a draining replica too.
func TestDrainAffinityOffAndKeyless(t *testing.T) {
	for _, affinity := range []bool{false, true} {
		b, _ := newTestBalancer(t, 3, affinity, nil)
		b.SetDrain(2, DrainFinish)
		for i := range 30 {
			d, err := b.Acquire(Facts{Prefix: []uint64{uint64(i)}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Replica == 2 {
				t.Fatalf("affinity %v: request %d on the draining replica (%v)", affinity, i, d.Reason)
			}
		}
	}
}

// homedOn returns a session key whose home is replica i (placing new ones
// until one lands there) and releases what it acquired.
func homedOn(t *testing.T, b *Balancer, i int, prefix string) string {
	t.Helper()
	for n := range 100 {
		k := fmt.Sprint(prefix, n)
		d := mustAcquire(t, b, k)
		b.Release(d.Replica)
		if d.Replica == i {
			return k
		}
	}
	t.Fatalf("no conversation placed on replica %d", i)
	return ""
}

// Move mode: a conversation homed on the draining replica moves for good at
// its next request, named drain-move, and stays on its new home after.
// Finish mode: it stays home (sticky) until it ends.
func TestDrainMoveAndFinish(t *testing.T) {
	for _, pol := range drainPolicies[:4] { // shortest-queue keeps no homes
		t.Run(pol, func(t *testing.T) {
			b, _ := newTestBalancer(t, 3, true, func(c *BalancerConfig) { c.Policy = pol })
			moving, staying := homedOn(t, b, 1, "moving"), homedOn(t, b, 1, "staying")
			b.SetDrain(1, DrainFinish)
			if d := mustAcquire(t, b, staying); d.Replica != 1 || d.Reason != ReasonSticky {
				t.Errorf("finish: next request on r%d (%v), want r1 sticky", d.Replica, d.Reason)
			} else {
				b.Release(d.Replica)
			}
			b.SetDrain(1, DrainMove)
			d := mustAcquire(t, b, moving)
			if d.Replica == 1 || d.Reason != ReasonDrainMove || d.Reason.String() != "drain-move" {
				t.Fatalf("move: next request on r%d (%v), want another replica, drain-move", d.Replica, d.Reason)
			}
			b.Release(d.Replica)
			if d2 := mustAcquire(t, b, moving); d2.Replica != d.Replica || d2.Reason != ReasonSticky {
				t.Errorf("move: the request after the move on r%d (%v), want r%d sticky", d2.Replica, d2.Reason, d.Replica)
			}
			if n := b.Status()[1].ServedBy["drain-move"]; n != 0 {
				t.Errorf("served_by_reason drain-move counted on the drained replica: %d", n)
			}
		})
	}
}

// A request in flight on a replica when its drain starts is never cut: it
// ends there, and the in-flight count reaches 0.
func TestDrainInFlightReachesZero(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, nil)
	k := homedOn(t, b, 0, "c")
	d := mustAcquire(t, b, k)
	b.SetDrain(0, DrainMove)
	if st := b.Status()[0]; st.InFlight != 1 || st.Draining != "move" {
		t.Fatalf("in flight %d draining %q, want 1 move", st.InFlight, st.Draining)
	}
	b.Release(d.Replica)
	d = mustAcquire(t, b, k) // moves
	b.Release(d.Replica)
	if st := b.Status()[0]; st.InFlight != 0 || st.Sessions != 0 {
		t.Errorf("after the move: in flight %d, sessions %d on the drained replica, want 0, 0", st.InFlight, st.Sessions)
	}
}

// Draining every healthy replica fails no request: the view is left as it is.
func TestDrainEveryReplicaStillRoutes(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, nil)
	b.SetDrain(0, DrainMove)
	b.SetDrain(1, DrainMove)
	for i := range 4 {
		if _, err := b.Acquire(Facts{SessionKey: fmt.Sprint("s", i)}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	// The one healthy replica left is draining: it takes the request.
	b.SetDrain(1, DrainNone)
	b.SetHealthy(1, false)
	if _, err := b.Acquire(Facts{SessionKey: "x"}); err != nil {
		t.Fatal(err)
	}
}

// Config drains (BalancerConfig.Drains) are in force from the start.
func TestDrainFromConfig(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.Drains = []DrainMode{DrainFinish} })
	if b.Drain(0) != DrainFinish || b.Drain(1) != DrainNone {
		t.Fatalf("drains %v %v", b.Drain(0), b.Drain(1))
	}
	for i := range 10 {
		if d := mustAcquire(t, b, fmt.Sprint("s", i)); d.Replica == 0 {
			t.Fatal("placed on the replica drained by the config")
		}
	}
}

// With shared state the store's drain is in force: a drain set through one
// router keeps the other's new conversations off the replica, and moves the
// conversations it homed there.
func TestDrainSharedAcrossRouters(t *testing.T) {
	st := &homeStore{homes: map[string]int{}, inflight: make([]int, 3)}
	a, _ := newTestBalancer(t, 3, true, func(c *BalancerConfig) { c.Shared = st })
	b, _ := newTestBalancer(t, 3, true, func(c *BalancerConfig) { c.Shared = st; c.Seed = 7 })
	k := homedOn(t, b, 2, "c")
	a.SetDrain(2, DrainMove)
	if b.Drain(2) != DrainMove || b.Status()[2].Draining != "move" {
		t.Fatalf("router B does not see router A's drain: %v", b.Drain(2))
	}
	for i := range 30 {
		if d := mustAcquire(t, b, fmt.Sprint("b-new", i)); d.Replica == 2 {
			t.Fatalf("router B placed conversation %d on the drained replica", i)
		}
	}
	if d := mustAcquire(t, b, k); d.Replica == 2 || d.Reason != ReasonDrainMove {
		t.Errorf("router B's conversation: r%d (%v), want moved off r2, drain-move", d.Replica, d.Reason)
	}
}

func TestParseDrainMode(t *testing.T) {
	for _, s := range DrainModes {
		if m, err := ParseDrainMode(s); err != nil || m.String() != s {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	if _, err := ParseDrainMode("stop"); err == nil || !contains(err.Error(), "move, finish") {
		t.Errorf("bad mode: %v", err)
	}
}
