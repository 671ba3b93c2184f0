package router

import (
	"slices"
	"time"
)

// sharedPrefix is S in tokens (0 until learned): with shared state the one
// every router learns together while the store answers.
func (a *admission) sharedPrefix() int64 {
	if a.remote != nil {
		if a.remote.PrefixSamples < MinSharedPrefixSamples {
			return 0
		}
		return a.remote.SharedPrefix
	}
	if a.prefix.len() < MinSharedPrefixSamples {
		return 0
	}
	s := slices.Clone(a.prefix.values())
	slices.Sort(s)
	return int64(s[len(s)/2])
}

// estimates are the rule's learned terms at one instant (admission.estimates).
type estimates struct {
	s       int64 // S
	q, m    int64 // ExpectedContextQuantile and median of the ended peaks
	learned bool  // q and m are learned (MinEndedConversations ended)
}

// priorPeak is the prior expected peak of a conversation whose first context
// was first tokens, with shared prefix s: its own part once more (the rule
// above).
func priorPeak(first, s int64) int64 { return first + max(first-s, 0) }

// capped is an expected peak est capped at c tokens (<= 0 unknown: no cap;
// estimates.cap), never below the context now, ctx.
func capped(ctx, est, c int64) int64 {
	if c > 0 {
		est = min(est, c)
	}
	return max(ctx, est)
}

// cap is C on a replica that fits fit tokens: fit for learned estimates, half
// of it for the prior (the rule above).
func (x estimates) cap(fit int64) int64 {
	if x.learned {
		return fit
	}
	return fit / 2
}

// running is the growth target G of a counted conversation of first prompt
// first (0 unknown: G is 0 until M is learned, the conversation counted at its
// size now): M once learned, else its prior.
func (x estimates) running(first int64) int64 {
	if x.learned {
		return x.m
	}
	return priorPeak(first, x.s)
}

// fresh is the growth target of a new conversation of first prompt p: the
// ended peaks' quantile once learned, else its prior.
func (x estimates) fresh(p int64) int64 {
	if x.learned {
		return x.q
	}
	return priorPeak(p, x.s)
}

// estimates returns S and the ended peaks' quantile and median (learned
// false until MinEndedConversations have ended within endedHorizon).
func (a *admission) estimates(now time.Duration) estimates {
	x := estimates{s: a.sharedPrefix()}
	var s []int64
	for _, e := range a.ended.values() {
		if now-e.at <= endedHorizon {
			s = append(s, e.peak)
		}
	}
	if len(s) < MinEndedConversations {
		return x
	}
	slices.Sort(s)
	x.q = s[min(len(s)-1, int(ExpectedContextQuantile*float64(len(s))))]
	x.m = s[len(s)/2]
	x.learned = true
	return x
}

// fit is replica r's F: the tokens its counted working sets may fill (0 when
// its KV capacity is unknown).
func (a *admission) fit(r *ReplicaState) int64 {
	return int64(float64(r.KVCapacityTokens) * a.cfg.FillTarget)
}

// counts are the counted conversations and their summed expected peaks per
// replica, the left side of the rule (sums).
type counts struct {
	n   []int
	sum []int64
}

// used is replica i's counted working set in tokens, the shared prefix once.
func (c counts) used(i int, s int64) int64 {
	if i >= len(c.n) || c.n[i] == 0 {
		return 0
	}
	return s + c.sum[i] - int64(c.n[i])*s
}

// sums counts the conversations on each replica of view, each at its expected
// peak P on it: this gate's and, with shared state, the other routers' gates'
// (remote, nil none: the union by SessionID, so a conversation both count
// counts once, on this gate's replica). A conversation's P comes from the
// union of what the gates know of it, the largest context and the first
// prompt of the gate that admitted it, so every gate and the store count it
// alike.
func (a *admission) sums(x estimates, remote *RemoteAdmission, view []ReplicaState) counts {
	nrep := len(view)
	c := counts{n: make([]int, nrep), sum: make([]int64, nrep)}
	fit := func(i int) int64 { return a.fit(&view[i]) }
	var local map[uint64]bool
	if remote != nil {
		local = make(map[uint64]bool, len(a.convs))
	}
	for _, cv := range a.convs {
		if !cv.counted || cv.replica >= nrep {
			continue
		}
		ctx := cv.ctx
		if rc, ok := remote.conv(cv.sid); ok {
			// Another gate saw its first turn: this one learns it.
			ctx, cv.first = max(ctx, rc.Tokens), minFirst(cv.first, rc.First)
		}
		if local != nil {
			local[cv.sid] = true
		}
		c.n[cv.replica]++
		if cv.parent != 0 {
			// A subagent: its largest prompt, whole (admission_tree.go);
			// used takes S off every counted conversation, so S is added back.
			c.sum[cv.replica] += cv.peak + x.s
			continue
		}
		c.sum[cv.replica] += capped(ctx, x.running(cv.first), x.cap(fit(cv.replica)))
	}
	if remote != nil {
		for id, rc := range remote.Convs {
			if local[id] || rc.Replica < 0 || rc.Replica >= nrep {
				continue
			}
			c.n[rc.Replica]++
			c.sum[rc.Replica] += capped(rc.Tokens, x.running(rc.First), x.cap(fit(rc.Replica)))
		}
	}
	return c
}

// conv is the other gates' view of conversation id (false: none counts it).
func (r *RemoteAdmission) conv(id uint64) (RemoteConv, bool) {
	if r == nil {
		return RemoteConv{}, false
	}
	rc, ok := r.Convs[id]
	return rc, ok
}

// minFirst is the smaller of two first contexts, a value <= 0 meaning unknown.
func minFirst(a, b int64) int64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// room reports whether replica r (index i) has room for a conversation of
// context ctx now and growth target g (its E or P is capped(ctx, g, C)).
func (a *admission) room(i int, r *ReplicaState, x estimates, ctx, g int64, c counts) bool {
	if r.SlotTokens > 0 {
		// Fixed slots (llama.cpp): a conversation holds one slot, one
		// sequence, whatever its size, and slots share no prefix.
		n := 0
		if i < len(c.n) {
			n = c.n[i]
		}
		return float64(int64(n+1)*r.SlotTokens) <= float64(r.KVCapacityTokens)*a.cfg.FillTarget
	}
	fit := a.fit(r)
	tot := capped(ctx, g, x.cap(fit))
	if i < len(c.n) && c.n[i] > 0 {
		tot = c.used(i, x.s) + max(tot-x.s, 0)
	}
	return tot <= fit
}

// idleWindow is the idle window in force: the learned one (0 until minIdleGaps
// gaps were seen, then the live window stands in), never longer than the
// session table's live window liveWin.
//
// With shared state it is learned only from the gaps every router measures
// together (a conversation's turns through several routers make one router's
// own gaps those of its turns, not the client's pauses): the live window until
// the store holds minIdleGaps.
func (a *admission) idleWindow(liveWin time.Duration) time.Duration {
	liveWin = max(liveWin, MinIdleWindow)
	if a.shared {
		if a.remote == nil || a.remote.GapSamples < minIdleGaps {
			return liveWin
		}
		return min(max(IdleFactor*a.remote.GapP90, MinIdleWindow), liveWin)
	}
	if a.idleWin == 0 {
		return liveWin
	}
	return min(a.idleWin, liveWin)
}
