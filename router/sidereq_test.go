package router

import (
	"testing"
	"time"
)

// sizePolicy keeps every conversation at home (placing new ones on replica 0) and
// records the PromptTokens it is told and the home's LiveTokens.
type sizePolicy struct {
	prompt []int
	live   []int64
}

func (p *sizePolicy) Pick(_ time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	p.prompt = append(p.prompt, req.PromptTokens)
	if req.Home >= 0 {
		p.live = append(p.live, reps[req.Home].LiveTokens)
		return Decision{Replica: req.Home, Reason: ReasonSticky}, nil
	}
	p.live = append(p.live, -1)
	return Decision{Replica: 0, Reason: ReasonPlaced}, nil
}

// A short side request of a conversation (Claude Code's title and topic requests,
// docs/router.md section 4: same session id, short prompt) neither shrinks the
// conversation's context estimate nor is told to the policy as its size while
// the estimate is recent; once the live window (60 s until 16 gaps are seen) has
// passed since the last full-size request, a short request is the conversation's
// new size (a compaction).
func TestSideRequestKeepsTheContextEstimate(t *testing.T) {
	p := &sizePolicy{}
	b, clk := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.AffinityPolicy = p })
	step := func(at time.Duration, prompt int) {
		t.Helper()
		clk.Advance(at - clk.Now())
		d, err := b.Acquire(Facts{SessionKey: "conv", PromptTokens: prompt})
		if err != nil {
			t.Fatal(err)
		}
		b.Release(d.Replica)
	}
	step(0, 12_000)              // first turn: placed
	step(5*time.Second, 500)     // side request: the policy is told 12,000
	step(20*time.Second, 12_400) // next turn: grows
	step(30*time.Second, 300)    // side request: 12,400 kept
	step(70*time.Second, 7_000)  // over half: the new size at once
	step(100*time.Second, 1_000) // side request of the 7,000 one
	step(131*time.Second, 1_000) // 61 s after the 7,000 one: compacted, 1,000
	step(140*time.Second, 1_100) // and grows from there
	wantPrompt := []int{12_000, 12_000, 12_400, 12_400, 7_000, 7_000, 1_000, 1_100}
	wantLive := []int64{-1, 12_000, 12_000, 12_400, 12_400, 7_000, 7_000, 1_000}
	for i := range wantPrompt {
		if p.prompt[i] != wantPrompt[i] || p.live[i] != wantLive[i] {
			t.Errorf("request %d: policy told %d tokens, home live %d; want %d, %d", i, p.prompt[i], p.live[i], wantPrompt[i], wantLive[i])
		}
	}
}

// The working-set policy's fit move compares the conversation's context with the
// room on the other replica. A side request must not make a conversation look
// small enough to fit elsewhere: it would move for good, and its next real turn
// (8,000 tokens) would not fit where it went.
func TestSideRequestDoesNotMoveTheConversation(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.KVCapacityTokens = 10_000 })
	acquire := func(key string, prompt int) Decision {
		t.Helper()
		d, err := b.Acquire(Facts{SessionKey: key, PromptTokens: prompt})
		if err != nil {
			t.Fatal(err)
		}
		b.Release(d.Replica)
		return d
	}
	a := acquire("a", 8_000).Replica
	c := acquire("c", 9_000).Replica // the emptier replica
	if c == a {
		t.Fatalf("c placed with a on %d", a)
	}
	if got := acquire("b", 3_000).Replica; got != a {
		t.Fatalf("b placed on %d, want %d (8,000 live there against 9,000)", got, a)
	}
	// a's home holds 11,000 live tokens on a 10,000-token cache; c's has 1,000
	// free. A 500-token side request of a would fit there, a itself would not.
	if d := acquire("a", 500); d.Replica != a || d.Reason != ReasonSticky {
		t.Fatalf("side request of a: %s to %d, want sticky on %d", d.Reason, d.Replica, a)
	}
	if d := acquire("a", 8_400); d.Replica != a || d.Reason != ReasonSticky {
		t.Fatalf("next turn of a: %s to %d, want sticky on %d", d.Reason, d.Replica, a)
	}
}

// A side request served at home reads a different, short prompt: its usage says
// nothing about whether the conversation's context survived, so it neither marks
// the conversation lost nor becomes the size the next turn is compared with.
func TestSideRequestIsNotCacheFeedback(t *testing.T) {
	p := &recordingPolicy{move: -1}
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.AffinityPolicy = p })
	turn := func(prompt, usagePrompt, cached int) {
		t.Helper()
		d, err := b.Acquire(Facts{SessionKey: "s", PromptTokens: prompt})
		if err != nil {
			t.Fatal(err)
		}
		b.ObserveCache("s", d.Replica, usagePrompt, cached)
		b.Release(d.Replica)
	}
	turn(10_000, 10_000, 3_000) // first turn: records the size
	turn(400, 400, 0)           // side request: nothing of it cached
	turn(11_000, 11_000, 9_900) // the conversation hits: not lost
	turn(300, 300, 0)           // another side request
	turn(12_000, 12_000, 3_000) // only the shared prefix: lost
	if _, err := b.Acquire(Facts{SessionKey: "s", PromptTokens: 12_500}); err != nil {
		t.Fatal(err)
	}
	want := []bool{false, false, false, false, false, true}
	if len(p.lost) != len(want) {
		t.Fatalf("policy called %d times, want %d", len(p.lost), len(want))
	}
	for i := range want {
		if p.lost[i] != want[i] {
			t.Errorf("call %d: CacheLost = %v, want %v (all %v)", i, p.lost[i], want[i], p.lost)
		}
	}
}

