package router

import (
	"time"
)

// claimPlan is what acquireLocked asks Acquire to write to the shared state
// after the lock is released.
type claimPlan struct {
	hash      uint64
	expect    string
	cands     []int
	pickLeast bool
	// res: the admission reservation to make with the claim (nil none); gate
	// what the gate decided, to undo when the store finds no room.
	res  *Reservation
	gate gateResult
	side bool
	// from: the home a move (res set) leaves, to stay on when the store finds
	// no room at the target; -1 not a move.
	from int
	// weak: the home was placed while the store did not answer (SharedState.Claim).
	weak bool
}

// reservation is the Reservation for the conversation with hash h and
// SessionID sid on cands: a new conversation the gate admitted (g; placed), or
// one the policy moves (moved: at its size or M, as it is counted; a re-home,
// which must go somewhere, forced); nil for anything else (caller holds mu).
func (b *Balancer) reservation(g gateResult, d Decision, h, sid uint64, cands []int) *Reservation {
	if !b.adm.on() {
		return nil
	}
	force := g.outcome == AdmitLimit || d.Reason == ReasonRehome || d.Reason == ReasonDrainMove
	switch {
	case d.Reason == ReasonPlaced && (g.outcome == AdmitAdmitted || g.outcome == AdmitHeld || g.outcome == AdmitLimit):
	case (d.Reason == ReasonMoved || d.Reason == ReasonRehome || d.Reason == ReasonDrainMove) && g.outcome == AdmitPass:
	default:
		return nil
	}
	a := b.adm
	c := a.convs[h]
	if c == nil {
		return nil
	}
	x := a.estimates(b.now())
	grow := x.running(c.first)
	if d.Reason == ReasonPlaced {
		grow = x.fresh(c.ctx)
	}
	r := &Reservation{ID: sid, Tokens: c.ctx, First: c.first, Expected: grow, Shared: x.s, Force: force}
	if x.learned {
		r.Running = x.m
	}
	for _, i := range cands {
		r.Fit = append(r.Fit, int64(float64(b.reps[i].kvCapacity)*a.cfg.FillTarget))
	}
	for _, cv := range a.convs {
		if cv.counted && cv.sid != sid && cv.parent == 0 {
			r.Own = append(r.Own, SharedConv{ID: cv.sid, Replica: cv.replica, Tokens: cv.ctx, First: cv.first})
		}
	}
	return r
}

// unadmit undoes the admission of the new conversation of plan, placed by d,
// when the store found no room for it: the request is counted nowhere, the
// session forgotten, and the waiter back at the head of the queue (caller
// holds mu). It returns the hold's AdmitInfo.
func (b *Balancer) unadmit(plan *claimPlan, d Decision) AdmitInfo {
	now := b.now()
	b.sync(now)
	b.undoCount(d)
	b.sessions.unplace(plan.hash, d.Replica)
	return b.adm.unadmit(now, plan.hash, plan.gate).info()
}

// undoCount takes back the in-flight request and the served count that
// acquireLocked gave decision d (caller holds mu and has synced).
func (b *Balancer) undoCount(d Decision) {
	r := &b.reps[d.Replica]
	if r.inflight > 0 {
		r.inflight--
	}
	if r.served[d.Reason] > 0 {
		r.served[d.Reason]--
	}
}

// startedShared tells the shared state that a request of f's session was sent
// (Began), and marks a conversation's first placement in the store (first), whose
// first turn's cached tokens are a sample of S (caller holds mu).
func (b *Balancer) startedShared(f Facts, plan *claimPlan, first bool) {
	if !b.adm.on() || f.SessionKey == "" {
		return
	}
	b.shared.Began(SessionID(f.SessionKey), plan.side)
	if c := b.adm.convs[plan.hash]; c != nil && first && !f.Continuing {
		c.trueFirst = true
	}
}

