package simhttp

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmdp"
	"github.com/lmwarden/warden/sim"
)

// dpBalancer is vLLM's internal data-parallel load balancer as in current main
// (vllm/v1/engine/core_client.py, DPLBAsyncMPClient.get_core_engine_for_request),
// scoring with vllmdp.Score:
//
//	score_i = max(apiServers*inflight_i, waiting_i + running_i)
//	        + waiting_i * 6 * max(0, kv_usage_i - 0.5)   when waiting_i > 0
//
// the lowest score wins, scanning from a start index that rotates by one after every
// decision (so ties spread out). waiting/running/kv_usage come from a snapshot that the
// DP coordinator publishes at most every 100 ms while stats change
// (vllm/v1/engine/coordinator.py, min_stats_update_interval_ms); a request sent changes
// its rank's stats, so the simulator refreshes every interval regardless. Between
// snapshots the balancer adds +1 to the chosen rank's waiting count per request it
// sends. inflight_i is the API server's own exact count of requests on rank i. With
// one API server, apiServers is 1. The formula is as given in the project's vLLM brief
// (current main); older releases used waiting*4 + running with a fixed scan start.
type dpBalancer struct {
	apiServers int

	mu       sync.Mutex
	start    int
	snap     []rankLoad
	inflight []int
}

// rankLoad is one rank's entry in the balancer's snapshot.
type rankLoad struct {
	waiting, running int
	kvUsage          float64
}

func newDPBalancer(n int) *dpBalancer {
	return &dpBalancer{apiServers: 1, snap: make([]rankLoad, n), inflight: make([]int, n)}
}

// score is the balancer's cost of sending one more request to a rank.
func (b *dpBalancer) score(i int) float64 {
	l := b.snap[i]
	return vllmdp.Score(b.apiServers*b.inflight[i], l.waiting, l.running, l.kvUsage)
}

// pick chooses a rank for a new request and counts it in flight there.
func (b *dpBalancer) pick() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.snap)
	best, bestScore := 0, math.Inf(1)
	for k := 0; k < n; k++ {
		i := (b.start + k) % n
		if s := b.score(i); s < bestScore {
			best, bestScore = i, s
		}
	}
	b.start = (b.start + 1) % n
	b.snap[best].waiting++ // optimistic, until the next snapshot
	b.inflight[best]++
	return best
}

// pin counts a request pinned to rank i (X-data-parallel-rank) in flight.
func (b *dpBalancer) pin(i int) {
	b.mu.Lock()
	b.inflight[i]++
	b.mu.Unlock()
}

// release ends one in-flight request on rank i.
func (b *dpBalancer) release(i int) {
	b.mu.Lock()
	if b.inflight[i] > 0 {
		b.inflight[i]--
	}
	b.mu.Unlock()
}

// refresh replaces the snapshot with the engines' current stats.
func (b *dpBalancer) refresh(stats []sim.Stats) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range stats {
		b.snap[i] = rankLoad{waiting: s.Waiting, running: s.Running, kvUsage: s.KVUsage}
	}
}

// runSnapshots refreshes the balancer every interval of simulated time until ctx is
// done. Missed ticks (a late wakeup) are skipped, not replayed.
func (b *dpBalancer) runSnapshots(ctx context.Context, clock *simclock.Scaled, interval time.Duration, engines []*Engine) {
	stats := make([]sim.Stats, len(engines))
	read := func() {
		for i, e := range engines {
			stats[i] = e.Stats()
		}
		b.refresh(stats)
	}
	read()
	next := clock.Now()
	for {
		next += interval
		if now := clock.Now(); next <= now {
			next = (now/interval + 1) * interval
		}
		if err := clock.SleepUntil(ctx, next); err != nil {
			return
		}
		read()
	}
}
