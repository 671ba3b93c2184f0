package router

import (
	"slices"
	"testing"
	"time"
)

func TestRingKeepsTheLastSizeValues(t *testing.T) {
	r := newRing[int](3)
	if r.len() != 0 || len(r.values()) != 0 {
		t.Fatalf("new ring holds %v", r.values())
	}
	for v := 1; v <= 2; v++ {
		r.add(v)
	}
	if got := r.values(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("after 1, 2: %v, want [1 2]", got)
	}
	for v := 3; v <= 5; v++ {
		r.add(v)
	}
	// 4 overwrote 1, 5 overwrote 2: storage order, the oldest (3) in the middle.
	if got := r.values(); !slices.Equal(got, []int{4, 5, 3}) || r.len() != 3 {
		t.Fatalf("after 1..5: %v (len %d), want [4 5 3]", got, r.len())
	}
	r.reset()
	r.add(9)
	if got := r.values(); !slices.Equal(got, []int{9}) {
		t.Fatalf("after reset and 9: %v, want [9]", got)
	}
}

func TestGapWindow(t *testing.T) {
	s := time.Second
	w := newGapWindow(10, 4, 2, 2, 5*s, 60*s)
	if _, ok := w.window(); ok {
		t.Fatal("window known with no gaps")
	}
	var due []bool
	for _, g := range []time.Duration{1 * s, 2 * s, 3 * s} {
		due = append(due, w.add(g))
	}
	if !slices.Equal(due, []bool{false, true, false}) {
		t.Fatalf("add reported due %v, want every 2nd: [false true false]", due)
	}
	if _, ok := w.window(); ok {
		t.Fatal("window known with 3 gaps, want at least 4")
	}
	w.add(4 * s)
	// Sorted [1 2 3 4]: index 4*9/10 = 3 -> 4 s, x2 = 8 s.
	if d, ok := w.window(); !ok || d != 8*s {
		t.Fatalf("window of 1..4 s: %v %v, want 8s", d, ok)
	}
	for range 10 {
		w.add(s / 10)
	}
	// Ten 100 ms gaps (the ring holds 10): 200 ms, raised to lo.
	if d, _ := w.window(); d != 5*s {
		t.Fatalf("window of 100 ms gaps: %v, want lo 5s", d)
	}
	for range 10 {
		w.add(time.Minute)
	}
	if d, _ := w.window(); d != 60*s {
		t.Fatalf("window of 1 min gaps: %v, want hi 60s", d)
	}
	unbounded := newGapWindow(4, 1, 1, 2, 0, 0)
	unbounded.add(time.Hour)
	if d, _ := unbounded.window(); d != 2*time.Hour {
		t.Fatalf("hi 0: %v, want 2h (no upper bound)", d)
	}
	w.reset()
	if _, ok := w.window(); ok || w.add(s) {
		t.Fatal("after reset: window known or first gap due")
	}
}
