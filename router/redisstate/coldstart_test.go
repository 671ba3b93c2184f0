package redisstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/router"
)

// The cold-start burst of router/coldstart_test.go through two routers on one
// redis-server: 24 conversations of ~11k tokens (a 1,000-token shared system
// prompt), 0.3 s apart of the routers' clock, 6 turns of +600 tokens each, on
// 4 replicas of 43,440 KV tokens (the default A4000 profile's capacity),
// nothing ended yet. Both routers' gates are sampled every millisecond: no
// replica's counted working set may exceed its KV capacity on either, and
// nothing is refused. Run with each conversation pinned to one router and
// with its turns alternating between them. The old rule counted a running
// conversation at its size now until 8 had ended, and both routers let four
// onto a replica where three fit at their peaks.
func TestAdmissionColdStartBurstTwoRouters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route func(conv, turn int) int
	}{
		{"pinned", func(conv, _ int) int { return conv % 2 }},
		{"alternating", func(conv, turn int) int { return (conv + turn) % 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) { coldBurst(t, tc.route) })
	}
}

func coldBurst(t *testing.T, route func(conv, turn int) int) {
	const (
		speed  = 20 // the routers' clock runs 20x the wall's
		kv     = 43_440
		system = 1_000
		perTrn = 600
		turns  = 6
		apart  = 300 * time.Millisecond / speed
		turnT  = 1500 * time.Millisecond / speed // a turn's service time
		pause  = 200 * time.Millisecond / speed  // the client's pause between turns
	)
	srv := testredis.Start(t)
	cfg := func(c *router.BalancerConfig) {
		c.KVCapacityTokens = kv
		c.Admission = router.AdmissionConfig{Mode: router.AdmissionFit, FillTarget: 1, OnLimit: router.AdmitLimitRefuse}
		start := time.Now()
		c.Now = func() time.Duration { return speed * time.Since(start) }
	}
	nodes := []*node{
		newNodeWith(t, srv.URL(), testKeys, Options{ClockSpeed: speed}, cfg),
		newNodeWith(t, srv.URL(), testKeys, Options{ClockSpeed: speed}, cfg),
	}
	var (
		mu      sync.Mutex
		seen    = map[int]bool{} // replicas that have read the system prompt
		samples int
		worst   float64
		over    []string
	)
	ctx, stop := context.WithCancel(context.Background())
	var swg sync.WaitGroup
	swg.Go(func() {
		for ctx.Err() == nil {
			for k, n := range nodes {
				st := n.b.Admission()
				mu.Lock()
				samples++
				for i, ws := range st.WorkingTokens {
					worst = max(worst, float64(ws)/kv)
					if ws > kv && len(over) < 8 {
						over = append(over, fmt.Sprintf("router %d: replica %d counts %d conversations, %d tokens > KV %d", k, i, st.Counted[i], ws, kv))
					}
				}
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	})
	var wg sync.WaitGroup
	for c := range 24 {
		wg.Go(func() {
			key := fmt.Sprint("c", c)
			first := 10_600 + 20*(c%11)
			time.Sleep(time.Duration(c) * apart)
			for turn := range turns {
				n := nodes[route(c, turn)]
				p := first + turn*perTrn
				var ticket uint64
				for {
					d, info, err := n.b.Admit(router.Facts{SessionKey: key, PromptTokens: p, Ticket: ticket, Continuing: turn > 0})
					if errors.Is(err, router.ErrHold) {
						ticket = info.Ticket
						time.Sleep(router.HoldPoll / speed)
						continue
					}
					if err != nil {
						t.Errorf("%s turn %d: %v", key, turn, err)
						return
					}
					time.Sleep(turnT)
					mu.Lock()
					cached := 0
					switch {
					case turn > 0:
						cached = p - perTrn
					case seen[d.Replica]:
						cached = system
					}
					seen[d.Replica] = true
					mu.Unlock()
					n.b.ObserveCache(key, d.Replica, p, cached)
					n.b.ReleaseSession(d.Replica, key)
					break
				}
				time.Sleep(pause)
			}
		})
	}
	wg.Wait()
	stop()
	swg.Wait()
	held := 0
	for k, n := range nodes {
		st := n.b.Admission()
		held += int(st.Outcomes.AfterHold)
		t.Logf("router %d: S %d, E %d (%s), M %d, outcomes %+v", k, st.SharedPrefixTokens, st.ExpectedContextTokens, st.ExpectedSource, st.RunningPeakTokens, st.Outcomes)
		if st.Outcomes.Refused+st.Outcomes.AtLimit != 0 {
			t.Errorf("router %d: %d refused, %d at the limit; want none within max_hold", k, st.Outcomes.Refused, st.Outcomes.AtLimit)
		}
	}
	t.Logf("%d samples, largest counted working set %.3f x KV, %d admitted after a hold", samples, worst, held)
	for _, o := range over {
		t.Errorf("over KV: %s", o)
	}
	if held == 0 {
		t.Errorf("nothing was held: 24 conversations where 12 fit, the test tested nothing")
	}
}
