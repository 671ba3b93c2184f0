package redisstate

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/router"
)

// A drain set through router A keeps router B's new conversations off the
// replica even before B's heartbeat has read it (the claim script drops a
// draining candidate), every router sees it within a heartbeat, a
// conversation B homed there moves at its next request (drain-move), and an
// undrain reaches every router too.
func TestDrainSeenByEveryRouter(t *testing.T) {
	srv := testredis.Start(t)
	a := newNode(t, srv.URL(), testKeys, Options{})
	// B's heartbeat never comes during the test: only the claim keeps it off.
	b := newNode(t, srv.URL(), reversed(testKeys), Options{Heartbeat: time.Hour})
	c := newNode(t, srv.URL(), reversed(testKeys), Options{})
	const drained = "http://b:1"
	ai, ci := slices.Index(a.keys, drained), slices.Index(c.keys, drained)
	// A conversation homed on the replica through C, before the drain.
	var homed string
	for s := 0; homed == ""; s++ {
		if s > 200 {
			t.Fatal("no conversation placed on the replica")
		}
		k := fmt.Sprint("before-", s)
		d, err := c.b.Acquire(router.Facts{SessionKey: k, PromptTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		c.b.Release(d.Replica)
		if d.Replica == ci {
			homed = k
		}
	}
	if _, ok := a.b.SetDrain(ai, router.DrainMove); !ok {
		t.Fatal("the drain was not written")
	}
	if b.b.Drain(slices.Index(b.keys, drained)) != router.DrainNone {
		t.Fatal("test setup: router B read the drain already")
	}
	for s := range 40 {
		k := fmt.Sprint("new-", s)
		d, err := b.b.Acquire(router.Facts{SessionKey: k, PromptTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		if b.name(d.Replica) == drained {
			t.Fatalf("router B placed conversation %s on the draining replica (%v)", k, d.Reason)
		}
		if s%2 == 0 {
			b.b.Release(d.Replica)
		}
	}
	waitFor(t, 2*time.Second, "router C sees the drain", func() bool { return c.b.Drain(ci) == router.DrainMove })
	if st := c.b.Status()[ci]; st.Draining != "move" {
		t.Errorf("router C's status: draining %q, want move", st.Draining)
	}
	d, err := c.b.Acquire(router.Facts{SessionKey: homed, PromptTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	c.b.Release(d.Replica)
	if d.Replica == ci || d.Reason != router.ReasonDrainMove {
		t.Errorf("the conversation homed there: %s (%v), want another replica, drain-move", c.name(d.Replica), d.Reason)
	}
	// A reads the move's home from the store: sticky on the new replica.
	if d2, _ := a.b.Acquire(router.Facts{SessionKey: homed, PromptTokens: 100}); a.name(d2.Replica) != c.name(d.Replica) {
		t.Errorf("router A sends the moved conversation to %s, want %s", a.name(d2.Replica), c.name(d.Replica))
	}
	if _, ok := a.b.SetDrain(ai, router.DrainNone); !ok {
		t.Fatal("the undrain was not written")
	}
	waitFor(t, 2*time.Second, "router C sees the undrain", func() bool { return c.b.Drain(ci) == router.DrainNone })
	raw := rawClient(t, srv.Addr)
	if n, _ := raw.Do(context.Background(), raw.B().Exists().Key(DefaultPrefix+"d:m").Build()).AsInt64(); n != 0 {
		t.Errorf("the drain hash still exists after the last undrain")
	}
}

// A drain set while Redis cannot be reached holds on this router at once and
// is written by the first heartbeat that reaches it (a config drain at start).
func TestDrainWrittenWhenStoreAnswers(t *testing.T) {
	srv := testredis.Start(t)
	a := newNodeNoWait(t, srv.URL(), testKeys, Options{})
	// Set before the store may have connected: either way it must land.
	a.b.SetDrain(1, router.DrainFinish)
	if a.b.Drain(1) != router.DrainFinish {
		t.Fatal("the drain does not hold locally at once")
	}
	c := newNode(t, srv.URL(), testKeys, Options{})
	waitFor(t, 3*time.Second, "the other router sees the drain", func() bool { return c.b.Drain(1) == router.DrainFinish })
}
