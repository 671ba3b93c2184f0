package sim

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// run drives an engine until idle, collecting every event with its instant.
type timedEvent struct {
	At time.Duration
	Event
}

func drain(t testing.TB, e *Engine, now time.Duration) ([]timedEvent, time.Duration) {
	t.Helper()
	var out []timedEvent
	res := e.Step(now)
	for steps := 0; ; steps++ {
		for _, ev := range res.Events {
			out = append(out, timedEvent{now, ev})
		}
		if !res.Busy {
			return out, now
		}
		if steps > 1_000_000 {
			t.Fatal("engine did not go idle")
		}
		now = res.NextAt
		res = e.Step(now)
	}
}

func testPrompt(seed, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(mix64(uint64(seed)<<32|uint64(i))) | NumReservedTokens
	}
	return p
}

func newTestEngine(t testing.TB, mod func(*EngineConfig)) *Engine {
	t.Helper()
	cfg := EngineConfig{Profile: ProfileA4000Qwen3_4B}
	if mod != nil {
		mod(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEngineBasicEndToEnd(t *testing.T) {
	e := newTestEngine(t, func(c *EngineConfig) { c.EmitTokens = true })
	if err := e.Submit(&Request{ID: "a", Prompt: testPrompt(1, 100), MaxTokens: 5}, 0); err != nil {
		t.Fatal(err)
	}
	evs, end := drain(t, e, 0)
	var kinds []string
	var toks []uint32
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind.String())
		if ev.Kind == EventToken || ev.Kind == EventFirstToken {
			toks = append(toks, ev.Token)
		}
	}
	want := "[first_token token token token token finished]"
	if got := fmt.Sprint(kinds); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if got := Tokenize(nil, Detokenize(toks)); fmt.Sprint(got) != fmt.Sprint(toks) {
		t.Errorf("detokenize round trip: %v -> %v", toks, got)
	}
	if end <= 0 {
		t.Errorf("no simulated time passed")
	}
	s := e.Stats()
	if s.PrefixQueries != 100 || s.PrefixHits != 0 || s.GenerationTokens != 5 || s.RequestsFinished != 1 || s.PromptTokens != 100 {
		t.Errorf("stats %+v", s)
	}
	if s.KVUsage != 0 || s.Running != 0 || s.LiveContextTokens != 0 {
		t.Errorf("engine not empty after finishing: %+v", s)
	}
	// The same prompt again hits floor((100-1)/16)*16 = 96 tokens.
	if err := e.Submit(&Request{ID: "b", Prompt: testPrompt(1, 100), MaxTokens: 5}, end); err != nil {
		t.Fatal(err)
	}
	drain(t, e, end)
	if s := e.Stats(); s.PrefixHits != 96 {
		t.Errorf("second identical prompt hit %d, want 96", s.PrefixHits)
	}
	if err := e.Submit(&Request{ID: "c", Prompt: testPrompt(1, 32768), MaxTokens: 1}, end); !errors.Is(err, ErrPromptTooLong) {
		t.Errorf("oversize prompt: %v", err)
	}
}
