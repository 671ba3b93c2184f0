package simhttp

import (
	"math"
	"slices"
	"testing"

	"github.com/lmwarden/warden/internal/vllmdp"
	"github.com/lmwarden/warden/sim"
)

func TestDPBalancerScore(t *testing.T) {
	for _, tc := range []struct {
		name string
		rank vllmdp.Rank
		want float64
	}{
		{"idle", vllmdp.Rank{}, 0},
		{"queue counts", vllmdp.Rank{Waiting: 1, Running: 3}, 4},
		{"own in-flight count dominates a stale snapshot", vllmdp.Rank{Running: 1, InFlight: 5}, 5},
		// waiting*6*max(0, kv-0.5) = 2*6*0.4 added to waiting+running = 5.
		{"kv pressure with a queue", vllmdp.Rank{Waiting: 2, Running: 3, KVUsage: 0.9}, 5 + 2*6*0.4},
		{"kv pressure without a queue", vllmdp.Rank{Running: 3, KVUsage: 0.9}, 3},
		{"kv under half", vllmdp.Rank{Waiting: 2, Running: 3, KVUsage: 0.4}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newDPBalancer(1)
			b.ranks[0] = tc.rank
			if got := b.ranks[0].Score(); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("score %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDPBalancerPick(t *testing.T) {
	t.Run("idle ranks take turns", func(t *testing.T) {
		b := newDPBalancer(4)
		var got []int
		for range 8 {
			got = append(got, b.pick())
		}
		if want := []int{0, 1, 2, 3, 0, 1, 2, 3}; !slices.Equal(got, want) {
			t.Errorf("picks %v, want %v", got, want)
		}
	})
	t.Run("ties resolve from the rotating start", func(t *testing.T) {
		b := newDPBalancer(3)
		b.refresh([]sim.Stats{{Running: 2}, {Running: 2}, {Running: 2}})
		b.start = 1
		if got := b.pick(); got != 1 {
			t.Errorf("pick %d, want 1 (scan starts at 1)", got)
		}
		if b.start != 2 {
			t.Errorf("start %d, want 2 after a decision", b.start)
		}
	})
	t.Run("stale snapshot plus optimistic count", func(t *testing.T) {
		b := newDPBalancer(2)
		b.refresh([]sim.Stats{{Running: 0}, {Running: 3}})
		// Rank 0 looks idle; each pick adds one to its waiting count and in-flight,
		// so picks go there until its score ties rank 1's 3; the tie goes to the
		// rank the rotating scan reaches first (rank 1 on the 4th decision).
		var got []int
		for range 5 {
			got = append(got, b.pick())
		}
		if want := []int{0, 0, 0, 1, 0}; !slices.Equal(got, want) {
			t.Errorf("picks %v, want %v", got, want)
		}
		// A new snapshot forgets the optimistic counts; in-flight stays until release.
		b.refresh([]sim.Stats{{Running: 0}, {Running: 0}})
		if b.ranks[0].Waiting != 0 || b.ranks[0].InFlight != 4 {
			t.Errorf("after refresh: %+v", b.ranks[0])
		}
		for range 4 {
			b.release(0)
		}
		b.release(0) // an extra release does not go negative
		if b.ranks[0].InFlight != 0 {
			t.Errorf("in flight %d", b.ranks[0].InFlight)
		}
	})
	t.Run("pin counts in flight", func(t *testing.T) {
		b := newDPBalancer(2)
		b.pin(0)
		b.pin(0)
		if got := b.pick(); got != 1 {
			t.Errorf("pick %d, want 1 (rank 0 has 2 pinned in flight)", got)
		}
	})
}

func TestHistogram(t *testing.T) {
	h := newHistogram([]float64{0.1, 1, 10})
	for _, v := range []float64{0.05, 0.1, 0.5, 20} {
		h.observe(v)
	}
	c := h.cumulative()
	// le is inclusive: 0.1 falls in the 0.1 bucket.
	if c[0.1] != 2 || c[1] != 3 || c[10] != 3 || h.count != 4 {
		t.Errorf("buckets %v count %d", c, h.count)
	}
	if math.Abs(h.sum-20.65) > 1e-9 {
		t.Errorf("sum %v", h.sum)
	}
}
