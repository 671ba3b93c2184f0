package router

import (
	"slices"
	"time"
)

// ring keeps the last size values added; once full, each add overwrites the
// oldest. The zero value holds nothing and keeps nothing: make one with newRing.
type ring[T any] struct {
	buf  []T
	next int // where the next add goes once full
	size int
}

// newRing returns an empty ring of size values (size >= 1).
func newRing[T any](size int) ring[T] { return ring[T]{size: size} }

// add keeps v, overwriting the oldest value when the ring is full.
func (r *ring[T]) add(v T) {
	if len(r.buf) < r.size {
		r.buf = append(r.buf, v)
	} else {
		r.buf[r.next] = v
	}
	r.next = (r.next + 1) % r.size
}

// values returns the kept values in storage order (not the order of adding once
// the ring has wrapped); the caller must not keep or change the slice.
func (r *ring[T]) values() []T { return r.buf }

// len returns how many values are kept (at most size).
func (r *ring[T]) len() int { return len(r.buf) }

// reset forgets every value.
func (r *ring[T]) reset() { r.buf, r.next = r.buf[:0], 0 }

// gapWindow learns a window from recent gaps: factor x the 90th percentile of
// the last samples gaps (index len*9/10 of the sorted ring), at least lo and at
// most hi (hi 0: no upper bound), once minGaps gaps are kept. The session
// table's live window and the admission gate's idle window are both this rule
// (docs/routing.md, "Live window" and "Admission").
type gapWindow struct {
	gaps    ring[time.Duration]
	seen    int // gaps added since the last reset
	every   int // add reports a recompute every this many gaps
	minGaps int
	factor  time.Duration
	lo, hi  time.Duration
}

// newGapWindow returns a gapWindow keeping samples gaps (see gapWindow).
func newGapWindow(samples, minGaps, every int, factor, lo, hi time.Duration) gapWindow {
	return gapWindow{gaps: newRing[time.Duration](samples), every: every, minGaps: minGaps, factor: factor, lo: lo, hi: hi}
}

// add keeps gap g and reports whether the window is due to be derived again
// (every every-th gap since the last reset).
func (w *gapWindow) add(g time.Duration) bool {
	w.gaps.add(g)
	w.seen++
	return w.seen%w.every == 0
}

// window returns factor x the gaps' 90th percentile clamped to [lo, hi]; ok is
// false while fewer than minGaps gaps are kept.
func (w *gapWindow) window() (d time.Duration, ok bool) {
	if w.gaps.len() < w.minGaps {
		return 0, false
	}
	s := slices.Clone(w.gaps.values())
	slices.Sort(s)
	d = max(w.factor*s[len(s)*9/10], w.lo)
	if w.hi > 0 {
		d = min(d, w.hi)
	}
	return d, true
}

// reset forgets every gap.
func (w *gapWindow) reset() {
	w.gaps.reset()
	w.seen = 0
}
