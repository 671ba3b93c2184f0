package router

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The cache model's stack distance: the prompts sent to a replica since a
// conversation's own last request there, plus its own; -1 when the replica has
// not seen it or dropped it past 4x its cache.
func TestCacheModelDistance(t *testing.T) {
	m := NewCacheModel()
	a, b, c := m.Hash("a"), m.Hash("b"), m.Hash("c")
	m.Touch(0, a, 400, 1000)
	m.Touch(0, b, 300, 1000)
	m.Touch(0, a, 500, 1000) // a again: its entry moves to the front with the new size
	if d := m.Distance(0, a); d != 500 {
		t.Errorf("a: %d, want 500", d)
	}
	if d := m.Distance(0, b); d != 800 {
		t.Errorf("b: %d, want 800", d)
	}
	if d := m.Distance(1, a); d != -1 {
		t.Errorf("unseen replica: %d", d)
	}
	for range 9 {
		m.Touch(0, c, 500, 1000) // c alone does not push the others out
	}
	if d := m.Distance(0, b); d != 1300 {
		t.Errorf("b after c: %d, want 1300", d)
	}
	for i := range 10 {
		m.Touch(0, m.Hash(string(rune('d'+i))), 1000, 1000)
	}
	if d := m.Distance(0, b); d != -1 || !m.Evicted(0, b, 1500) {
		t.Errorf("b under 10,000 tokens on a 1,000-token cache: %d, want dropped (-1) and evicted", d)
	}
	// Missing from a list that never dropped anything: never seen, not evicted.
	m.Touch(1, a, 400, 1000)
	if m.Evicted(1, b, 1500) || m.Evicted(2, b, 1500) {
		t.Error("a conversation the replica never saw counts as evicted")
	}
	// Unknown capacity: nothing recorded.
	m.Touch(3, a, 400, 0)
	if d := m.Distance(3, a); d != -1 {
		t.Errorf("recorded with capacity unknown: %d", d)
	}
}

// ColdMove moves a conversation the model calls evicted to a replica already
// over its cache with at least Margin fewer requests in flight; a warm
// conversation, or no such replica, leaves the decision to WorkingSet; every
// decision is recorded in the model.
func TestColdMovePick(t *testing.T) {
	newPol := func() *ColdMove {
		c := NewColdMove(2, 1, NewShortestQueue(0))
		c.Rand = rand.New(rand.NewPCG(1, 2))
		return c
	}
	reps := func(homeIn, otherIn int, otherLive int64) []ReplicaState {
		return []ReplicaState{
			{Healthy: true, InFlight: homeIn, KVCapacityTokens: 1000, LiveTokens: 900},
			{Healthy: true, InFlight: otherIn, KVCapacityTokens: 1000, LiveTokens: otherLive},
		}
	}
	x := Request{Threshold: 8, Key: "x", Home: 0, PromptTokens: 400}
	cold := func(c *ColdMove) {
		c.model.Touch(0, c.model.Hash("x"), 400, 1000)
		c.model.Touch(0, c.model.Hash("a"), 800, 1000)
		c.model.Touch(0, c.model.Hash("b"), 800, 1000) // x's distance: 2,000 > 1.5 x 1,000
	}
	c := newPol()
	c.model.Touch(0, c.model.Hash("x"), 400, 1000)
	if d, _ := c.Pick(0, x, reps(3, 0, 1200)); d.Replica != 0 || d.Reason != ReasonSticky {
		t.Errorf("warm: %+v, want sticky home", d)
	}
	c = newPol()
	cold(c)
	if d, _ := c.Pick(0, x, reps(3, 2, 1200)); d.Replica != 1 || d.Reason != ReasonMoved {
		t.Errorf("cold, other over its cache and one fewer in flight: %+v, want moved to 1", d)
	}
	if got := c.model.Distance(1, c.model.Hash("x")); got != 400 {
		t.Errorf("the move is not recorded at the target: distance %d", got)
	}
	c = newPol()
	cold(c)
	if d, _ := c.Pick(0, x, reps(3, 3, 1200)); d.Replica != 0 {
		t.Errorf("cold, equal in flight: %+v, want home", d)
	}
	c = newPol()
	cold(c)
	if d, _ := c.Pick(0, x, reps(3, 0, 500)); d.Replica != 0 {
		t.Errorf("cold, the other replica fits its cache: %+v, want home (never break a replica that fits)", d)
	}
	// Unknown capacity: the rule is off.
	c = newPol()
	cold(c)
	r := reps(3, 0, 1200)
	r[0].KVCapacityTokens = 0
	if d, _ := c.Pick(0, x, r); d.Replica != 0 {
		t.Errorf("home capacity unknown: %+v, want home", d)
	}
}

// The policy is selectable by name, at construction and at run time.
func TestColdMoveIsSelectable(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.Policy = PolicyColdMove })
	if b.Policy() != PolicyColdMove {
		t.Fatalf("policy %q", b.Policy())
	}
	if _, ok := b.policy.(*ColdMove); !ok {
		t.Fatalf("policy type %T", b.policy)
	}
	b.ObserveCapacity(1, 1234)
	if st := b.Status(); st[0].KVCapacityTokens != 0 || st[1].KVCapacityTokens != 1234 {
		t.Errorf("status capacities %d, %d; want 0 (unknown), 1234", st[0].KVCapacityTokens, st[1].KVCapacityTokens)
	}
	if err := b.SetPolicy(PolicyWorkingSet); err != nil || b.Policy() != PolicyWorkingSet {
		t.Fatalf("switch back: %v %q", err, b.Policy())
	}
	if d := mustAcquire(t, b, "s"); d.Reason != ReasonPlaced {
		t.Errorf("first request: %v", d.Reason)
	}
}

