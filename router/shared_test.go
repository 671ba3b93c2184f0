package router

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// countingState is a SharedState that holds no homes and counts what the
// Balancer tells it is in flight per replica.
type countingState struct{ inflight []int }

func (c *countingState) Home(string) (SharedHome, time.Duration, bool) {
	return SharedHome{Replica: -1}, 0, false
}
func (c *countingState) Claim(string, string, []int, bool, bool, *Reservation) (ClaimResult, time.Duration, bool) {
	return ClaimResult{Replica: -1}, 0, false
}
func (c *countingState) ObserveFirstTurn(int)                     {}
func (c *countingState) Began(uint64, bool)                       {}
func (c *countingState) Ended(uint64)                             {}
func (c *countingState) Refresh() (time.Duration, bool)           { return 0, false }
func (c *countingState) Forget(string, int) (time.Duration, bool) { return 0, false }
func (c *countingState) Acquired(i int)                           { c.inflight[i]++ }
func (c *countingState) Released(i int)                           { c.inflight[i]-- }
func (c *countingState) Claimed(i int)                            { c.inflight[i]++ }
func (c *countingState) Remote(int) RemoteLoad                    { return RemoteLoad{} }
func (c *countingState) RemoteAdmission() *RemoteAdmission        { return nil }
func (c *countingState) Drain(int) DrainMode                      { return DrainNone }
func (c *countingState) SetDrain(int, DrainMode) (time.Duration, bool) {
	return 0, false
}

// Every way a request ends (Release, or ReleaseSession as the proxy calls it)
// tells the shared state, so the counts other routers see return to 0; a
// ReleaseSession that skipped it left 56 and 152 phantom requests in flight in
// the two-router e2e test.
func TestSharedInFlightReturnsToZeroOnEveryRelease(t *testing.T) {
	st := &countingState{inflight: make([]int, 4)}
	b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Shared = st })
	for i := range 16 {
		d := mustAcquire(t, b, fmt.Sprint("s", i))
		if i%2 == 0 {
			b.Release(d.Replica)
		} else {
			b.ReleaseSession(d.Replica, fmt.Sprint("s", i))
		}
	}
	for i, n := range st.inflight {
		if n != 0 {
			t.Errorf("replica %d: shared in-flight %d after every request ended, want 0", i, n)
		}
	}
}

// The /metrics window's ratio (this router's body bytes over every router's
// prompt tokens) is not used with shared state: a router that joins after
// another has served alone would read 0.08 bytes per token and place and move
// by working sets 40x too large. The estimate stays the assumed one until the
// responses calibrate it.
func TestSharedStateIgnoresTheMetricsWindowRatio(t *testing.T) {
	b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Shared = &countingState{inflight: make([]int, 4)} })
	b.ObserveSizeWindow(2_000, 24_000) // a window in which the other router sent most of the tokens
	if r, src := b.BytesPerToken(); r != BytesPerTokenEstimate || src != SizeAssumed {
		t.Errorf("BytesPerToken with shared state after a /metrics window = %.2f from %s, want %d assumed", r, src, BytesPerTokenEstimate)
	}
	if got, want := b.EstimateTokens(4_000), 1_000; got != want {
		t.Errorf("EstimateTokens(4000 bytes) = %d, want %d", got, want)
	}
	b.ObserveSize(3_350, 1_000)
	for range SizeMinSeen {
		b.ObserveSize(3_350, 1_000)
	}
	if r, src := b.BytesPerToken(); src != SizeResponses || r < 3.34 || r > 3.36 {
		t.Errorf("after %d responses: %.2f from %s, want 3.35 from responses", SizeMinSeen+1, r, src)
	}
}

// admissionState is a SharedState whose other routers' admission gates say
// remote (and that holds nothing else).
type admissionState struct {
	countingState
	remote *RemoteAdmission
}

func (s *admissionState) RemoteAdmission() *RemoteAdmission { return s.remote }

// With shared state the gate counts the conversations other routers' gates
// count (once, when both count one) and waits behind another router's older
// waiter: one replica of 10,000 tokens, conversations of 6,000.
func TestAdmissionCountsOtherRoutersConversations(t *testing.T) {
	st := &admissionState{countingState: countingState{inflight: make([]int, 1)}}
	b, clk := newTestBalancer(t, 1, true, func(c *BalancerConfig) {
		c.Shared, c.KVCapacityTokens = st, 10_000
		c.Admission = AdmissionConfig{Mode: AdmissionFit, FillTarget: 1, MaxHold: -1}
	})
	// Another router counts "x" on the replica: "a" waits here.
	st.remote = &RemoteAdmission{Convs: map[uint64]RemoteConv{SessionID("x"): {Replica: 0, Tokens: 6000}}}
	if _, info, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 6000}); !errors.Is(err, ErrHold) {
		t.Fatalf("a with the replica full through another router: %+v %v, want ErrHold", info, err)
	}
	if st := b.Admission(); st.RemoteConversations != 1 || st.Counted[0] != 1 || st.WorkingTokens[0] != 6000 {
		t.Fatalf("status: %+v", st)
	}
	// The other router's conversation ended: room. But its waiter, older than
	// ours by more than a poll, goes first.
	st.remote = &RemoteAdmission{Convs: map[uint64]RemoteConv{}, Waiting: 1, OldestHeld: 10 * time.Second}
	clk.Advance(time.Second)
	_, info, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 6000, Ticket: 1})
	if !errors.Is(err, ErrHold) {
		t.Fatalf("a behind an older waiter of another router: %+v %v, want ErrHold", info, err)
	}
	st.remote = &RemoteAdmission{Convs: map[uint64]RemoteConv{}}
	d, info, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 6000, Ticket: info.Ticket})
	if err != nil || info.Admission != AdmitHeld {
		t.Fatalf("a once the other waiter went: %+v %+v %v", d, info, err)
	}
	// Both routers count "a" (the other saw a turn of it, not its first): it
	// counts once (nothing ended: at its prior, 2 x 6,000, capped at half the
	// replica, below its 6,000 now); the share publishes its context and the
	// first prompt this gate admitted.
	st.remote = &RemoteAdmission{Convs: map[uint64]RemoteConv{SessionID("a"): {Replica: 0, Tokens: 6000}}}
	if st := b.Admission(); st.Counted[0] != 1 || st.RemoteConversations != 1 || st.WorkingTokens[0] != 6000 {
		t.Fatalf("a conversation both routers count: counted %v at %v tokens, want 1 at 6000", st.Counted, st.WorkingTokens)
	}
	sh := b.AdmissionShare()
	if !sh.On || len(sh.Convs) != 1 || sh.Convs[0].ID != SessionID("a") || sh.Convs[0].Tokens != 6000 || sh.Convs[0].First != 6000 {
		t.Fatalf("published share %+v, want a at 6000 tokens, first 6000", sh)
	}
	// The other gate saw a later, longer turn: the largest context counts.
	st.remote = &RemoteAdmission{Convs: map[uint64]RemoteConv{SessionID("a"): {Replica: 0, Tokens: 11_000}}}
	if st := b.Admission(); st.Counted[0] != 1 || st.WorkingTokens[0] != 11_000 {
		t.Fatalf("a counted larger by the other gate: counted %v at %v tokens, want 1 at 11000", st.Counted, st.WorkingTokens)
	}
}
