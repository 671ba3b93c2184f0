package router

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
		if c.counted && c.parent == 0 { // children stay local (admission_tree.go)
			out.Convs = append(out.Convs, SharedConv{ID: c.sid, Replica: c.replica, Tokens: c.ctx, First: c.first})
		}
	}
	return out
}

// Shared reports whether the Balancer shares state with other routers
// (BalancerConfig.Shared).
func (b *Balancer) Shared() bool { return b.shared != nil }

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
