package router

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// coldConv is one conversation of the cold-start burst: its turns' prompt
// sizes, where it is, and when it acts next.
type coldConv struct {
	key     string
	prompts []int
	turn    int
	ticket  uint64
	replica int
	busy    bool // a turn is in flight, ending at next
	next    time.Duration
	held    bool
}

// The cold-start burst: 24 conversations of ~11k tokens (a 1,000-token shared
// system prompt) arriving 0.3 s apart on 4 replicas of 43,440 KV tokens (the
// default A4000 profile's capacity), nothing ended yet. Each turn adds 600
// tokens (a reply and the next input) for 6 turns, so a conversation peaks at
// ~14k: four fit a replica at their first turn, three at their peak. The
// gate's /status (Balancer.Admission) is sampled after every event: no
// replica's counted working set may ever exceed its KV capacity. The old rule
// counted a running conversation at its size now until 8 had ended and let
// four onto a replica, over its KV from their second turns (43,800 tokens).
func TestAdmissionColdStartBurstNeverCountsPastKV(t *testing.T) {
	const (
		kv     = 43_440
		system = 1_000
		perTrn = 600
		turns  = 6
		apart  = 300 * time.Millisecond
		turnT  = 1500 * time.Millisecond // a turn's service time
		pause  = 200 * time.Millisecond  // the client's pause between turns
	)
	b, now := admitBalancer(t, 4, kv, AdmissionConfig{MaxHold: -1})
	var convs []*coldConv
	for i := range 24 {
		c := &coldConv{key: fmt.Sprint("c", i), next: time.Duration(i) * apart, replica: -1}
		first := 10_600 + 20*(i%11) // 10,600-10,800 tokens
		for k := range turns {
			c.prompts = append(c.prompts, first+k*perTrn)
		}
		convs = append(convs, c)
	}
	seen := map[int]bool{} // replicas that have read the system prompt
	samples, worst, done := 0, 0.0, 0
	check := func() {
		st := b.Admission()
		samples++
		for i, ws := range st.WorkingTokens {
			worst = max(worst, float64(ws)/kv)
			if ws > kv {
				t.Fatalf("at %v replica %d counts %d conversations, %d tokens > KV %d", *now, i, st.Counted[i], ws, kv)
			}
		}
	}
	for step := time.Duration(0); done < len(convs); step += 50 * time.Millisecond {
		if step > 30*time.Minute {
			t.Fatalf("%d of %d conversations done after 30 simulated minutes", done, len(convs))
		}
		*now = step
		for _, c := range convs {
			if c.turn == turns || c.next > step {
				continue
			}
			if c.busy {
				p := c.prompts[c.turn]
				cached := 0
				switch {
				case c.turn > 0:
					cached = c.prompts[c.turn-1]
				case seen[c.replica]:
					cached = system
				}
				seen[c.replica] = true
				b.ObserveCache(c.key, c.replica, p, cached)
				b.ReleaseSession(c.replica, c.key)
				c.busy, c.turn, c.next = false, c.turn+1, step+pause
				if c.turn == turns {
					done++
				}
				check()
				continue
			}
			f := Facts{SessionKey: c.key, PromptTokens: c.prompts[c.turn], Ticket: c.ticket, Continuing: c.turn > 0}
			d, info, err := b.Admit(f)
			if errors.Is(err, ErrHold) {
				c.ticket, c.held, c.next = info.Ticket, true, step+HoldPoll
				continue
			}
			if err != nil {
				t.Fatalf("%s turn %d: %v", c.key, c.turn, err)
			}
			if info.Admission == AdmitLimit || info.Admission == AdmitCapacityUnknown {
				t.Fatalf("%s turn %d: admission %v", c.key, c.turn, info.Admission)
			}
			c.ticket, c.replica, c.busy, c.next = 0, d.Replica, true, step+turnT
			check()
		}
	}
	held := 0
	for _, c := range convs {
		if c.held {
			held++
		}
	}
	st := b.Admission()
	t.Logf("%d samples, largest counted working set %.3f x KV, %d conversations held, S %d, E %d (%s), M %d",
		samples, worst, held, st.SharedPrefixTokens, st.ExpectedContextTokens, st.ExpectedSource, st.RunningPeakTokens)
	if held == 0 {
		t.Errorf("nothing was held: 24 conversations where 12 fit, the test tested nothing")
	}
	if st.Outcomes.AtLimit+st.Outcomes.Refused != 0 {
		t.Errorf("outcomes %+v: want none at a limit", st.Outcomes)
	}
}

// Before anything has ended a conversation counts at its prior (its own part
// once more), capped at half a replica: on one replica of 20,000 tokens,
// 6,000-token first prompts count at 10,000 each, so two are admitted where
// the old rule (at their size now) admitted three; a guess never holds a
// replica to one conversation.
func TestAdmissionPriorCountsGrowthTwoPerReplica(t *testing.T) {
	b, _ := admitBalancer(t, 1, 20_000, AdmissionConfig{MaxHold: -1})
	admitted := 0
	for i := range 4 {
		if _, _, err := b.Admit(Facts{SessionKey: fmt.Sprint("c", i), PromptTokens: 6000}); err != nil {
			if !errors.Is(err, ErrHold) {
				t.Fatal(err)
			}
			break
		}
		admitted++
	}
	st := b.Admission()
	if admitted != 2 || st.WorkingTokens[0] != 20_000 || st.ExpectedSource != "prior" {
		t.Fatalf("admitted %d, working set %v, source %q; want 2 at their capped prior (20000) from the prior", admitted, st.WorkingTokens, st.ExpectedSource)
	}
}
