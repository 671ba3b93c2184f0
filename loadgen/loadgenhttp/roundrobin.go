package loadgenhttp

import (
	"context"
	"sync/atomic"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/loadgen"
)

// RoundRobin sends each turn through the next of Clients in turn, as clients
// behind an L4 balancer in front of several routers do (RunConfig.BaseURLs):
// consecutive turns of one conversation go through different routers.
type RoundRobin struct {
	Clients []Client // at least one
	next    atomic.Uint64
}

// Do sends the turn through the next client.
func (r *RoundRobin) Do(ctx context.Context, tr loadgen.TurnRequest, clock simclock.Clock) (loadgen.Result, string) {
	i := r.next.Add(1) - 1
	return r.Clients[i%uint64(len(r.Clients))].Do(ctx, tr, clock)
}
