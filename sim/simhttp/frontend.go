package simhttp

import (
	"sync"
	"time"

	"github.com/lmwarden/warden/sim"
)

// frontend is a sim.Frontend shared by the handlers and engine goroutines of one
// or more servers (Config.APIServers).
type frontend struct {
	mu sync.Mutex
	fe *sim.Frontend
}

func newFrontend(costs sim.FrontendCosts, processes int) *frontend {
	return &frontend{fe: sim.NewFrontend(costs, processes)}
}

// admit is sim.Frontend.Admit under the lock.
func (f *frontend) admit(now time.Duration, promptTokens int) (int, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fe.Admit(now, promptTokens)
}

// emit is sim.Frontend.Emit for every process with events in one step, under the
// lock: tokens[p] output tokens (seen[p]: any event) for process p's requests.
// It returns, per process, the instant the step's outputs are written.
func (f *frontend) emit(now time.Duration, tokens []int, seen []bool, out []time.Duration) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out = append(out[:0], make([]time.Duration, len(tokens))...)
	for p := range tokens {
		if seen[p] {
			out[p] = f.fe.Emit(p, now, tokens[p])
		}
	}
	return out
}

// processes returns the number of API-server processes.
func (f *frontend) processes() int { return f.fe.Processes() }
