package router

import (
	"testing"
	"time"
)

// TestResponseContinuationGoesToItsReplica: a learned response id pins its
// continuation to the replica that produced it even over the overflow threshold,
// with affinity on or off; an unknown id routes by the session key; an unhealthy
// producer gives way (the replica's store is gone with it).
func TestResponseContinuationGoesToItsReplica(t *testing.T) {
	for _, affinity := range []bool{true, false} {
		b, _ := newTestBalancer(t, 4, affinity, func(c *BalancerConfig) { c.OverflowThreshold = 1 })
		b.LearnResponse("resp_a", 2)
		for range 3 { // replica 2 goes over the threshold
			d, err := b.Acquire(Facts{ResponseID: "resp_a", SessionKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Replica != 2 || d.Reason != ReasonResponse {
				t.Errorf("affinity %v: continuation of resp_a: %+v, want replica 2 (response)", affinity, d)
			}
		}
		d, err := b.Acquire(Facts{ResponseID: "resp_unknown", SessionKey: "s2"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason == ReasonResponse {
			t.Errorf("affinity %v: unknown id: %+v, want routing by the session key", affinity, d)
		}
		b.SetHealthy(2, false)
		if d, err := b.Acquire(Facts{ResponseID: "resp_a", SessionKey: "s"}); err != nil || d.Replica == 2 {
			t.Errorf("affinity %v: producer down: %+v %v, want another replica", affinity, d, err)
		}
	}
}

// homeStore is an in-memory SharedState holding homes (first write wins) and
// in-flight counts: two Balancers on one homeStore are two routers on one store.
type homeStore struct {
	homes    map[string]int
	inflight []int
	drains   map[int]DrainMode // nil: none
}

func (s *homeStore) Home(k string) (SharedHome, time.Duration, bool) {
	if r, ok := s.homes[k]; ok {
		return SharedHome{Replica: r, Token: "t"}, 0, true
	}
	return SharedHome{Replica: -1}, 0, true
}
func (s *homeStore) Claim(k, expect string, cands []int, _, _ bool, _ *Reservation) (ClaimResult, time.Duration, bool) {
	if r, ok := s.homes[k]; ok && expect != "t" { // another router wrote first
		s.inflight[r]++
		return ClaimResult{Replica: r, Adopted: true}, 0, true
	}
	s.homes[k] = cands[0]
	s.inflight[cands[0]]++
	return ClaimResult{Replica: cands[0]}, 0, true
}
func (s *homeStore) Refresh() (time.Duration, bool)           { return 0, true }
func (s *homeStore) Forget(string, int) (time.Duration, bool) { return 0, true }
func (s *homeStore) Acquired(i int)                           { s.inflight[i]++ }
func (s *homeStore) Released(i int)                           { s.inflight[i]-- }
func (s *homeStore) Claimed(int)                              {}
func (s *homeStore) Remote(int) RemoteLoad                    { return RemoteLoad{} }
func (s *homeStore) RemoteAdmission() *RemoteAdmission        { return nil }
func (s *homeStore) ObserveFirstTurn(int)                     {}
func (s *homeStore) Began(uint64, bool)                       {}
func (s *homeStore) Ended(uint64)                             {}
func (s *homeStore) Drain(i int) DrainMode                    { return s.drains[i] }
func (s *homeStore) SetDrain(i int, m DrainMode) (time.Duration, bool) {
	if s.drains == nil {
		s.drains = map[int]DrainMode{}
	}
	s.drains[i] = m
	return 0, true
}

// TestResponseHomeSharedThroughState: router A learns a response; router B,
// which never saw it, sends its continuation to the same replica; learning
// leaves the store's in-flight counts unchanged.
func TestResponseHomeSharedThroughState(t *testing.T) {
	st := &homeStore{homes: map[string]int{}, inflight: make([]int, 4)}
	a, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Shared = st })
	b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Shared = st; c.Seed = 9 })
	a.LearnResponse("resp_x", 3)
	for i, n := range st.inflight {
		if n != 0 {
			t.Errorf("after LearnResponse: store in-flight on %d = %d, want 0", i, n)
		}
	}
	d, err := b.Acquire(Facts{ResponseID: "resp_x"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Replica != 3 || d.Reason != ReasonResponse {
		t.Errorf("router B: %+v, want replica 3 (response) from the shared store", d)
	}
}
