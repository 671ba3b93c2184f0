package loadgen

import (
	"math"
	"testing"
	"time"
)

// A load busy for the first half of every poll interval, in lock step with a
// fixed grid, reads as always busy (or never) on the grid; jittered polls read
// the share of time busy, one half.
func TestJitteredPollsDoNotAliasWithLockStepLoad(t *testing.T) {
	const iv = time.Second
	busy := func(at time.Duration) bool { return at%iv < iv/2 }
	p := NewPollSchedule(1, "off", 0, iv)
	n, hits := 0, 0
	for range 2000 {
		at := p.Next()
		n++
		if busy(at) {
			hits++
		}
	}
	if share := float64(hits) / float64(n); math.Abs(share-0.5) > 0.05 {
		t.Errorf("busy share from jittered polls %.3f, want 0.5 +- 0.05", share)
	}
	// Each poll lies in its own interval, and the schedule is a function of seed
	// and variant only.
	a, b := NewPollSchedule(7, "on", 3*iv, iv), NewPollSchedule(7, "on", 3*iv, iv)
	for k := range 100 {
		x, y := a.Next(), b.Next()
		lo := 3*iv + time.Duration(k)*iv
		if x != y || x < lo || x >= lo+iv {
			t.Fatalf("poll %d at %v (again %v), want the same instant in [%v, %v)", k, x, y, lo, lo+iv)
		}
	}
}
