package router

import (
	"time"
)

// admConv is one conversation the gate counts.
type admConv struct {
	sid      uint64 // SessionID: the id other routers know it by
	replica  int
	ctx      int64 // context estimate, tokens
	peak     int64 // largest ctx seen
	first    int64 // its first prompt (the prior's base), 0 unknown
	inflight int
	lastEnd  time.Duration
	requests int
	counted  bool
	// firstDone: the cached tokens of its first request were sampled (or it had
	// none to sample).
	firstDone bool
	// trueFirst (shared state): its request in flight is the conversation's
	// first placement in the store with no assistant message, a sample of S.
	trueFirst bool
	// parent: the hash of the conversation this subagent is a child of (0:
	// none); kids: its own children counted now (admission_tree.go).
	parent uint64
	kids   int
}

type idleMark struct {
	h  uint64
	at time.Duration
}

type endedSample struct {
	peak int64
	at   time.Duration
}

// expire drops conversations idle past the idle window (at most liveWin) and
// tickets not presented within TicketTTL.
func (a *admission) expire(now, liveWin time.Duration) {
	win := a.idleWindow(liveWin)
	k := 0
	for k < len(a.idleQ) && now-a.idleQ[k].at > win {
		m := a.idleQ[k]
		k++
		c := a.convs[m.h]
		if c == nil || c.inflight > 0 || c.lastEnd != m.at || c.kids > 0 {
			continue // a parent waits for its subagents: childEnded marks it again
		}
		a.uncount(c)
		a.endQ = append(a.endQ, m)
	}
	if k > 0 {
		a.idleQ = append(a.idleQ[:0], a.idleQ[k:]...)
	}
	// A conversation no longer counted is kept until the live window has
	// passed, so that one that comes back records its real gap (a gap longer
	// than the idle window would otherwise never be seen, and the window would
	// never learn it); only then is it taken as ended.
	k = 0
	for k < len(a.endQ) && now-a.endQ[k].at > max(liveWin, win) {
		m := a.endQ[k]
		k++
		c := a.convs[m.h]
		if c == nil || c.inflight > 0 || c.counted || c.lastEnd != m.at {
			continue
		}
		if c.parent == 0 {
			a.ended.add(endedSample{peak: c.peak, at: now})
			a.endedN++
		}
		delete(a.convs, m.h)
	}
	if k > 0 {
		a.endQ = append(a.endQ[:0], a.endQ[k:]...)
	}
	for i := 0; i < len(a.queue); {
		t := a.queue[i]
		if now-t.polled > TicketTTL {
			a.drop(i)
			a.out.GaveUp++
			continue
		}
		i++
	}
}

func (a *admission) uncount(c *admConv) {
	if !c.counted {
		return
	}
	c.counted = false
	a.kidsOf(c, -1)
}

func (a *admission) count(c *admConv) {
	if c.counted {
		return
	}
	c.counted = true
	a.kidsOf(c, 1)
}

// routed records a routed request of the session with hash h (a new
// conversation admitted, or one that passed) on decision d; parent is the hash
// of the conversation it is a subagent of (0 none), ctx its context estimate
// (the policy's Request.PromptTokens), side whether it was a side request.
func (a *admission) routed(now time.Duration, h, parent, sid uint64, d Decision, ctx int, side bool, g gateResult) {
	switch g.outcome {
	case AdmitAdmitted:
		a.out.Admitted++
	case AdmitHeld:
		a.out.AfterHold++
		a.out.HeldSecondsSum += g.held.Seconds()
	case AdmitLimit:
		a.out.AtLimit++
		a.out.HeldSecondsSum += g.held.Seconds()
	}
	c := a.convs[h]
	if c == nil {
		c = &admConv{replica: d.Replica, sid: sid, parent: parent}
		a.convs[h] = c
	} else if c.inflight == 0 && c.lastEnd > 0 && !side {
		a.recordGap(now - c.lastEnd)
	}
	if d.Reason != ReasonOverflow && d.Replica != c.replica {
		a.uncount(c)
		c.replica = d.Replica
	}
	if !side && ctx > 0 {
		c.ctx = int64(ctx)
		c.peak = max(c.peak, c.ctx)
		if c.first == 0 && c.requests == 0 && g.outcome != AdmitPass {
			c.first = c.ctx // its first turn, through this gate
		}
	}
	a.count(c)
	c.inflight++
	if !side {
		c.requests++
	}
}

// pend stops counting the conversation with hash h while the shared store
// decides where it goes (a placement or move with a reservation): counted on
// the policy's pick meanwhile, it showed on a replica the store did not choose
// (/status of two routers: 4 conversations where 3 fit, for the claim's round
// trip). The store's reservation counts it for every router until confirm.
func (a *admission) pend(h uint64) {
	if c := a.convs[h]; c != nil {
		a.uncount(c)
	}
}

// confirm counts the conversation with hash h on replica i, where the store
// placed it (after pend).
func (a *admission) confirm(h uint64, i int) {
	if c := a.convs[h]; c != nil {
		a.uncount(c)
		c.replica = i
		a.count(c)
	}
}

// rehome counts the conversation with hash h on replica i (the shared store
// chose another replica than the policy, or kept its home).
func (a *admission) rehome(h uint64, i int) {
	c := a.convs[h]
	if c == nil || c.replica == i {
		return
	}
	was := c.counted
	a.uncount(c)
	c.replica = i
	if was {
		a.count(c)
	}
}

// released ends one request of the session with hash h.
func (a *admission) released(now time.Duration, h uint64) {
	c := a.convs[h]
	if c == nil || c.inflight == 0 {
		return
	}
	c.inflight--
	if c.inflight == 0 {
		c.lastEnd = now
		a.idleQ = append(a.idleQ, idleMark{h: h, at: now})
		a.childEnded(c, now)
	}
}

// observeCache samples S from a conversation's first request: the cached
// tokens of a new conversation's first turn are the prefix it shares with the
// conversations before it. With shared state only a true first turn is a
// sample (admConv.trueFirst: a router that first sees a conversation at its
// turn 2 would sample the whole turn 1); it reports whether it sampled.
func (a *admission) observeCache(h uint64, prompt, cached int) bool {
	c := a.convs[h]
	if c == nil || c.firstDone {
		return false
	}
	c.firstDone = true
	if c.requests != 1 || prompt <= 0 || c.parent != 0 || (a.shared && !c.trueFirst) {
		return false
	}
	a.prefix.add(cached)
	return true
}

func (a *admission) recordGap(g time.Duration) {
	if !a.gaps.add(g) {
		return
	}
	if d, ok := a.gaps.window(); ok {
		a.idleWin = d
	}
}
