package router

import (
	"testing"
	"time"
)

// recordingPolicy sends every request with a key to its home (or replica 0) and,
// when move is set, to replica move; it records Request.CacheLost of each call.
type recordingPolicy struct {
	lost []bool
	move int
}

func (p *recordingPolicy) Pick(_ time.Duration, req Request, _ []ReplicaState) (Decision, error) {
	p.lost = append(p.lost, req.CacheLost)
	switch {
	case p.move >= 0:
		m := p.move
		p.move = -1
		return Decision{Replica: m, Reason: ReasonMoved}, nil
	case req.Home >= 0:
		return Decision{Replica: req.Home, Reason: ReasonSticky}, nil
	}
	return Decision{Replica: 0, Reason: ReasonPlaced}, nil
}

// TestObserveCacheMarksLostContext checks the feedback behind Request.CacheLost:
// a turn served at home that reads less than half of the previous turn's prompt
// from the cache marks the conversation lost; a later turn at home that reads it
// clears the mark; turns served away from home, the first turn at a home, and a
// move do not clear it.
func TestObserveCacheMarksLostContext(t *testing.T) {
	type obs struct {
		replica, prompt, cached int
	}
	tests := []struct {
		name string
		obs  []obs // one Acquire (home 0) before each observation
		want []bool
	}{
		{"first turn only records its size", []obs{{0, 10000, 0}}, []bool{false, false}},
		{"kept: cached covers the previous prompt", []obs{{0, 10000, 3000}, {0, 11000, 9900}}, []bool{false, false, false}},
		{"lost: only the shared prefix hits", []obs{{0, 10000, 3000}, {0, 11000, 3000}}, []bool{false, false, true}},
		{"exactly half is kept", []obs{{0, 10000, 3000}, {0, 11000, 5000}}, []bool{false, false, false}},
		{"recovers when a turn at home hits again", []obs{{0, 10000, 3000}, {0, 11000, 3000}, {0, 12000, 10500}}, []bool{false, false, true, false}},
		{"a turn served elsewhere is ignored", []obs{{0, 10000, 3000}, {1, 11000, 0}}, []bool{false, false, false}},
		{"no size, no observation", []obs{{0, 10000, 3000}, {0, 0, 0}}, []bool{false, false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &recordingPolicy{move: -1}
			b, err := NewBalancer(BalancerConfig{Replicas: []string{"r0", "r1"}, Affinity: true, AffinityPolicy: p, Now: func() time.Duration { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.obs {
				d, err := b.Acquire(Facts{SessionKey: "s"})
				if err != nil {
					t.Fatal(err)
				}
				b.ObserveCache("s", o.replica, o.prompt, o.cached)
				b.Release(d.Replica)
			}
			if _, err := b.Acquire(Facts{SessionKey: "s"}); err != nil {
				t.Fatal(err)
			}
			if len(p.lost) != len(tc.want) {
				t.Fatalf("policy called %d times, want %d", len(p.lost), len(tc.want))
			}
			for i := range tc.want {
				if p.lost[i] != tc.want[i] {
					t.Errorf("call %d: CacheLost = %v, want %v (all: %v)", i, p.lost[i], tc.want[i], p.lost)
				}
			}
		})
	}

	t.Run("a move keeps the mark until the new home hits", func(t *testing.T) {
		p := &recordingPolicy{move: -1}
		b, err := NewBalancer(BalancerConfig{Replicas: []string{"r0", "r1"}, Affinity: true, AffinityPolicy: p, Now: func() time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		step := func(replica, prompt, cached int) {
			t.Helper()
			d, err := b.Acquire(Facts{SessionKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Replica != replica {
				t.Fatalf("served on %d, want %d", d.Replica, replica)
			}
			b.ObserveCache("s", d.Replica, prompt, cached)
			b.Release(d.Replica)
		}
		step(0, 10000, 3000) // placed on r0
		step(0, 11000, 3000) // lost on r0
		p.move = 1
		step(1, 12000, 3000)  // moved to r1: first turn there, still lost
		step(1, 13000, 12500) // r1 kept it
		if _, err := b.Acquire(Facts{SessionKey: "s"}); err != nil {
			t.Fatal(err)
		}
		want := []bool{false, false, true, true, false}
		for i := range want {
			if p.lost[i] != want[i] {
				t.Fatalf("CacheLost per call = %v, want %v", p.lost, want)
			}
		}
	})

	t.Run("affinity off ignores observations", func(t *testing.T) {
		b, err := NewBalancer(BalancerConfig{Replicas: []string{"r0"}, Now: func() time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		b.ObserveCache("s", 0, 10000, 0)
		if b.Sessions() != 0 {
			t.Errorf("sessions = %d, want 0", b.Sessions())
		}
	})
}
