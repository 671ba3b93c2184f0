package virtual

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// holdFirst holds every new conversation (no home yet) until it has been held for
// hold, then places it with inner; it counts the ErrHold answers it gave.
type holdFirst struct {
	hold  time.Duration
	inner router.Policy
	holds int
}

func (h *holdFirst) Pick(now time.Duration, req router.Request, reps []router.ReplicaState) (router.Decision, error) {
	if req.Key != "" && req.Home < 0 && req.HeldFor < h.hold {
		h.holds++
		return router.Decision{}, router.ErrHold
	}
	return h.inner.Pick(now, req, reps)
}

// A turn the router holds (router.ErrHold) is asked again every HoldRetry and is
// measured from when it was first sent: its TTFB includes the hold, and nothing is
// lost (every first turn is retried until placed, later turns are not held).
func TestHeldTurnIsRetriedAndTimedFromFirstSend(t *testing.T) {
	const hold = 2 * time.Second
	sc := smokeScenario(t)
	sc.Variants = []string{"on"}
	prof, err := sim.LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	pol := &holdFirst{hold: hold, inner: router.NewWorkingSet(2, 1, router.NewShortestQueue(0))}
	var results []loadgen.Result
	m, err := Run(context.Background(), Config{
		Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: prof}, RunID: "hold",
		Balancer: router.BalancerConfig{AffinityPolicy: pol},
		OnResult: func(r loadgen.Result) { results = append(results, r) },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !m.Variants[0].Complete {
		t.Fatalf("variant incomplete: %+v", m.Variants[0])
	}
	var first, later int
	for _, r := range results {
		if !r.OK() {
			t.Errorf("turn failed: %+v", r)
			continue
		}
		if r.Turn == 0 {
			first++
			if r.TTFB() < hold {
				t.Errorf("session %d turn 0: TTFB %v, want at least the %v hold", r.Session, r.TTFB(), hold)
			}
		} else {
			later++
			if r.TTFB() >= hold {
				t.Errorf("session %d turn %d: TTFB %v; later turns are not held", r.Session, r.Turn, r.TTFB())
			}
		}
	}
	if first == 0 || later == 0 {
		t.Fatalf("first turns %d, later turns %d", first, later)
	}
	// Each placed first turn was refused hold/HoldRetry times before it went.
	if want := first * int(hold/HoldRetry); pol.holds < want {
		t.Errorf("ErrHold answers = %d, want at least %d for %d first turns", pol.holds, want, first)
	}
}

// request_timeout counts from the client's last byte: a turn held longer than
// it succeeds when the router keeps the hold alive (held at least
// keepalive_after: headers and keep-alive events), and fails when it does not.
func TestHoldKeptAliveDoesNotTimeOut(t *testing.T) {
	const hold = 3 * time.Second
	prof, err := sim.LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	for _, keepAlive := range []time.Duration{time.Second, router.NoLimitDuration} {
		sc := smokeScenario(t)
		sc.Variants = []string{"on"}
		sc.RequestTimeout = 2 * time.Second
		pol := &holdFirst{hold: hold, inner: router.NewWorkingSet(2, 1, router.NewShortestQueue(0))}
		var results []loadgen.Result
		if _, err := Run(context.Background(), Config{
			Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: prof}, RunID: "hold",
			Balancer: router.BalancerConfig{AffinityPolicy: pol, Admission: router.AdmissionConfig{KeepAliveAfter: keepAlive}},
			OnResult: func(r loadgen.Result) { results = append(results, r) },
		}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		timedOut := 0
		for _, r := range results {
			if r.Turn == 0 && strings.HasPrefix(r.Err, "timeout:") {
				timedOut++
			}
		}
		if keepAlive > 0 && timedOut > 0 {
			t.Errorf("kept alive after %v: %d held first turns timed out", keepAlive, timedOut)
		}
		if keepAlive < 0 && timedOut == 0 {
			t.Errorf("never kept alive: no held first turn timed out after %v", sc.RequestTimeout)
		}
	}
}
