package router

import (
	"fmt"
	"slices"
	"time"
)

// ticket is one waiter in the queue.
type ticket struct {
	id     uint64
	issued time.Duration
	polled time.Duration
}

// admission is the gate's state; guarded by the Balancer's lock.
type admission struct {
	cfg AdmissionConfig // defaults resolved

	convs map[uint64]*admConv
	// idleQ: conversations whose last request ended, in order of the end, to
	// stop counting after the idle window; endQ: those no longer counted, to
	// forget (and sample as ended) after the live window.
	idleQ []idleMark
	endQ  []idleMark

	queue   []*ticket
	tickets map[uint64]*ticket
	nextID  uint64

	ended  ring[endedSample]
	endedN int // conversations seen to end in all

	prefix ring[int]

	gaps    gapWindow // end -> next request gaps -> idleWin
	idleWin time.Duration

	// shared: the Balancer shares state with other routers (BalancerConfig.Shared);
	// remote: what the store said at the last decision (nil: it did not
	// answer), whose S and idle window, learned from every router's
	// conversations, stand in for this gate's own while the store answers.
	shared bool
	remote *RemoteAdmission

	out AdmissionOutcomes
}

func newAdmission(cfg AdmissionConfig) *admission {
	a := &admission{convs: map[uint64]*admConv{}, tickets: map[uint64]*ticket{},
		ended:  newRing[endedSample](endedSamples),
		prefix: newRing[int](prefixSamples),
		gaps:   newGapWindow(idleSamples, minIdleGaps, idleRecompute, IdleFactor, MinIdleWindow, 0),
	}
	a.cfg = cfg.WithDefaults()
	return a
}

func (a *admission) on() bool { return a != nil && a.cfg.Mode == AdmissionFit }

// reset forgets conversations and waiters (ResetSessions); the learned
// estimates and the outcome counts stay.
func (a *admission) reset() {
	clear(a.convs)
	a.idleQ = a.idleQ[:0]
	a.endQ = a.endQ[:0]
	for _, t := range a.queue {
		delete(a.tickets, t.id)
	}
	a.queue = a.queue[:0]
}

// drop removes the i-th waiter.
func (a *admission) drop(i int) {
	delete(a.tickets, a.queue[i].id)
	a.queue = slices.Delete(a.queue, i, i+1)
}

func (a *admission) position(id uint64) int {
	if id == 0 {
		return -1
	}
	for i, t := range a.queue {
		if t.id == id {
			return i
		}
	}
	return -1
}

// gateResult is what gate decided.
type gateResult struct {
	outcome Admission
	ticket  uint64
	held    time.Duration
	tk      *ticket // the waiter an admission took off the queue (nil none)
}

