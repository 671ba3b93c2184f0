package router

import (
	"fmt"
	"testing"
	"time"
)

// ejectAndReturn ejects replica i of b (consecutive failures) and returns it
// through a successful probe once its ejection time is over.
func ejectAndReturn(t *testing.T, b *Balancer, clk interface{ Advance(time.Duration) }, i int) {
	t.Helper()
	for range DefaultEjectConsecutiveFailures {
		b.ObserveOutcome(i, true, "status 500")
	}
	if !b.Ejected(i) {
		t.Fatalf("replica %d not ejected", i)
	}
	clk.Advance(DefaultEjectBaseTime)
	if due := b.DueProbes(); len(due) != 1 || due[0] != i {
		t.Fatalf("due probes %v, want [%d]", due, i)
	}
	b.EndProbe(i, true, "")
}

// Regression: a replica back from ejection (no conversation left, nothing in
// flight) took 7 of the next 8 new conversations at once. With the slow start
// it takes at most its ramped share; once the window is over, its fair share.
func TestReturnedReplicaSlowStarts(t *testing.T) {
	b, clk := newTestBalancer(t, 4, true, nil)
	ejectAndReturn(t, b, clk, 3)
	// Live conversations of 10,000 tokens on the other three, none on the
	// returned replica (its conversations re-homed while it was out).
	turn := func(key string, tokens int) Decision {
		d, err := b.Acquire(Facts{SessionKey: key, PromptTokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		b.ReleaseSession(d.Replica, key)
		return d
	}
	b.SetHealthy(3, false)
	for i := range 6 {
		turn(fmt.Sprint("busy-", i), 10_000)
	}
	b.SetHealthy(3, true)
	// Eight new conversations, one after the other: by the live working set
	// the returned replica wins every placement.
	taken := 0
	for i := range 8 {
		if d := turn(fmt.Sprint("new-", i), 2_000); d.Replica == 3 {
			taken++
		}
	}
	if taken > 1 {
		t.Errorf("the returned replica took %d of 8 new conversations at once, want at most 1 (slow start)", taken)
	}
	// Past the window it is an ordinary replica again: with the busy
	// conversations' next turns in flight on the others, the next new
	// conversation goes to it.
	clk.Advance(DefaultSlowStartWindow)
	for i := range 6 {
		if d := mustAcquire(t, b, fmt.Sprint("busy-", i)); d.Replica == 3 {
			t.Fatalf("busy-%d moved to 3", i)
		}
	}
	if d := mustAcquire(t, b, "after"); d.Replica != 3 {
		t.Errorf("after the slow start window a new conversation went to %d, want the least loaded 3", d.Replica)
	}
}

// Turned off (negative window) the returned replica is placed on at once.
func TestSlowStartOff(t *testing.T) {
	b, clk := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Outlier.SlowStart = -1 })
	for i := range 8 {
		mustAcquire(t, b, fmt.Sprint("busy-", i))
	}
	ejectAndReturn(t, b, clk, 3)
	if d := mustAcquire(t, b, "new"); d.Replica != 3 {
		t.Errorf("without slow start a new conversation went to %d, want the idle returned 3", d.Replica)
	}
}
