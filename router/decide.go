package router

import "time"

// decision is one request's routing decision in the making: what the named
// steps (decisionSteps) read and write, in order. acquireLocked fills it under
// mu; it lives in Balancer.cur so a decision allocates nothing.
type decision struct {
	f   Facts
	sv  *sharedView // what the shared state said; nil none
	now time.Duration

	// The session (a key, affinity on): its table hash, its home before the
	// decision and overflow target (-1 none), whether its cache on the home
	// was lost (Request.CacheLost), whether this is a side request, whether
	// this router first saw it through the store, and the context estimate the
	// policy is told (tokens).
	h       uint64
	home    int
	over    int
	lost    bool
	side    bool
	created bool
	ctx     int

	// drained: the session's home, taken out of the view by a drain in move
	// mode (stepDrain); -1 none.
	drained int

	gated bool       // the admission gate decides on this request
	g     gateResult // what it decided

	d      Decision
	picked bool // a step chose the replica: the later pickers pass
	final  bool // chosen outside the session rules (a Responses home, affinity off)

	info AdmitInfo
	plan *claimPlan // the write acquireShared must make to the store; nil none
}

// step is one named stage of the decision. when reads the decision so far
// (never another step's internals); run may choose the replica (picked) or
// fail the request. A step is added, removed or reordered here only.
type step struct {
	name string
	when func(b *Balancer, x *decision) bool
	run  func(b *Balancer, x *decision) error
}

// decisionSteps is the order of a decision (docs/router.md, "How a request is
// placed", lists it; TestDecisionStepsDocumented checks the two agree).
var decisionSteps = [...]step{
	{"response-home", always, (*Balancer).stepResponseHome},
	{"session-context", (*Balancer).keyed, (*Balancer).stepSessionContext},
	{"drain", (*Balancer).draining, (*Balancer).stepDrain},
	{"balanced", (*Balancer).affinityOff, (*Balancer).stepBalanced},
	{"admission-gate", gated, (*Balancer).stepAdmissionGate},
	{"session-home", (*Balancer).keyed, (*Balancer).stepSessionHome},
	{"slow-start", (*Balancer).affinityOn, (*Balancer).stepSlowStart},
	{"keyless-prefix", (*Balancer).keylessPrefix, (*Balancer).stepKeylessPrefix},
	{"subagent-parent", (*Balancer).followsParent, (*Balancer).stepSubagentParent},
	{"policy", unpicked, (*Balancer).stepPolicy},
	{"admission-record", gated, (*Balancer).stepAdmissionRecord},
	{"session-record", (*Balancer).keyed, (*Balancer).stepSessionRecord},
}

// DecisionSteps returns the names of the decision's steps in order.
func DecisionSteps() []string {
	out := make([]string, len(decisionSteps))
	for i, s := range decisionSteps {
		out[i] = s.name
	}
	return out
}

// acquireLocked is Acquire's decision under mu: the steps in order, then the
// count. sv is what the shared state said (nil: no shared state, or it did not
// answer); with sv the shared home is adopted into the local table before the
// decision, and the returned plan, when not nil, is the write Acquire must make
// to the store (the decision is then not yet told to the store; without a plan
// it was, as Acquired). It also returns what the admission gate decided.
func (b *Balancer) acquireLocked(f Facts, sv *sharedView) (Decision, AdmitInfo, *claimPlan, error) {
	x := b.begin(f, sv)
	for i := range decisionSteps {
		s := &decisionSteps[i]
		if !s.when(b, x) {
			continue
		}
		if err := s.run(b, x); err != nil {
			return Decision{}, x.info, nil, err
		}
	}
	b.commit(x)
	return x.d, x.info, x.plan, nil
}

// begin starts a decision: the prompt estimate from the body size when the
// prompt is unknown, the shortest-queue snapshot, expired sessions dropped and
// the view filled (caller holds mu).
func (b *Balancer) begin(f Facts, sv *sharedView) *decision {
	if f.PromptTokens <= 0 && f.BodyBytes > 0 {
		f.PromptTokens = b.estimateTokens(f.BodyBytes)
	}
	now := b.now()
	b.sync(now)
	b.sessions.expire(now)
	b.fillView(now, f.Avoid)
	b.cur = decision{f: f, sv: sv, now: now, home: -1, over: -1, drained: -1, ctx: f.PromptTokens}
	return &b.cur
}

