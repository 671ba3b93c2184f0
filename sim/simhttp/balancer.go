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
// with one API server: each rank is scored by vllmdp.Rank.Score,
//
//	score_i = max(inflight_i, waiting_i + running_i)
//	        + waiting_i * 6 * max(0, kv_usage_i - 0.5)   when waiting_i > 0
//
// the lowest score wins, scanning from a start index that rotates by one after every
// decision (so ties spread out). waiting/running/kv_usage come from a snapshot that the
// DP coordinator publishes at most every 100 ms while stats change
// (vllm/v1/engine/coordinator.py, min_stats_update_interval_ms); a request sent changes
// its rank's stats, so the simulator refreshes every interval regardless. A request
// sent adds one to the chosen rank's waiting count until the next snapshot and to its
// in-flight count until it ends (vllmdp.Rank.Sent); inflight_i is the API server's own
// exact count of requests on rank i, pinned ones included. The formula is current
// main's (core_client.py above); older releases used waiting*4 + running with
// a fixed scan start.
type dpBalancer struct {
	mu    sync.Mutex
	start int
	ranks []vllmdp.Rank // InFlight exact; Waiting, Running, KVUsage the snapshot
}

func newDPBalancer(n int) *dpBalancer {
	return &dpBalancer{ranks: make([]vllmdp.Rank, n)}
}

// pick chooses a rank for a new request and counts it in flight there.
func (b *dpBalancer) pick() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.ranks)
	best, bestScore := 0, math.Inf(1)
	for k := 0; k < n; k++ {
		i := (b.start + k) % n
		if s := b.ranks[i].Score(); s < bestScore {
			best, bestScore = i, s
		}
	}
	b.start = (b.start + 1) % n
	b.ranks[best].Sent()
	return best
}

// pin counts a request pinned to rank i (X-data-parallel-rank) in flight.
func (b *dpBalancer) pin(i int) {
	b.mu.Lock()
	b.ranks[i].InFlight++
	b.mu.Unlock()
}

// release ends one in-flight request on rank i.
func (b *dpBalancer) release(i int) {
	b.mu.Lock()
	if b.ranks[i].InFlight > 0 {
		b.ranks[i].InFlight--
	}
	b.mu.Unlock()
}

// refresh replaces the snapshot with the engines' current stats; the in-flight
// counts are the balancer's own and stay.
func (b *dpBalancer) refresh(stats []sim.Stats) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range stats {
		r := &b.ranks[i]
		r.Waiting, r.Running, r.KVUsage = s.Waiting, s.Running, s.KVUsage
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