// acquireShared is Acquire with a SharedState: read the shared home (outside the
// lock); when the home looks over the overflow threshold, read the other
// routers' in-flight counts afresh (outside the lock); decide under the lock as
// without one (the shared home adopted into the local table first, the other
// routers' load added to the view); and, when the decision gives the session a
// new home or the store holds none, claim it in the store (outside the lock) and
// follow the store's answer: a home another router wrote first wins, and a
// placement goes to the least loaded replica over all routers' in-flight
// counts. wait is the wall time the store calls took.
func (b *Balancer) acquireShared(f Facts) (d Decision, info AdmitInfo, wait time.Duration, err error) {
	rd, wait := b.readShared(f)
	b.mu.Lock()
	view := b.sharedViewOf(f, rd)
	d, info, plan, err := b.acquireLocked(f, view)
	if err == nil && f.SessionKey != "" && b.affinity && (view == nil || plan == nil) {
		switch d.Reason {
		case ReasonPlaced, ReasonRehome, ReasonMoved, ReasonDrainMove:
			if view == nil {
				b.sessions.setOffline(b.sessions.hash(f.SessionKey), true)
			}
		}
	}
	b.mu.Unlock()
	if err != nil || plan == nil {
		return d, info, wait, err
	}
	cr, w, ok := b.shared.Claim(f.SessionKey, plan.expect, plan.cands, plan.pickLeast, plan.weak, plan.res)
	wait += w
	rep, adopted := cr.Replica, cr.Adopted
	b.mu.Lock()
	defer b.mu.Unlock()
	reason := d.Reason
	switch {
	case ok && cr.Full && plan.from >= 0 && plan.from < len(b.reps):
		// A move into a replica the other routers' gates have filled since:
		// the conversation stays home (the store's home is unchanged).
		rep, reason = plan.from, ReasonSticky
		b.shared.Acquired(rep)
		b.startedShared(f, plan, false)
	case ok && cr.Full:
		// Another router's gate took the room first: hold, as if the local
		// gate had found none.
		return Decision{}, b.unadmit(plan, d), wait, ErrHold
	case !ok || rep < 0 || rep >= len(b.reps):
		b.shared.Acquired(d.Replica)
		b.startedShared(f, plan, false)
		if plan.res != nil {
			b.adm.confirm(plan.hash, d.Replica)
		}
		if d.Reason != ReasonSticky {
			b.sessions.setOffline(plan.hash, true)
		}
		return d, info, wait, nil
	default:
		b.shared.Claimed(rep)
		if !plan.weak || adopted {
			b.sessions.setOffline(plan.hash, false)
		}
		b.startedShared(f, plan, !adopted && plan.expect == "" && d.Reason == ReasonPlaced)
		if adopted {
			reason = ReasonSticky
		}
	}
	if plan.res != nil {
		b.adm.confirm(plan.hash, rep)
	}
	if rep == d.Replica && reason == d.Reason {
		return d, info, wait, nil
	}
	now := b.now()
	b.sync(now)
	b.undoCount(d)
	b.reps[rep].inflight++
	b.reps[rep].served[reason]++
	if rep != d.Replica {
		b.sessions.adopt(now, plan.hash, rep)
		b.adm.rehome(plan.hash, rep)
	}
	return Decision{Replica: rep, Reason: reason}, info, wait, nil
}

// sharedRead is what acquireShared read from the store before deciding: the
// session's shared home (ok: the store answered) and the response's home.
type sharedRead struct {
	home SharedHome
	ok   bool
	resp *SharedHome
}

