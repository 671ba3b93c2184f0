package router

import (
	"hash/fnv"
	"time"
)

// SharedState is the state a Balancer shares with the Balancers of other routers
// in front of the same replicas (`state: redis://...` in routerhttp; the
// implementation is router/routerhttp/redisstate, never this package, which does
// no I/O): each session's home with its idle TTL, and every router's in-flight
// count and live working set per replica. Replicas are named by index into the
// Balancer's replicas; the implementation maps them to keys that do not depend
// on the order of a config file (URL + DP rank).
//
// The Balancer calls Home, Refresh, Claim and Forget outside its lock (they may wait on
// the network, at most the implementation's timeout; each returns the wall time
// it waited, which AdmitWait reports) and the other methods under it (they must
// not block: counters and an atomically swapped snapshot). A method that cannot
// reach the store says so (ok false) and the Balancer decides from its local
// view alone: routing never fails because of the store, and an implementation
// that stops calling the store after its first failure (redisstate's circuit)
// adds at most one timeout to a request while the store hangs.
type SharedState interface {
	// Home returns the session's home as the store holds it (SharedHome.Token ""
	// when it holds none). ok is false when the store cannot answer now.
	Home(sessionKey string) (h SharedHome, wait time.Duration, ok bool)
	// Claim writes the session's home atomically, first write wins: when the
	// store holds no home or still holds expect (a Token from Home, "" none), it
	// homes the session on cands[0], or with pickLeast on the candidate with the
	// fewest requests in flight summed over every live router (ties: the earlier
	// in cands), with the session TTL, and returns it with adopted false; when it
	// holds another home (another router wrote first), it returns that home with
	// adopted true. Either way it counts one request of this router in flight
	// on the returned replica in the same atomic step (the caller then calls
	// Claimed, not Acquired). cands are replica indices, at least one. ok is
	// false when the store cannot answer, or returned a replica this Balancer
	// does not have; nothing is then counted.
	//
	// With res (a new conversation the admission gate admitted), the same step
	// reserves room for it: only the candidates whose union of counted working
	// sets (res.Own, the other live routers' published gates and the unexpired
	// reservations, each conversation once) has room for res.Expected are
	// candidates, and the reservation is kept until the admitting router's gate
	// publishes the conversation (at most the store's key TTL). With none left
	// it writes nothing and returns Full (the caller holds the conversation).
	// res.Force reserves without the check (admitted at a limit).
	//
	// weak writes a home placed while the store did not answer (a write-back
	// after an outage): Home reports it Weak, so a router that held another
	// home from before the outage replaces it (Claim with expect = its Token).
	Claim(sessionKey, expect string, cands []int, pickLeast, weak bool, res *Reservation) (c ClaimResult, wait time.Duration, ok bool)
	// Refresh reads the other routers' in-flight counts from the store now, so
	// that Remote gives them as they are rather than as of the last exchange.
	// The Balancer calls it before a decision that may move a conversation for
	// load (its home over the overflow threshold in the view): a request that
	// just ended on another router must not count as one in flight there. ok is
	// false when the store cannot answer (Remote keeps what it had).
	Refresh() (wait time.Duration, ok bool)
	// Forget deletes the session's home in the store if it still holds replica
	// i (compare-and-delete: a home another router wrote since stays), for
	// Balancer.Unplace: the next request through any router then places the
	// session afresh. ok is false when the store cannot answer (the home then
	// lasts its TTL and the next request adopts it).
	Forget(sessionKey string, i int) (wait time.Duration, ok bool)
	// Acquired and Released tell that this router sent one request to replica i,
	// or that one ended; the store publishes the change soon after (not on the
	// request's path). Claimed tells that a request counted by a successful
	// Claim was sent to i.
	Acquired(i int)
	Released(i int)
	Claimed(i int)
	// Remote returns what the other live routers report for replica i: their
	// in-flight requests summed, and the largest live working set any of them
	// sees (RemoteLoad). Zero when the store is unavailable.
	Remote(i int) RemoteLoad
	// RemoteAdmission returns what the other live routers' admission gates
	// count and hold (their Balancer.AdmissionShare, as last exchanged), and
	// the estimates every router learns together (S, the idle window); nil
	// when none publishes or the store is unavailable.
	RemoteAdmission() *RemoteAdmission
	// ObserveFirstTurn adds one true first turn's cached tokens to the shared
	// S samples; Began and Ended tell that a request of the conversation with
	// SessionID id was sent (side: a side request, whose gap says nothing) or
	// ended, so the gap from a conversation's last end to its next request is
	// measured whatever router served either. All three are published off the
	// request path (they must not block).
	ObserveFirstTurn(cachedTokens int)
	Began(id uint64, side bool)
	Ended(id uint64)
}

// ClaimResult is what SharedState.Claim did.
type ClaimResult struct {
	// Replica: the session's home (index in this Balancer); Adopted: another
	// router wrote it first; Full: a reservation found no candidate with room
	// (nothing written, Replica -1).
	Replica int
	Adopted bool
	Full    bool
}