// gate decides for one request of a session with hash h whose home is home
// (-1 none). For an admitted new conversation it marks the replicas without
// room unhealthy in view, so the policy picks among those with room. It returns
// ErrHold (a ticket in the result) or ErrOverloaded.
func (a *admission) gate(now time.Duration, f Facts, h uint64, home int, side bool, prompt int, view []ReplicaState, remote *RemoteAdmission) (gateResult, error) {
	if home >= 0 || side || f.Continuing || a.convs[h] != nil {
		if home >= 0 && home < len(view) && view[home].Healthy && !side {
			a.maskFull(now, a.convs[h], home, view, remote)
		}
		return gateResult{outcome: AdmitPass}, nil
	}
	pos := a.position(f.Ticket)
	var held time.Duration
	if pos >= 0 {
		held = now - a.queue[pos].issued
	}
	healthy, unknown := 0, false
	for i := range view {
		if view[i].Healthy {
			healthy++
			unknown = unknown || view[i].KVCapacityTokens <= 0
		}
	}
	if healthy == 0 {
		return gateResult{outcome: AdmitPass}, nil // the policy answers ErrNoReplica
	}
	if unknown {
		if pos >= 0 {
			a.drop(pos)
		}
		return gateResult{outcome: AdmitCapacityUnknown, held: held}, nil
	}
	x := a.estimates(now)
	p := int64(prompt)
	g := x.fresh(p)
	cnt := a.sums(x, remote, view)
	fits := 0
	for i := range view {
		if view[i].Healthy && a.room(i, &view[i], x, p, g, cnt) {
			fits++
		}
	}
	// Another router's waiter that has waited longer goes first (FIFO across
	// routers, to a poll: SharedFIFOSlack); a router whose queue is gone stops
	// publishing it within the store's key TTL.
	behind := remote != nil && remote.Waiting > 0 && remote.OldestHeld > held+SharedFIFOSlack
	if fits > 0 && !behind && (len(a.queue) == 0 || pos == 0) {
		for i := range view {
			if view[i].Healthy && !a.room(i, &view[i], x, p, g, cnt) {
				view[i].Healthy = false
			}
		}
		out := AdmitAdmitted
		var tk *ticket
		if pos >= 0 {
			tk = a.queue[pos]
			a.drop(pos)
			out = AdmitHeld
		}
		return gateResult{outcome: out, held: held, tk: tk}, nil
	}
	limit := a.cfg.MaxHold
	if f.HoldLimit > 0 && (limit < 0 || f.HoldLimit < limit) {
		limit = f.HoldLimit
	}
	over := (pos < 0 && a.cfg.MaxQueue > 0 && len(a.queue) >= a.cfg.MaxQueue) ||
		(pos >= 0 && limit > 0 && held >= limit)
	if over {
		if pos >= 0 {
			a.drop(pos)
		}
		if a.cfg.OnLimit == AdmitLimitRefuse {
			a.out.Refused++
			a.out.HeldSecondsSum += held.Seconds()
			why := fmt.Errorf("%w: %d conversations waiting, max_queue %d", ErrOverloaded, len(a.queue), a.cfg.MaxQueue)
			if pos >= 0 {
				why = fmt.Errorf("%w: held %v, max_hold %v", ErrOverloaded, held.Round(time.Millisecond), limit)
			}
			return gateResult{outcome: AdmitRefused, held: held}, why
		}
		return gateResult{outcome: AdmitLimit, held: held}, nil
	}
	if pos < 0 {
		a.nextID++
		t := &ticket{id: a.nextID, issued: now}
		a.queue = append(a.queue, t)
		a.tickets[t.id] = t
		pos = len(a.queue) - 1
	}
	a.queue[pos].polled = now
	return gateResult{outcome: AdmitWaiting, ticket: a.queue[pos].id, held: held}, ErrHold
}

// maskFull marks unhealthy in view every replica other than home (healthy)
// without room for counted conversation c, so a policy that moves or
// overflows it for load moves it only where its working set fits: a move is
// a placement of its context on the new replica, and one into a full replica
// over-admits it as surely as a new conversation would.
func (a *admission) maskFull(now time.Duration, c *admConv, home int, view []ReplicaState, remote *RemoteAdmission) {
	if c == nil || !c.counted {
		return
	}
	x := a.estimates(now)
	var cnt counts
	for i := range view {
		if i == home || !view[i].Healthy || view[i].KVCapacityTokens <= 0 {
			continue
		}
		if cnt.n == nil {
			cnt = a.sums(x, remote, view)
		}
		if !a.room(i, &view[i], x, c.ctx, x.running(c.first), cnt) {
			view[i].Healthy = false
		}
	}
}

// unadmit undoes routed for a new conversation (hash h) the gate admitted (g)
// whose reservation the shared store refused: it is counted nowhere, and its
// waiter (or a new one) is back at the head of the queue. Returns the hold.
func (a *admission) unadmit(now time.Duration, h uint64, g gateResult) gateResult {
	if c := a.convs[h]; c != nil {
		a.uncount(c)
		delete(a.convs, h)
	}
	switch g.outcome {
	case AdmitAdmitted:
		a.out.Admitted--
	case AdmitHeld:
		a.out.AfterHold--
		a.out.HeldSecondsSum -= g.held.Seconds()
	}
	t := g.tk
	if t == nil {
		a.nextID++
		t = &ticket{id: a.nextID, issued: now}
	}
	t.polled = now
	a.queue = slices.Insert(a.queue, 0, t)
	a.tickets[t.id] = t
	return gateResult{outcome: AdmitWaiting, ticket: t.id, held: g.held}
}

// cancel drops a waiter's ticket (its client went away).
func (a *admission) cancel(id uint64) {
	if pos := a.position(id); pos >= 0 {
		a.drop(pos)
		a.out.GaveUp++
	}
}

// AdmitInfo is what the admission gate decided for one request (Balancer.Admit).
type AdmitInfo struct {
	Admission Admission     // AdmitNone when the gate is off
	Held      time.Duration // how long the request has waited in the queue
	Ticket    uint64        // with ErrHold: present it in Facts.Ticket when asking again
}

func (g gateResult) info() AdmitInfo {
	return AdmitInfo{Admission: g.outcome, Held: g.held, Ticket: g.ticket}
}
