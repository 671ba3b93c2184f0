package router

import (
	"fmt"
)

// AdmissionOutcomes counts the gate's outcomes since the Balancer was built.
type AdmissionOutcomes struct {
	Admitted       uint64  `json:"admitted"`            // new conversations admitted without a wait
	AfterHold      uint64  `json:"admitted_after_hold"` // admitted after a wait
	AtLimit        uint64  `json:"admitted_at_limit"`   // admitted at max_hold / max_queue
	Refused        uint64  `json:"refused"`             // refused at a limit
	GaveUp         uint64  `json:"gave_up"`             // waiters that left (disconnect, ticket expired)
	HeldSecondsSum float64 `json:"held_seconds_sum"`    // total wait of the admitted and refused
}

// CancelHold drops the admission ticket of a held request whose client went
// away, so the queue forgets it at once (counted as gave up). Unknown tickets
// are ignored.
func (b *Balancer) CancelHold(ticket uint64) {
	if ticket == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.adm.cancel(ticket)
}

// SetAdmission replaces the admission configuration at run time. Switching it
// on starts with no conversation counted: the gate counts a conversation from
// its next request, so it may over-admit for about one turn. Switching it off
// lets every waiter through at its next ask. Errors: an invalid config.
func (b *Balancer) SetAdmission(cfg AdmissionConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("setting admission: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.adm.on()
	b.adm.cfg = cfg.WithDefaults()
	if !b.adm.on() || !was {
		b.adm.reset()
	}
	return nil
}

// AdmissionConfig returns the admission configuration in force (defaults
// resolved).
func (b *Balancer) AdmissionConfig() AdmissionConfig {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.adm.cfg
}

// AdmissionStatus is the gate's state as /status and the card show it.
type AdmissionStatus struct {
	AdmissionConfig
	// State: "off", "on", or "capacity-unknown" (on, but a healthy replica's KV
	// capacity is unknown, so everything passes).
	State string `json:"state"`
	// Queue: waiters now; OldestHeldS how long the head has waited, seconds.
	Queue       int     `json:"queue"`
	OldestHeldS float64 `json:"oldest_held_s"`
	// ExpectedContextTokens is E's learned growth target for a new
	// conversation, with ExpectedSource "ended-p90": the
	// ExpectedContextQuantile of the EndedSamples peak contexts of recently
	// ended conversations; before it is learned 0 and "prior": each
	// conversation is expected to reach priorPeak of its first prompt.
	ExpectedContextTokens int64  `json:"expected_context_tokens"`
	ExpectedSource        string `json:"expected_source"`
	// RunningPeakTokens is M, the size a running conversation is counted at
	// when smaller (the median peak of the same ended conversations; 0 until
	// learned: counted at its prior).
	RunningPeakTokens int64 `json:"running_peak_tokens"`
	EndedSamples      int   `json:"ended_samples"`
	EndedTotal        int   `json:"ended_total"`
	// SharedPrefixTokens is S (0 until MinSharedPrefixSamples first turns
	// reported their cached tokens; SharedPrefixSamples says how many did).
	// With shared state: conversations only other routers' gates count (in
	// Counted and WorkingTokens too), their waiters, and the longest wait among
	// them, seconds.
	RemoteConversations int     `json:"remote_conversations,omitempty"`
	RemoteQueue         int     `json:"remote_queue,omitempty"`
	RemoteOldestHeldS   float64 `json:"remote_oldest_held_s,omitempty"`
	SharedPrefixTokens  int64   `json:"shared_prefix_tokens"`
	SharedPrefixSamples int     `json:"shared_prefix_samples"`
	// IdleWindowS: a conversation stops counting this long after its last
	// request ended, seconds.
	IdleWindowS float64 `json:"idle_window_s"`
	// Per replica (index = replica): counted conversations and their working
	// set in tokens (S once per replica, each at its expected peak P), the
	// left side of the rule.
	Counted       []int             `json:"counted_conversations"`
	WorkingTokens []int64           `json:"working_set_tokens"`
	Outcomes      AdmissionOutcomes `json:"outcomes"`
}

// Admission returns the gate's state.
func (b *Balancer) Admission() AdmissionStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.adm
	now := b.now()
	st := AdmissionStatus{AdmissionConfig: a.cfg, State: "off"}
	if a.on() {
		a.expire(now, b.sessions.LiveWindow())
		st.State = "on"
		for i := range b.reps {
			if b.reps[i].healthy && b.reps[i].kvCapacity <= 0 {
				st.State = "capacity-unknown"
			}
		}
	}
	st.Outcomes = a.out
	st.Queue = len(a.queue)
	if len(a.queue) > 0 {
		st.OldestHeldS = (now - a.queue[0].issued).Seconds()
	}
	var remote *RemoteAdmission
	if b.shared != nil && a.on() {
		remote = b.shared.RemoteAdmission()
		a.remote = remote
	}
	if remote != nil {
		st.RemoteConversations, st.RemoteQueue, st.RemoteOldestHeldS = len(remote.Convs), remote.Waiting, remote.OldestHeld.Seconds()
	}
	x := a.estimates(now)
	st.ExpectedSource = "prior"
	if x.learned {
		st.ExpectedContextTokens, st.ExpectedSource, st.RunningPeakTokens = x.q, "ended-p90", x.m
	}
	cnt := a.sums(x, remote, b.capacityView())
	st.EndedSamples, st.EndedTotal = a.ended.len(), a.endedN
	st.SharedPrefixTokens, st.SharedPrefixSamples = a.sharedPrefix(), a.prefix.len()
	if a.remote != nil {
		st.SharedPrefixSamples = a.remote.PrefixSamples
	}
	st.IdleWindowS = a.idleWindow(b.sessions.LiveWindow()).Seconds()
	for i := range b.reps {
		st.Counted = append(st.Counted, cnt.n[i])
		st.WorkingTokens = append(st.WorkingTokens, cnt.used(i, x.s))
	}
	return st
}

// capacityView is the replicas' KV capacities as a view (the rest zero), for
// the gate's sums outside a decision (caller holds mu).
func (b *Balancer) capacityView() []ReplicaState {
	v := make([]ReplicaState, len(b.reps))
	for i := range b.reps {
		v[i].KVCapacityTokens = b.reps[i].kvCapacity
	}
	return v
}
