package router

import "time"

// SessionView is what this router's session table holds of one session
// (Balancer.LookupSession): Home and Overflow are replica indices (-1 none);
// ContextTokens is the context estimate (prompt tokens of its last full-size
// request, 0 unknown); IdleFor is the time since its last request; Live: it
// counts in its home's live working set; CacheLost: its last request at home
// read under half of the one before from the prefix cache.
type SessionView struct {
	Home, Overflow int
	ContextTokens  int
	IdleFor        time.Duration
	Live           bool
	CacheLost      bool
}

// LookupSession returns what the session table holds of sessionKey without
// marking it used; false when the key is unknown here (never routed through
// this router, expired, or affinity off, which leaves the table alone).
func (b *Balancer) LookupSession(sessionKey string) (SessionView, bool) {
	if sessionKey == "" {
		return SessionView{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sessions.expire(now)
	idx, ok := b.sessions.index[b.sessions.hash(sessionKey)]
	if !ok {
		return SessionView{}, false
	}
	e := &b.sessions.ents[idx]
	return SessionView{
		Home: int(e.home), Overflow: int(e.overflow) - 1, ContextTokens: int(e.tokens),
		IdleFor: now - e.last, Live: e.live, CacheLost: e.lost,
	}, true
}