// benchAcquire runs Acquire plus Release (one decision, under cold-move with the
// cache model's lookup and update) for 100,000 sessions on 8 replicas whose
// KV capacity is known (150,000 tokens each), each request of prompt tokens,
// under the named policy. With 12,000-token prompts a replica's model list stays
// at 4 x 150,000 / 12,000 = 50 entries; with 100-token prompts it reaches its
// 4,096-entry bound (the worst case of the scan).
func benchAcquire(b *testing.B, policy string, prompt int) {
	bal, clk := newTestBalancer(b, 8, true, func(c *BalancerConfig) { c.Policy = policy })
	for i := range 8 {
		bal.ObserveCapacity(i, 150_000)
	}
	keys := sessionKeys(100_000)
	for _, k := range keys {
		d, _ := bal.Acquire(Facts{SessionKey: k, PromptTokens: prompt})
		bal.Release(d.Replica)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d, _ := bal.Acquire(Facts{SessionKey: keys[i%len(keys)], PromptTokens: prompt})
		bal.Release(d.Replica)
		i++
		if i%1024 == 0 {
			clk.Advance(time.Millisecond)
		}
	}
}

// BenchmarkAcquirePolicies compares one decision's cost under working-set and
// cold-move (the cache model's scan and update), typical and worst-case prompts.
func BenchmarkAcquirePolicies(b *testing.B) {
	for _, c := range []struct {
		policy string
		prompt int
	}{
		{PolicyWorkingSet, 12_000}, {PolicyColdMove, 12_000},
		{PolicyWorkingSet, 100}, {PolicyColdMove, 100},
	} {
		b.Run(fmt.Sprintf("%s/prompt-%d", c.policy, c.prompt), func(b *testing.B) { benchAcquire(b, c.policy, c.prompt) })
	}
}

// A run-time threshold change reaches cold-move's overflow rule as it does
// working-set's.
func TestColdMoveFollowsThresholdChange(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.Policy = PolicyColdMove })
	b.SetOverflowThreshold(2)
	if got, auto := b.OverflowThreshold(); got != 2 || auto {
		t.Fatalf("threshold %d (auto %v) after SetOverflowThreshold(2)", got, auto)
	}
	home := mustAcquire(t, b, "s").Replica
	for range 2 {
		if d := mustAcquire(t, b, "s"); d.Replica != home {
			t.Fatalf("within the threshold: %+v", d)
		}
	}
	// Three in flight at home, none elsewhere: over the threshold of 2, moves.
	if d := mustAcquire(t, b, "s"); d.Replica == home || d.Reason != ReasonMoved {
		t.Errorf("over the threshold: %+v, want moved off %d", d, home)
	}
}

// A count_tokens request (NoPrefill) neither moves a cold conversation nor
// enters the cache model.
func TestColdMoveIgnoresCountTokens(t *testing.T) {
	c := NewColdMove(2, 1, NewShortestQueue(0))
	c.model.Touch(0, c.model.Hash("x"), 400, 1000)
	c.model.Touch(0, c.model.Hash("a"), 800, 1000)
	c.model.Touch(0, c.model.Hash("b"), 800, 1000)
	reps := []ReplicaState{
		{Healthy: true, InFlight: 3, KVCapacityTokens: 1000, LiveTokens: 900},
		{Healthy: true, InFlight: 0, KVCapacityTokens: 1000, LiveTokens: 1200},
	}
	req := Request{Threshold: 8, Key: "x", Home: 0, PromptTokens: 400, NoPrefill: true}
	if d, _ := c.Pick(0, req, reps); d.Replica != 0 {
		t.Errorf("count_tokens of a cold conversation: %+v, want home", d)
	}
	if got := c.model.Distance(0, c.model.Hash("x")); got != 2000 {
		t.Errorf("count_tokens changed the model: distance %d, want 2000", got)
	}
}

// thresholdSeen records the Request.Threshold each Pick is given.
type thresholdSeen struct {
	inner Policy
	seen  []int
}

func (p *thresholdSeen) Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	p.seen = append(p.seen, req.Threshold)
	return p.inner.Pick(now, req, reps)
}

// The Balancer holds the one threshold and hands it to the policy in every
// Request: auto (max_num_seqs / 4) first, then what SetOverflowThreshold set,
// then auto again.
func TestPolicyGetsThresholdInRequest(t *testing.T) {
	p := &thresholdSeen{inner: NewWorkingSet(2, 1, NewShortestQueue(0))}
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.AffinityPolicy = p; c.MaxNumSeqs = 40 })
	mustAcquire(t, b, "s")
	b.SetOverflowThreshold(3)
	mustAcquire(t, b, "s")
	b.SetOverflowThreshold(0)
	mustAcquire(t, b, "s")
	if want := []int{10, 3, 10}; !slices.Equal(p.seen, want) {
		t.Errorf("thresholds seen %v, want %v", p.seen, want)
	}
}
