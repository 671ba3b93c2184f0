package router

// ReplicaStatus is one replica's state as reported by Status.
type ReplicaStatus struct {
	Name     string `json:"name"`
	Healthy  bool   `json:"healthy"`
	InFlight int    `json:"in_flight"`
	// Scraped gauges as last observed (also when stale), and their age in
	// simulated seconds (-1 when never observed).
	Running     int               `json:"running"`
	Waiting     int               `json:"waiting"`
	KVUsage     float64           `json:"kv_usage"`
	ScrapeAgeS  float64           `json:"scrape_age_s"`
	ScrapeFresh bool              `json:"scrape_fresh"`
	Sessions    int               `json:"sessions_homed"`
	Active      int               `json:"sessions_active"`
	ServedBy    map[string]uint64 `json:"served_by_reason"`
	ServedTotal uint64            `json:"served_total"`
	// Prompt tokens of the finished requests whose usage reported a cache count
	// (ObserveCache), and how many of them the replica read from its prefix
	// cache: the per-request view of its hit rate, which unlike vLLM's counters
	// is never inflated by repeated scheduling attempts (docs/routing.md,
	// "Measurement check").
	UsagePromptTokens uint64 `json:"usage_prompt_tokens"`
	UsageCachedTokens uint64 `json:"usage_cached_tokens"`
	// KVCapacityTokens is the replica's KV cache in tokens as the policies see it
	// (ObserveCapacity); 0 unknown, which switches off the fit move and cold-move.
	KVCapacityTokens int64 `json:"kv_capacity_tokens"`
	// Live conversations homed on the replica (last request within the session
	// table's live window) and the sum of their context estimates in tokens:
	// the working set the policies compare with KVCapacityTokens
	// (ReplicaState.Live, LiveTokens).
	Live       int   `json:"live_conversations"`
	LiveTokens int64 `json:"live_tokens"`
	// Ejected: out of placement after consecutive failed requests
	// (ObserveOutcome) while its health check may pass; EjectedForS is how
	// long until a probe may return it (0 when due), EjectReason the failure
	// that ejected it, Ejections how many times it was ejected in all.
	Ejected     bool    `json:"ejected"`
	EjectedForS float64 `json:"ejected_for_s"`
	EjectReason string  `json:"eject_reason,omitempty"`
	Ejections   uint64  `json:"ejections"`
	// SharedInFlight is what the other routers sharing this one's state
	// (BalancerConfig.Shared) have in flight on the replica; InFlight is this
	// router's own count. Absent without shared state.
	SharedInFlight int `json:"shared_in_flight,omitempty"`
	// SharedLive and SharedLiveTokens are the largest live-conversation count
	// and live working set (tokens) any other router's session table holds for
	// the replica (RemoteLoad). The policies decide on the larger of these and
	// Live, LiveTokens (DecidedLive). Absent without shared state.
	SharedLive       int   `json:"shared_live_conversations,omitempty"`
	SharedLiveTokens int64 `json:"shared_live_tokens,omitempty"`
	// Draining is the replica's drain mode ("move" or "finish", SetDrain;
	// with shared state the store's), absent when it is not draining. What
	// is left on it: InFlight (+ SharedInFlight) and Sessions.
	Draining string `json:"draining,omitempty"`
}

// DecidedLive returns the live conversations and live tokens the policies
// decide on for the replica: this router's, or with shared state the larger
// of this router's and the largest another router reports (Balancer.fillView).
func (s ReplicaStatus) DecidedLive() (int, int64) {
	return max(s.Live, s.SharedLive), max(s.LiveTokens, s.SharedLiveTokens)
}

// Status returns every replica's state, in replica order.
func (b *Balancer) Status() []ReplicaStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sessions.expire(now)
	out := make([]ReplicaStatus, len(b.reps))
	for i := range b.reps {
		r := &b.reps[i]
		s := ReplicaStatus{
			Name: r.name, Healthy: r.healthy, InFlight: r.inflight,
			Running: r.running, Waiting: r.waiting, KVUsage: r.kv, ScrapeAgeS: -1,
			Sessions: b.sessions.Homed(i), Active: b.sessions.Active(i),
			ServedBy: make(map[string]uint64, numReasons),
		}
		if r.observed {
			s.ScrapeAgeS = (now - r.observedAt).Seconds()
			s.ScrapeFresh = now-r.observedAt <= b.staleAfter
		}
		for _, reason := range Reasons {
			s.ServedBy[reason.String()] = r.served[reason]
			s.ServedTotal += r.served[reason]
		}
		s.UsagePromptTokens, s.UsageCachedTokens = r.usagePrompt, r.usageCached
		s.KVCapacityTokens = r.kvCapacity
		s.Live, s.LiveTokens = b.sessions.Live(i), b.sessions.LiveTokens(i)
		s.Ejected, s.EjectReason, s.Ejections = r.out.ejected, r.out.reason, r.out.total
		if r.out.ejected && r.out.until > now {
			s.EjectedForS = (r.out.until - now).Seconds()
		}
		s.Draining = b.drainOf(i).String()
		if b.shared != nil {
			rl := b.shared.Remote(i)
			s.SharedInFlight, s.SharedLive, s.SharedLiveTokens = rl.InFlight, rl.Live, rl.LiveTokens
		}
		out[i] = s
	}
	return out
}