// A side request goes out with its turn, so the gap before it says nothing about
// the pauses between turns: the live window (2 x p90 of the gaps) is the same
// with and without side requests beside every turn.
func TestSideRequestsLeaveTheLiveWindowAlone(t *testing.T) {
	window := func(side bool) time.Duration {
		b, clk := newTestBalancer(t, 2, true, nil)
		at := time.Duration(0)
		for i := range 40 {
			clk.Advance(at - clk.Now())
			d, err := b.Acquire(Facts{SessionKey: "conv", PromptTokens: 10_000 + 500*i})
			if err != nil {
				t.Fatal(err)
			}
			b.Release(d.Replica)
			if side {
				d, err := b.Acquire(Facts{SessionKey: "conv", PromptTokens: 300})
				if err != nil {
					t.Fatal(err)
				}
				b.Release(d.Replica)
			}
			at += time.Duration(10+10*(i%10)) * time.Second // 10 s .. 100 s
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.sessions.LiveWindow()
	}
	without, with := window(false), window(true)
	if with != without {
		t.Errorf("live window %v with side requests, %v without", with, without)
	}
	t.Logf("live window %v", without)
}

// A side request never moves its conversation: at a home over its cache, with
// another replica that has room for the conversation, the side request (sent
// while the turn it accompanies is in flight at home, which evens the replicas'
// in-flight counts) stays at home where, before, working-set's fit move sent the
// whole conversation away on it. Checked for both policies that move.
func TestSideRequestNeverMovesTheConversation(t *testing.T) {
	for _, policy := range []string{PolicyWorkingSet, PolicyColdMove} {
		t.Run(policy, func(t *testing.T) {
			b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) {
				c.KVCapacityTokens = 10_000
				c.Policy = policy
			})
			acquire := func(key string, prompt int) Decision {
				t.Helper()
				d, err := b.Acquire(Facts{SessionKey: key, PromptTokens: prompt})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			// a (1,000) and b (10,500) on one replica, 11,500 live on a 10,000-token
			// cache; c (1,000) on the other, which has room for a. c stays in
			// flight throughout: a's turn does not move (the other replica has
			// more in flight), but once the turn is in flight at home the two
			// replicas are even, so its side request would pass the fit move's test.
			c := acquire("c", 1_000)
			a := acquire("a", 1_000)
			b.Release(a.Replica)
			bd := acquire("b", 10_500)
			b.Release(bd.Replica)
			if c.Replica == a.Replica || bd.Replica != a.Replica {
				t.Fatalf("placed a on %d, b on %d, c on %d; want a and b together", a.Replica, bd.Replica, c.Replica)
			}
			turn := acquire("a", 1_100) // a's turn: in flight at home
			if turn.Replica != a.Replica {
				t.Fatalf("a's turn went to %d (%s)", turn.Replica, turn.Reason)
			}
			side := acquire("a", 300) // its side request
			b.Release(side.Replica)
			if side.Reason == ReasonMoved || side.Replica != a.Replica {
				t.Fatalf("side request: %s to %d, want sticky on %d", side.Reason, side.Replica, a.Replica)
			}
			b.Release(turn.Replica)
			b.Release(c.Replica)
		})
	}
}

// sidePolicy keeps conversations at home (new ones on replica 0) and records what
// each request was taken for (Request.Side) and the size the policy was told.
type sidePolicy struct {
	side   []bool
	prompt []int
}

func (p *sidePolicy) Pick(_ time.Duration, req Request, _ []ReplicaState) (Decision, error) {
	p.side, p.prompt = append(p.side, req.Side), append(p.prompt, req.PromptTokens)
	if req.Home >= 0 {
		return Decision{Replica: req.Home, Reason: ReasonSticky}, nil
	}
	return Decision{Replica: 0, Reason: ReasonPlaced}, nil
}

// The side-request test compares a request with its own session's earlier
// requests in one unit (body bytes over HTTP), so other traffic that moves the
// bytes-per-token ratio (4 -> ~9.3 here, as tiny requests of other sessions did in
// an outside test) does not turn a full-size turn into a "side request" (as it
// once did: working-set then overflowed it 13 times instead of moving it).
func TestSideRequestTestIgnoresBytesPerTokenDrift(t *testing.T) {
	p := &sidePolicy{}
	b, clk := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.AffinityPolicy = p })
	for range SizeMinSeen {
		b.ObserveSize(4000, 1000) // 4 bytes per token
	}
	acquire := func(key string, bodyBytes int) {
		t.Helper()
		d, err := b.Acquire(Facts{SessionKey: key, BodyBytes: bodyBytes})
		if err != nil {
			t.Fatal(err)
		}
		b.Release(d.Replica)
	}
	acquire("conv", 13_000)
	for range 50 {
		b.ObserveSize(93_600, 10_000) // other sessions' requests: 9.36 bytes per token
	}
	if r, _ := b.BytesPerToken(); r < 9 {
		t.Fatalf("ratio %.2f bytes/token after the drift, want about 9.3", r)
	}
	clk.Advance(5 * time.Second)
	acquire("conv", 13_100) // the next full-size turn
	clk.Advance(time.Second)
	acquire("conv", 600) // a real side request
	want := []bool{false, false, true}
	for i, w := range want {
		if p.side[i] != w {
			t.Errorf("request %d (sizes 13,000, 13,100, 600 bytes): side %v, want %v (policy told %d tokens)", i, p.side[i], w, p.prompt[i])
		}
	}
}