// Reservation is the room a Claim reserves for a new conversation, or one a
// policy moves (admission.go's rule, evaluated in the store over every
// router's gate).
type Reservation struct {
	ID     uint64 // SessionID
	Tokens int64  // its context estimate now (a new one's first prompt), tokens
	First  int64  // the first context its gate saw (the prior's base), tokens
	// Expected is its growth target G (a new one's: the learned quantile or
	// its prior; a move's: M or its prior), Shared S and Running M (0 until
	// learned), tokens. On candidate k it is counted at max(Tokens,
	// min(Expected, Fit[k])), every other conversation at its P there (the
	// rule in admission.go, from its context, first context, S and M); the
	// reservation is kept with Tokens and First, counted like the others.
	Expected, Shared, Running int64
	// Fit[k] is cands[k]'s KVCapacityTokens x FillTarget, tokens.
	Fit []int64
	// Own: this gate's counted conversations (without this one).
	Own []SharedConv
	// Force: reserve without the check (AdmitLimit).
	Force bool
}

// RemoteAdmission is the other routers' admission gates (SharedState.RemoteAdmission).
type RemoteAdmission struct {
	// Convs: the conversations their gates count, by SessionID; a conversation
	// more than one counts appears once (the largest size).
	Convs map[uint64]RemoteConv
	// Waiting: their waiters, summed; OldestHeld: the longest any has waited.
	Waiting    int
	OldestHeld time.Duration
	// SharedPrefix is S learned from every router's true first turns
	// (ObserveFirstTurn; the median of the last prefixSamples), PrefixSamples
	// how many there are (S is used from MinSharedPrefixSamples).
	SharedPrefix  int64
	PrefixSamples int
	// GapP90 is the 90th percentile of the last idleSamples end-to-next-request
	// gaps of every conversation whatever router served it (Began, Ended), on
	// the Balancer's clock; GapSamples how many there are (used from
	// minIdleGaps).
	GapP90     time.Duration
	GapSamples int
}

// RemoteConv is one conversation another router's gate counts: its replica
// (index in this Balancer), its context estimate and the first context that
// gate saw of it, in tokens (more than one gate: the largest context, the
// smallest first; First 0 unknown).
type RemoteConv struct {
	Replica int
	Tokens  int64
	First   int64
}

// AdmissionShare is what this router's gate publishes for the others
// (Balancer.AdmissionShare): the conversations it counts and its queue.
type AdmissionShare struct {
	On         bool // the gate is on (nothing to publish otherwise)
	Convs      []SharedConv
	Waiting    int
	OldestHeld time.Duration
}

// SharedConv is one counted conversation: SessionID, replica index, context
// estimate and the first context its gate saw (the prior's base), in tokens:
// what every router and the store count its expected peak P from.
type SharedConv struct {
	ID      uint64
	Replica int
	Tokens  int64
	First   int64
}

// SessionID is a session key's id as every router computes it (FNV-1a, 64 bits;
// the session table's own hash is seeded per process), so admission gates can
// tell a conversation they both count from two.
func SessionID(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// AdmissionShare returns this gate's counted conversations and queue for the
// shared state to publish.
func (b *Balancer) AdmissionShare() AdmissionShare {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.adm
	if !a.on() {
		return AdmissionShare{}
	}
	now := b.now()
	a.expire(now, b.sessions.LiveWindow())
	out := AdmissionShare{On: true, Waiting: len(a.queue)}
	if len(a.queue) > 0 {
		out.OldestHeld = now - a.queue[0].issued
	}
	for _, c := range a.convs {
		if c.counted {
			out.Convs = append(out.Convs, SharedConv{ID: c.sid, Replica: c.replica, Tokens: c.ctx, First: c.first})
		}
	}
	return out
}

// Shared reports whether the Balancer shares state with other routers
// (BalancerConfig.Shared).
func (b *Balancer) Shared() bool { return b.shared != nil }

// SharedHome is a session's home as a SharedState holds it.
type SharedHome struct {
	// Replica is the home's index in this Balancer, -1 when the store holds no
	// home or one on a replica this Balancer does not have.
	Replica int
	// Token is the store's value for the home ("" none), given back to Claim as
	// the home a move expects to replace.
	Token string
	// Weak: the home was written by a router that placed it while the store did
	// not answer (Claim's weak).
	Weak bool
}

// RemoteLoad is the load other routers report for one replica (SharedState.Remote).
type RemoteLoad struct {
	// InFlight: requests the other routers have in flight on the replica, summed.
	InFlight int
	// Live and LiveTokens: the largest live-conversation count and live working
	// set in tokens that any other router's session table holds for the replica.
	// The largest, not the sum: routers behind a balancer that spreads turns see
	// the same conversations, and a sum would count each once per router; with
	// conversations pinned to one router it underestimates, as one router's own
	// view does today.
	Live       int
	LiveTokens int64
}

// LiveSet is one replica's live working set in this Balancer's session table
// (Balancer.LiveSets): what a SharedState publishes for the other routers.
type LiveSet struct {
	Live       int
	LiveTokens int64
}

// LiveSets returns each replica's live conversations and live tokens in the local
// session table, in replica order.
func (b *Balancer) LiveSets() []LiveSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions.expire(b.now())
	out := make([]LiveSet, len(b.reps))
	for i := range out {
		out[i] = LiveSet{Live: b.sessions.Live(i), LiveTokens: b.sessions.LiveTokens(i)}
	}
	return out
}

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
	force := g.outcome == AdmitLimit || d.Reason == ReasonRehome
	switch {
	case d.Reason == ReasonPlaced && (g.outcome == AdmitAdmitted || g.outcome == AdmitHeld || g.outcome == AdmitLimit):
	case (d.Reason == ReasonMoved || d.Reason == ReasonRehome) && g.outcome == AdmitPass:
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
		if cv.counted && cv.sid != sid {
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
		case ReasonPlaced, ReasonRehome, ReasonMoved:
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
	case ReasonPlaced, ReasonRehome:
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
