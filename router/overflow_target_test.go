package router

import (
	"strings"
	"testing"
	"time"
)

// Under sticky, while a conversation's home stays over the
// overflow threshold its overflow goes to one replica, turn after turn, instead
// of one drawn at random among equally loaded ones every turn (r0 r3 r3 r0 ...);
// when the home has room again the turn goes home, and the next overflow goes to
// the same replica as before. The home never changes.
func TestStickyOverflowGoesToOneReplicaWhileHomeIsOver(t *testing.T) {
	b, err := NewBalancer(BalancerConfig{
		Replicas: []string{"r0", "r1", "r2", "r3"}, Affinity: true, Policy: PolicySticky,
		OverflowThreshold: 1, Seed: 1, Now: func() time.Duration { return time.Second },
	})
	if err != nil {
		t.Fatal(err)
	}
	acquire := func() Decision {
		t.Helper()
		d, err := b.Acquire(Facts{SessionKey: "s"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Two requests of the conversation stay in flight at home: it is over the
	// threshold (2 > 1) and every other replica is idle (a three-way tie).
	home := acquire()
	if d := acquire(); d.Replica != home.Replica || d.Reason != ReasonSticky {
		t.Fatalf("second request: %+v, want sticky on %d", d, home.Replica)
	}
	var seq []string
	turn := func() Decision {
		d := acquire()
		b.Release(d.Replica) // the turn ends before the next one starts
		seq = append(seq, b.Name(d.Replica)+"/"+d.Reason.String())
		return d
	}
	first := turn()
	if first.Reason != ReasonOverflow {
		t.Fatalf("home over the threshold: %+v, want overflow", first)
	}
	for range 12 {
		if d := turn(); d.Replica != first.Replica || d.Reason != ReasonOverflow {
			t.Errorf("overflow while the home stays over: %s; want every turn on %s", strings.Join(seq, " "), b.Name(first.Replica))
			break
		}
	}
	b.Release(home.Replica) // the home has room again (1 in flight)
	if d := turn(); d.Replica != home.Replica || d.Reason != ReasonSticky {
		t.Fatalf("home under the threshold: %s, want sticky on %s", seq[len(seq)-1], b.Name(home.Replica))
	}
	acquire() // over again: 2 in flight at home
	if d := turn(); d.Replica != first.Replica || d.Reason != ReasonOverflow {
		t.Errorf("the next overflow went to %s, want the same replica as before, %s", seq[len(seq)-1], b.Name(first.Replica))
	}
}
