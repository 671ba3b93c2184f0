package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

// A stream of one-request session ids (at least 3x the table's bound) while 64
// conversations keep running: every one-shot id is served, and no conversation
// with two or more requests loses its home (ai-dynamo/dynamo#14570).
func TestSessionIDFloodKeepsLiveConversationsHomed(t *testing.T) {
	const bound, convs, turns = 1000, 64, 6
	b, clk := newTestBalancer(t, 4, true, func(c *BalancerConfig) {
		c.MaxSessions = bound
		c.Policy = PolicySticky
	})
	home := map[string]int{}
	flood := 0
	for turn := range turns {
		for c := range convs {
			key := fmt.Sprintf("conv-%d", c)
			d := mustAcquire(t, b, key)
			b.Release(d.Replica)
			if turn == 0 {
				home[key] = d.Replica
			} else if d.Replica != home[key] || d.Reason != ReasonSticky {
				t.Fatalf("turn %d of %s: replica %d (%s), want its home %d sticky", turn, key, d.Replica, d.Reason, home[key])
			}
			clk.Advance(10 * time.Millisecond)
		}
		if turn == 0 {
			continue // each conversation's second request: off probation
		}
		// Between two later turns of every conversation, more one-shot ids
		// than the table holds (1.5x the bound), 6x the bound over the run.
		for range bound + bound/2 {
			d := mustAcquire(t, b, fmt.Sprintf("oneshot-%d", flood))
			b.Release(d.Replica)
			flood++
			clk.Advance(time.Millisecond)
		}
	}
	if flood < 3*bound {
		t.Fatalf("sent %d one-shot ids, want at least %d", flood, 3*bound)
	}
	if n := b.sessions.Len(); n > bound {
		t.Errorf("session table holds %d entries, bound %d", n, bound)
	}
}

// Past the bound with nothing on probation the least recently used session goes,
// as before.
func TestSessionTableEvictsLRUWhenNoneOnProbation(t *testing.T) {
	clk := &simclock.Manual{}
	tab := NewSessionTable(clk.Now, time.Hour, 2, time.Minute)
	tab.set(clk.Now(), 1, 0)
	tab.lookup(clk.Now(), 1, false) // two requests: off probation
	clk.Advance(time.Second)
	tab.set(clk.Now(), 2, 1)
	tab.lookup(clk.Now(), 2, false)
	clk.Advance(time.Second)
	tab.set(clk.Now(), 3, 0) // full: 1 is least recently used
	if _, ok := tab.index[1]; ok {
		t.Error("least recently used session 1 kept at the bound")
	}
	if _, ok := tab.index[2]; !ok {
		t.Error("session 2 evicted, want 1 (least recently used)")
	}
}
