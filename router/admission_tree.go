package router

import "time"

// Session trees in admission. A Claude Code subagent runs beside its parent:
// the parent's context stays in the cache for the parent's next call (the
// join), and each subagent prefills a context of its own on the replica it was
// sent to. The gate counts the tree: the conversation and, as children, its
// subagents while they run.
//
//   - A child is a request naming a parent (Facts.ParentKey: the key was split)
//     or, with the key kept, carrying an agent id (Facts.Agent), whose parent
//     the gate counts. Without a counted parent it is counted as any
//     conversation.
//   - A child counts at its largest prompt so far, whole: nothing says it
//     shares the prefix S, and no growth estimate is learned for subagents.
//   - The parent stays counted while a child is (admConv.kids); its idle window
//     starts again when a child's last request ends.
//   - A child never feeds what the gate learns of conversations: not S, not
//     the ended peaks; it is dropped once its idle window has passed. Its gaps
//     (tool runs) are gaps like any other.
//   - Children are this router's own count: the shared state does not publish
//     them (AdmissionShare), so another router sees only the conversation.

// ConvRef names the conversation a request belongs to, as admission counts
// it: the session key, the parent's key of a split subagent ("" none) and the
// agent id ("" none).
type ConvRef struct{ Key, Parent, Agent string }

// Conv is the conversation f belongs to.
func (f Facts) Conv() ConvRef {
	return ConvRef{Key: f.SessionKey, Parent: f.ParentKey, Agent: f.Agent}
}

// admKeys returns the gate's hash of c's conversation, its parent's hash (0:
// not a subagent) and its SessionID. A split key is already the subagent's
// own; a kept key gets the agent id appended (in admission only).
func (b *Balancer) admKeys(c ConvRef) (h, parent, sid uint64) {
	switch {
	case c.Key == "":
		return 0, 0, 0
	case c.Parent != "":
		return b.sessions.hash(c.Key), b.sessions.hash(c.Parent), SessionID(c.Key)
	case c.Agent != "":
		k := c.Key + "\x00agent\x00" + c.Agent
		return b.sessions.hash(k), b.sessions.hash(c.Key), SessionID(k)
	}
	return b.sessions.hash(c.Key), 0, SessionID(c.Key)
}

// kidsOf adds d to the counted children of c's parent, if c is a child.
func (a *admission) kidsOf(c *admConv, d int) {
	if c.parent == 0 {
		return
	}
	if p := a.convs[c.parent]; p != nil {
		p.kids = max(p.kids+d, 0)
	}
}

// childEnded restarts the idle window of the parent of child c, whose last
// request in flight ended at now, when the parent has none in flight.
func (a *admission) childEnded(c *admConv, now time.Duration) {
	p := a.convs[c.parent]
	if c.parent == 0 || p == nil || p.inflight > 0 {
		return
	}
	p.lastEnd = now
	a.idleQ = append(a.idleQ, idleMark{h: c.parent, at: now})
}
