package router

// The subagent rule "follow" (follow_subagents): a step of the decision
// (decisionSteps) and the tree test admission uses.

// followsParent: a keyed conversation without a home whose request names a
// parent (Facts.ParentKey) with FollowParent, not yet placed by another step.
func (b *Balancer) followsParent(x *decision) bool {
	return b.keyed(x) && !x.picked && x.f.FollowParent && x.f.ParentKey != "" && x.home < 0
}

// stepSubagentParent starts the conversation on its parent's home while that
// replica is healthy in the view (admission may have taken it out) and not
// over the overflow threshold; otherwise the policy places it as any new
// conversation. The subagent keeps its own key, so its context never stands in
// for the parent's in the session table. Only this router's table is read:
// through shared state a parent homed by another router is not seen.
func (b *Balancer) stepSubagentParent(x *decision) error {
	p := b.sessions.home(b.sessions.hash(x.f.ParentKey))
	if p < 0 || p >= len(b.view) || !b.view[p].Healthy || b.view[p].InFlight > b.overflowThreshold() {
		return nil
	}
	x.d, x.picked = Decision{Replica: p, Reason: ReasonParent}, true
	return nil
}

// inAdmittedTree reports whether f is a subagent (Facts.ParentKey) whose
// parent has a home: part of a tree already admitted, never held, since its
// parent waits for it (the join).
func (b *Balancer) inAdmittedTree(f Facts) bool {
	return f.ParentKey != "" && b.sessions.home(b.sessions.hash(f.ParentKey)) >= 0
}
