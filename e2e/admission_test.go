package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/loadgenhttp"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// TestClaudeCodeHeldAtAdmission runs the real Claude Code CLI through a router
// whose admission gate holds its new conversation: with a fill target no
// conversation fits, the CLI's first request waits at the router for at least
// 10 s of wall time; then the fill target is raised and the request, admitted
// at its next ask, completes normally. Claude Code gives up after 5 minutes
// without a byte (docs/router.md section 4). "silent": keepalive_after negative, no
// byte while held (a hold under 5 minutes is invisible to it but for the wait).
// "kept alive": keepalive_after 2 s of the router's clock (the simulator's, at
// 10x), so the 12 s of wall time are 120 s held and the CLI gets the committed
// 200 and Anthropic ping events (every 15 s of that clock) before its answer.
func TestClaudeCodeHeldAtAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Claude Code test in -short mode")
	}
	bin, version := claudeCLI(t)
	t.Logf("Claude Code %s at %s", version, bin)
	for _, tc := range []struct {
		name           string
		keepAliveAfter time.Duration
		minPings       int // 0: want none
	}{
		{"silent", -1, 0},
		{"kept alive", 2 * time.Second, 5}, // a ping at 2 s, then every 15 s of 120 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, simhttp.Config{Replicas: 1, Speed: 10, Model: claudeModel}, 32)
			waitCapacity(t, f)
			b := f.rt.Pools()[0].Balancer
			const hold = 12 * time.Second
			released := holdThenRelease(t, b, tc.keepAliveAfter, hold)
			home, work := t.TempDir(), t.TempDir()
			start := time.Now()
			out := runClaude(t, bin, home, work, f.url, "-p", "say hi", "--model", claudeModel)
			took := time.Since(start)
			if <-released == 0 {
				t.Fatal("the CLI's request was never held")
			}
			if strings.TrimSpace(out) == "" {
				t.Errorf("the CLI printed nothing")
			}
			if took < hold {
				t.Errorf("the CLI finished in %v, under the %v hold", took, hold)
			}
			pings := 0
			for _, r := range f.log.all() {
				t.Logf("request: %s", r)
				if r.Status != 200 {
					t.Errorf("request %s: status %d", r.Path, r.Status)
				}
				pings += r.KeepAlives
			}
			if tc.minPings == 0 && pings != 0 {
				t.Errorf("the CLI got %d keep-alives, want none (keepalive_after %v)", pings, tc.keepAliveAfter)
			}
			if pings < tc.minPings {
				t.Errorf("the CLI got %d ping events before its answer, want at least %d", pings, tc.minPings)
			}
			st := b.Admission()
			t.Logf("admission: %+v", st.Outcomes)
			if st.Outcomes.AfterHold == 0 || st.Queue != 0 || st.Outcomes.GaveUp != 0 {
				t.Errorf("want a request admitted after its hold, none waiting, none gave up: %+v, queue %d", st.Outcomes, st.Queue)
			}
		})
	}
}

// waitCapacity waits until f's router has scraped its replica's KV capacity.
func waitCapacity(t *testing.T, f *fleet) {
	t.Helper()
	if !waitFor(10*time.Second, func() bool {
		r := f.rt.Status().Models[0].Replicas[0]
		return r.ScrapeFresh && r.KVCapacityTokens > 0
	}) {
		t.Fatal("the router never learned the replica's KV capacity")
	}
}

// holdThenRelease holds the new conversations of b's model (a fill target no
// conversation fits) with keep-alive after keepAliveAfter, and once a request
// is queued releases it after hold of wall time (the normal fill target). It
// returns a channel that receives how long it held (0: nothing was queued
// within a minute).
func holdThenRelease(t *testing.T, b *router.Balancer, keepAliveAfter, hold time.Duration) <-chan time.Duration {
	t.Helper()
	if err := b.SetAdmission(router.AdmissionConfig{Mode: router.AdmissionFit, FillTarget: 0.0001, MaxHold: -1, KeepAliveAfter: keepAliveAfter}); err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Duration, 1)
	go func() {
		if !waitFor(60*time.Second, func() bool { return b.Admission().Queue > 0 }) {
			released <- 0
			return
		}
		t0 := time.Now()
		time.Sleep(hold)
		if err := b.SetAdmission(router.AdmissionConfig{Mode: router.AdmissionFit, MaxHold: -1, KeepAliveAfter: keepAliveAfter}); err != nil {
			t.Error(err)
		}
		released <- time.Since(t0)
	}()
	return released
}

// The harness through a router that keeps its held first turns alive, over
// both APIs: each turn completes, its hold and replica come
// from the trailers, and its TTFB runs to the first content token, after the
// hold (the keep-alive events before it are not tokens).
func TestHarnessThroughKeptAliveRouter(t *testing.T) {
	f := startFleet(t, simhttp.Config{Replicas: 1, Speed: 10, Model: claudeModel}, 32)
	waitCapacity(t, f)
	b := f.rt.Pools()[0].Balancer
	clock := f.sim.Clock()
	for i, api := range []string{loadgen.APIAnthropicMessages, loadgen.APIOpenAIChat} {
		released := holdThenRelease(t, b, 2*time.Second, 3*time.Second) // 30 s of the router's clock
		sc := loadgen.TinyScenario()
		sc.API, sc.Model = api, claudeModel
		tr, _ := loadgen.NewWorkload(sc).Session(int64(i)).NextTurn(0)
		r, reply := loadgenhttp.NewClient(sc, f.url, nil, nil).Do(context.Background(), tr, clock)
		if <-released == 0 {
			t.Fatalf("%s: the turn was never held", api)
		}
		if !r.OK() || reply == "" {
			t.Fatalf("%s: turn failed: status %d err %q", api, r.Status, r.Err)
		}
		t.Logf("%s: held %v, TTFB %v, headers after %v, replica %s", api, r.Held, r.TTFB(), r.Headers-r.Sent, r.Replica)
		if r.Held < 25*time.Second || r.Replica == "" {
			t.Errorf("%s: held %v replica %q, want the trailer's hold (~30 s of the router's clock) and a replica", api, r.Held, r.Replica)
		}
		if r.TTFB() < r.Held || r.Headers-r.Sent > r.Held {
			t.Errorf("%s: TTFB %v, headers after %v, hold %v: want the headers during the hold and the first token after it", api, r.TTFB(), r.Headers-r.Sent, r.Held)
		}
	}
	for _, r := range f.log.all() {
		if r.KeepAlives == 0 {
			t.Errorf("no keep-alive before the answer: %s", r)
		}
	}
}
