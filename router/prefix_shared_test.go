package router

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// sharedPromptBody is a chat request body as a generic OpenAI client sends it: a
// ~5 KB system prompt shared by every conversation, then conversation c's turns
// up to turn (1-based), each a short user message and, before the next, the
// assistant's reply.
func sharedPromptBody(c, turn int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var sys strings.Builder
	for i := 0; sys.Len() < 5000; i++ {
		fmt.Fprintf(&sys, "Rule %d: keep the code simple, test what you change, and explain each step. ", i)
	}
	msgs := []msg{{"system", sys.String()}}
	for t := 1; t <= turn; t++ {
		if t > 1 {
			msgs = append(msgs, msg{"assistant", fmt.Sprintf("Done with step %d of conversation %d; the tests pass.", t-1, c)})
		}
		msgs = append(msgs, msg{"user", fmt.Sprintf("Conversation %d, turn %d: fix the bug in file_%d.go", c, t, c)})
	}
	body, err := json.Marshal(struct {
		Model     string `json:"model"`
		Messages  []msg  `json:"messages"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
	}{"qwen", msgs, 512, true})
	if err != nil {
		panic(err)
	}
	return body
}

// TestBalancerKeylessSharedSystemPrompt is a user's case (docs/router.md failure
// case 1; sgl-project/sglang#31170 met it in SGLang: agents with one big system
// prompt collapsing onto one rank): keyless requests sharing a 5 KB system
// prompt, with short unique first messages, each matching the prompt on the
// replica that saw it first for well over half their pieces. 8 conversations one
// after another then 8 at once all went to one replica by prefix while three
// were idle; 16 at once split 9 and 7 on two. The third new conversation on must
// go by load, and every conversation's later turns still follow it by prefix.
func TestBalancerKeylessSharedSystemPrompt(t *testing.T) {
	hashes := func(c, turn int) []uint64 { return PrefixHashesBytes(nil, sharedPromptBody(c, turn), 64, 0) }
	if p, s := len(hashes(0, 1)), len(hashes(0, 1))-len(PrefixHashesBytes(nil, sharedPromptBody(0, 1)[:5000], 64, 0)); float64(p-s) < PrefixMinMatch*float64(p) {
		t.Fatalf("the shared prompt is only %d of %d pieces: not the case (under PrefixMinMatch)", p-s, p)
	}
	spread := func(t *testing.T, b *Balancer) (lo, hi int) {
		lo, hi = 1<<30, -1
		for _, r := range b.Status() {
			lo, hi = min(lo, r.InFlight), max(hi, r.InFlight)
		}
		return lo, hi
	}
	acquire := func(t *testing.T, b *Balancer, c, turn int) Decision {
		t.Helper()
		d, err := b.Acquire(Facts{Prefix: hashes(c, turn)})
		if err != nil {
			t.Fatal(err)
		}
		b.RecordPrefix(d.Replica, hashes(c, turn))
		if c >= 2 && turn == 1 && d.Reason == ReasonPrefix {
			t.Errorf("new conversation %d: %+v, want placed by load (no-key): its match is the shared prompt only", c, d)
		}
		return d
	}
	t.Run("8 in a row then 8 at once", func(t *testing.T) {
		b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Keyless = KeylessPrefix })
		home := make([]int, 16)
		for c := range 8 {
			home[c] = acquire(t, b, c, 1).Replica
			b.Release(home[c])
		}
		for c := 8; c < 16; c++ {
			home[c] = acquire(t, b, c, 1).Replica
		}
		if lo, hi := spread(t, b); hi-lo > 1 {
			t.Errorf("8 at once: in flight %d to %d per replica, want within 1 (homes %v)", lo, hi, home)
		}
		for c := 8; c < 16; c++ {
			b.Release(home[c])
		}
		// Continuation turns go to their conversation's replica by prefix.
		for turn := 2; turn <= 3; turn++ {
			for c := range 16 {
				d, err := b.Acquire(Facts{Prefix: hashes(c, turn)})
				if err != nil {
					t.Fatal(err)
				}
				if d.Replica != home[c] || d.Reason != ReasonPrefix {
					t.Errorf("conversation %d turn %d: %+v, want replica %d by prefix", c, turn, d, home[c])
				}
				b.RecordPrefix(d.Replica, hashes(c, turn))
				b.Release(d.Replica)
			}
		}
	})
	t.Run("16 at once", func(t *testing.T) {
		b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Keyless = KeylessPrefix })
		var home []int
		for c := range 16 {
			home = append(home, acquire(t, b, c, 1).Replica)
		}
		if lo, hi := spread(t, b); hi-lo > 2 {
			t.Errorf("16 at once: in flight %d to %d per replica, want within 2 (homes %v)", lo, hi, home)
		}
		if slices.Max(home) == slices.Min(home) {
			t.Errorf("16 at once all on replica %d", home[0])
		}
	})
}
