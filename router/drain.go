package router

import (
	"fmt"
	"time"
)

// DrainMode is a replica's drain (docs/router.md, "Draining a replica"): an
// operator takes it out of placement before stopping it, and watches its
// in-flight count reach zero. Requests already in flight are never cut.
type DrainMode uint8

const (
	// DrainNone: not draining.
	DrainNone DrainMode = iota
	// DrainMove: no new conversation is placed there, and a conversation homed
	// there moves for good at its next request (ReasonDrainMove), to a replica
	// that does not hold its prefix: its next prefill is cold.
	DrainMove
	// DrainFinish: no new conversation is placed there; the conversations
	// homed there stay until they end (their TTL), so none loses its cache.
	DrainFinish
)

// DrainModes lists the names ParseDrainMode accepts.
var DrainModes = [...]string{"move", "finish"}

// String returns the mode's name: "move", "finish", "" for DrainNone.
func (m DrainMode) String() string {
	switch m {
	case DrainMove:
		return "move"
	case DrainFinish:
		return "finish"
	}
	return ""
}

// ParseDrainMode reads "move" or "finish"; anything else is an error naming
// both.
func ParseDrainMode(s string) (DrainMode, error) {
	switch s {
	case "move":
		return DrainMove, nil
	case "finish":
		return DrainFinish, nil
	}
	return DrainNone, fmt.Errorf("drain mode %q is unknown (have move, finish)", s)
}

// SetDrain puts replica i in drain mode m (DrainNone ends a drain). With
// BalancerConfig.Shared the drain is written to the shared state, so every
// router sharing it sees it (the store's drains are the ones in force then);
// wait is the time the write took and ok false when the store did not answer
// (the drain holds on this router at once and the store gets it when it
// answers). Ignored for an unknown replica (ok false).
func (b *Balancer) SetDrain(i int, m DrainMode) (wait time.Duration, ok bool) {
	b.mu.Lock()
	if i < 0 || i >= len(b.reps) {
		b.mu.Unlock()
		return 0, false
	}
	b.sync(b.now())
	b.reps[i].drain = m
	b.mu.Unlock()
	if b.shared == nil {
		return 0, true
	}
	return b.shared.SetDrain(i, m)
}

// startDrains puts the replicas in the drain modes of BalancerConfig.Drains
// (NewBalancer), told to the shared state too.
func (b *Balancer) startDrains(modes []DrainMode) {
	for i, m := range modes {
		if i < len(b.reps) && m != DrainNone {
			b.reps[i].drain = m
			if b.shared != nil {
				b.shared.SetDrain(i, m)
			}
		}
	}
}

// Drain returns replica i's drain mode in force (the shared state's with
// BalancerConfig.Shared).
func (b *Balancer) Drain(i int) DrainMode {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) {
		return DrainNone
	}
	return b.drainOf(i)
}

// drainOf is replica i's drain mode in force (caller holds mu).
func (b *Balancer) drainOf(i int) DrainMode {
	if b.shared != nil {
		return b.shared.Drain(i)
	}
	return b.reps[i].drain
}

// draining reports whether a decision has a drain to apply: some replica is
// draining (caller holds mu).
func (b *Balancer) draining(x *decision) bool {
	if x.final {
		return false
	}
	for i := range b.reps {
		if b.drainOf(i) != DrainNone {
			return true
		}
	}
	return false
}

// stepDrain keeps the draining replicas out of this decision's view, so no
// step after it places a request there: a new conversation, a keyless
// request, an overflow, a subagent's first call or a request with affinity
// off. The one exception is a conversation's own home draining in finish
// mode: it stays in the view for that conversation. A conversation whose home
// drains in move mode finds its home gone from the view, so the policy
// re-homes it and recordSessionDecision names the move ReasonDrainMove. When
// every healthy replica in the view is draining the view is left as it is (a
// drain never fails a request: the operator drained the whole pool).
func (b *Balancer) stepDrain(x *decision) error {
	home := -1
	if b.affinity && x.f.SessionKey != "" {
		home = b.sessions.home(x.h)
	}
	keep := 0
	for i := range b.view {
		if !b.view[i].Healthy {
			continue
		}
		if m := b.drainOf(i); m == DrainNone || (m == DrainFinish && i == home) {
			keep++
		}
	}
	if keep == 0 {
		return nil
	}
	for i := range b.view {
		m := b.drainOf(i)
		if m == DrainNone || !b.view[i].Healthy || (m == DrainFinish && i == home) {
			continue
		}
		b.view[i].Healthy = false
		if i == home {
			x.drained = home
		}
	}
	return nil
}