// commit tells the decision to the instrumentation and counts the request in
// flight on the chosen replica (and, without a claim to make, in the shared
// state) in the same critical section as the decision.
func (b *Balancer) commit(x *decision) {
	if b.onDec != nil {
		name := b.polName
		if !b.affinity {
			name = PolicyShortestQueue
		}
		b.onDec(DecisionEvent{Now: x.now, Facts: x.f, Home: x.home, Decision: x.d, Policy: name, View: b.view})
	}
	r := &b.reps[x.d.Replica]
	r.inflight++
	r.served[x.d.Reason]++
	if b.shared != nil && x.plan == nil {
		b.shared.Acquired(x.d.Replica)
		if b.affinity && b.adm.on() && x.f.SessionKey != "" {
			b.shared.Began(SessionID(x.f.SessionKey), x.side)
		}
	}
}

// When a step applies.

func always(*Balancer, *decision) bool           { return true }
func unpicked(_ *Balancer, x *decision) bool     { return !x.picked }
func gated(_ *Balancer, x *decision) bool        { return x.gated && !x.final }
func (b *Balancer) affinityOff(x *decision) bool { return !b.affinity && !x.final }
func (b *Balancer) affinityOn(x *decision) bool  { return b.affinity && !x.final }
func (b *Balancer) keyed(x *decision) bool {
	return b.affinityOn(x) && x.f.SessionKey != ""
}

// stepResponseHome: a request continuing a Responses API response goes to the
// replica that produced it while that replica is healthy (responsehome.go).
func (b *Balancer) stepResponseHome(x *decision) error {
	var sh *SharedHome
	if x.sv != nil {
		sh = x.sv.response
	}
	if r := b.responseHome(x.f.ResponseID, sh); r >= 0 && b.view[r].Healthy {
		x.d, x.picked, x.final = Decision{Replica: r, Reason: ReasonResponse}, true, true
	}
	return nil
}

// stepBalanced: affinity off, vLLM's shortest queue; the session table is
// left alone.
func (b *Balancer) stepBalanced(x *decision) (err error) {
	x.d, err = b.sq.Pick(x.now, Request{Key: x.f.SessionKey, Home: -1, PromptTokens: x.f.PromptTokens, Process: x.f.Process}, b.view)
	x.picked, x.final = true, true
	return err
}

// stepSessionContext: the session's hash, its shared home adopted into the
// table, its context estimate (a side request keeps the session's), and
// whether it belongs to a tree admission already let in.
func (b *Balancer) stepSessionContext(x *decision) error {
	x.gated = b.adm.on()
	x.h = b.sessions.hash(x.f.SessionKey)
	if sv := x.sv; sv != nil && sv.home.Replica >= 0 && sv.home.Replica < len(b.reps) {
		x.created = b.sessions.adopt(x.now, x.h, sv.home.Replica)
	}
	x.ctx, x.side = b.sessions.contextTokens(x.h, x.now, x.f.PromptTokens, x.f.SideMeasure())
	if x.side && x.f.Tools && x.f.Agent == "" {
		// The session's own agent's main-loop call: shorter after a compaction.
		x.ctx, x.side = x.f.PromptTokens, false
	}
	x.f.Continuing = x.f.Continuing || (x.gated && b.inAdmittedTree(x.f))
	return nil
}

// stepAdmissionGate: admission (admission.go) may hold or refuse a new
// conversation, or leave only the replicas with room healthy in the view.
func (b *Balancer) stepAdmissionGate(x *decision) (err error) {
	var remote *RemoteAdmission
	if b.shared != nil {
		remote = b.shared.RemoteAdmission()
		b.adm.remote = remote
	}
	b.adm.expire(x.now, b.sessions.LiveWindow())
	x.g, err = b.adm.gate(x.now, x.f, x.h, b.sessions.home(x.h), x.side, x.ctx, b.view, remote)
	if err != nil {
		x.info = x.g.info()
	}
	return err
}

// stepSessionHome: the session's home, overflow target and lost cache. A
// session first seen here through the store has no gap to record.
func (b *Balancer) stepSessionHome(x *decision) error {
	x.home, x.lost = b.sessions.lookup(x.now, x.h, x.side || x.created)
	x.over = b.sessions.overflowTarget(x.h)
	return nil
}