// readShared reads, outside the lock, the session's shared home (and the
// other routers' in-flight counts afresh when that home looks over the
// overflow threshold) and the home of the response f continues when this
// router does not know it; wait is the wall time the store calls took.
func (b *Balancer) readShared(f Facts) (sharedRead, time.Duration) {
	var wait time.Duration
	sh, ok := SharedHome{Replica: -1}, false
	if f.SessionKey != "" && b.Affinity() {
		sh, wait, ok = b.shared.Home(f.SessionKey)
		b.mu.Lock()
		hot := b.homeOverThreshold(f.SessionKey, sh)
		b.mu.Unlock()
		if hot {
			w, _ := b.shared.Refresh()
			wait += w
		}
	}
	var resp *SharedHome
	if f.ResponseID != "" {
		b.mu.Lock()
		known := b.responseHome(f.ResponseID, nil) >= 0
		b.mu.Unlock()
		if !known {
			rh, w, rok := b.shared.Home(responseKeyPrefix + f.ResponseID)
			wait += w
			if rok && rh.Token != "" {
				resp = &rh
			}
		}
	}
	return sharedRead{home: sh, ok: ok, resp: resp}, wait
}

// sharedViewOf is what acquireLocked gets of rd (caller holds mu): nil when the
// store said nothing usable; a weak shared home yields to the one this router
// holds from before an outage.
func (b *Balancer) sharedViewOf(f Facts, rd sharedRead) *sharedView {
	sh, ok, resp := rd.home, rd.ok, rd.resp
	var view *sharedView
	if ok {
		view = &sharedView{home: sh}
		if h := b.sessions.hash(f.SessionKey); sh.Weak && !b.sessions.offline(h) {
			// A home placed during an outage, where this router holds one
			// from before it: ours wins (its prefix is in the cache).
			if mine := b.sessions.home(h); mine >= 0 && mine != sh.Replica && mine < len(b.reps) {
				view.home, view.reclaim = SharedHome{Replica: mine, Token: sh.Token}, true
			}
		}
	}
	if resp != nil {
		if view == nil {
			view = &sharedView{home: SharedHome{Replica: -1}}
		}
		view.response = resp
	}
	return view
}

// homeOverThreshold reports whether the session's home (the shared one sh,
// else the local table's) has more requests in flight in the view, this
// router's and the others' as last exchanged, than the overflow threshold: the
// condition under which a policy moves or overflows a conversation for load
// (caller holds mu).
func (b *Balancer) homeOverThreshold(key string, sh SharedHome) bool {
	if !b.affinity {
		return false
	}
	home := sh.Replica
	if home < 0 {
		home = b.sessions.home(b.sessions.hash(key))
	}
	if home < 0 || home >= len(b.reps) {
		return false
	}
	return b.reps[home].inflight+b.shared.Remote(home).InFlight > b.overflowThreshold()
}

// sharedView is what the shared state said before a decision (acquireLocked).
// reclaim: home is this router's own from before an outage, to write over the
// weak home the store holds (Token).
type sharedView struct {
	home SharedHome
	// response is the store's home of the request's previous_response_id
	// (Facts.ResponseID), nil when not asked or unknown there.
	response *SharedHome
	reclaim  bool
}

// plan decides whether the decision d for a session (hash h) must be written to
// the shared state, and how (caller holds mu; b.view is the decision's view).
// Placements and re-homes go to the least loaded over every router (unless the
// policy places by hash); moves and the reconciling write of a home the store
// lost keep the policy's replica.
func (b *Balancer) plan(sv *sharedView, h uint64, d Decision) *claimPlan {
	p := &claimPlan{hash: h, expect: sv.home.Token, cands: []int{d.Replica}, weak: b.sessions.offline(h)}
	switch d.Reason {
	case ReasonPlaced, ReasonRehome, ReasonDrainMove:
		if b.polName != PolicySessionHash {
			p.pickLeast = true
			for i := range b.view {
				if i != d.Replica && b.view[i].Healthy {
					p.cands = append(p.cands, i)
				}
			}
		}
		return p
	case ReasonMoved:
		return p
	case ReasonSticky:
		if sv.home.Token == "" || sv.reclaim {
			return p // the store lost the home (restart, outage), or holds one placed during an outage: write ours back
		}
	}
	return nil
}