// stepSlowStart: a replica back from ejection takes a growing share of new
// placements (outlier.go).
func (b *Balancer) stepSlowStart(x *decision) error {
	b.slowStart(x.now, x.home)
	return nil
}

// keylessPrefix: a request without a session key, with a prefix index,
// that prefills (prefix.go).
func (b *Balancer) keylessPrefix(x *decision) bool {
	return b.affinityOn(x) && x.f.SessionKey == "" && b.prefix != nil && !x.f.NoPrefill
}

// stepKeylessPrefix: the replica sent the longest part of the prompt's
// prefix, when one was.
func (b *Balancer) stepKeylessPrefix(x *decision) error {
	if m, _ := b.prefix.Pick(b.view, x.f.Prefix, b.overflowThreshold()); m >= 0 {
		x.d, x.picked = Decision{Replica: m, Reason: ReasonPrefix}, true
	}
	return nil
}

// stepPolicy: the configured policy (BalancerConfig.Policy) places the
// request.
func (b *Balancer) stepPolicy(x *decision) (err error) {
	x.d, err = b.policy.Pick(x.now, Request{
		Key: x.f.SessionKey, Home: x.home, Overflow: x.over, HasOverflow: x.over >= 0,
		Threshold: b.overflowThreshold(), PromptTokens: x.ctx, HeldFor: x.f.HeldFor,
		CacheLost: x.lost, NoPrefill: x.f.NoPrefill, Side: x.side,
	}, b.view)
	x.picked = true
	return err
}

// stepAdmissionRecord: the gate counts the conversation where it went.
func (b *Balancer) stepAdmissionRecord(x *decision) error {
	if h, parent, sid := b.admKeys(x.f.Conv()); parent != 0 && b.adm.convs[parent] != nil {
		// A subagent of a conversation the gate counts: a child of its tree,
		// at its own prompt.
		b.adm.routed(x.now, h, parent, sid, x.d, x.f.PromptTokens, false, x.g)
	} else {
		b.adm.routed(x.now, x.h, 0, SessionID(x.f.SessionKey), x.d, x.ctx, x.side, x.g)
	}
	x.info = x.g.info()
	return nil
}

// stepSessionRecord: the session table keeps the decision (recordSessionDecision).
func (b *Balancer) stepSessionRecord(x *decision) error {
	x.d, x.plan = b.recordSessionDecision(x)
	return nil
}

// recordSessionDecision records the decision for the session in the session
// table under mu: a new home, an overflow target, the context estimate; with
// a shared view it returns the claim the store must see (acquireLocked's
// plan). A rehome off a healthy home avoided for this request only becomes an
// overflow.
func (b *Balancer) recordSessionDecision(x *decision) (Decision, *claimPlan) {
	d, h, home := x.d, x.h, x.home
	switch {
	case x.drained >= 0 && home == x.drained && d.Replica != home:
		// The home drains in move mode (stepDrain): the conversation moves for
		// good, and its next prefill is cold.
		d.Reason = ReasonDrainMove
		b.sessions.set(x.now, h, d.Replica)
		b.countPlacement(d.Replica)
	case d.Reason == ReasonRehome && home >= 0 && home < len(b.reps) && b.reps[home].healthy && !b.reps[home].out.ejected && !b.view[home].Healthy:
		// The home is healthy but was avoided for this request only.
		d.Reason = ReasonOverflow
	case d.Reason == ReasonPlaced || d.Reason == ReasonRehome || d.Reason == ReasonMoved || d.Reason == ReasonParent:
		b.sessions.set(x.now, h, d.Replica)
		b.countPlacement(d.Replica)
	}
	if d.Reason == ReasonOverflow {
		b.sessions.setOverflow(h, d.Replica)
	}
	b.sessions.setTokens(h, x.now, x.f.PromptTokens, x.f.SideMeasure(), x.side)
	if x.sv == nil {
		return d, nil
	}
	plan := b.plan(x.sv, h, d)
	if plan == nil {
		return d, nil
	}
	plan.gate, plan.side, plan.from = x.g, x.side, -1
	if x.gated {
		plan.res = b.reservation(x.g, d, h, SessionID(x.f.SessionKey), plan.cands)
	}
	if plan.res != nil && d.Reason == ReasonMoved {
		plan.from = home
	}
	if plan.res != nil {
		b.adm.pend(h)
	}
	return d, plan
}
