package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	cfg := EngineConfig{Profile: ProfileA4000Qwen3_4BLockstep} // rule tests: deterministic steps
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

// stepDurations runs n one-token decode steps of one request on an engine of
// profile p seeded with seed and returns each step's duration.
func stepDurations(t *testing.T, p Profile, seed uint64, n int) []time.Duration {
	t.Helper()
	e, err := NewEngine(EngineConfig{Profile: p, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, e, "a", testPrompt(1, 100), n+1, 0)
	var now time.Duration
	var out []time.Duration
	for res := e.Step(now); res.Busy && len(out) <= n; res = e.Step(now) {
		out = append(out, res.NextAt-now)
		now = res.NextAt
	}
	return out[1:] // drop the prefill step; decode i runs at context 101+i
}

// TestStepTimeVariability: with StepTimeSigma > 0 each step takes the modelled
// time times a lognormal factor drawn from the engine's seeded stream: the same
// seed gives the same steps, another seed others, the log-durations have the
// profile's sigma around the modelled median, and sigma 0 gives the modelled
// time exactly.
func TestStepTimeVariability(t *testing.T) {
	p := ProfileA4000Qwen3_4B
	if p.StepTimeSigma != VLLMStepTimeSigma {
		t.Fatalf("a4000 StepTimeSigma %v, want VLLMStepTimeSigma %v", p.StepTimeSigma, VLLMStepTimeSigma)
	}
	const n = 2000
	a, b := stepDurations(t, p, 7, n), stepDurations(t, p, 7, n)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different step durations")
	}
	if c := stepDurations(t, p, 8, n); slices.Equal(a, c) {
		t.Fatal("seeds 7 and 8 gave the same step durations")
	}
	// Decode at context 100..2100: the modelled time barely moves (KV reads are
	// small beside the weights), so compare each step with its own model.
	var sum, sumSq float64
	for i, d := range a {
		model := p.DecodeStepTime(1, 101+i)
		x := math.Log(float64(d) / float64(model))
		sum += x
		sumSq += x * x
	}
	mean := sum / float64(len(a))
	sd := math.Sqrt(sumSq/float64(len(a)) - mean*mean)
	// Standard errors over 2000 draws: mean 0.1/sqrt(2000) = 0.002, sd 0.0016.
	if math.Abs(mean) > 0.01 || math.Abs(sd-p.StepTimeSigma) > 0.01 {
		t.Errorf("log(step / model): mean %.4f sd %.4f, want 0 and %.2f", mean, sd, p.StepTimeSigma)
	}
	q := p
	q.StepTimeSigma = 0
	for i, d := range stepDurations(t, q, 7, 50) {
		if model := q.DecodeStepTime(1, 101+i); d != model {
			t.Fatalf("sigma 0: step %d took %v, want the model's %v", i, d, model)
		}
	}
	q.StepTimeSigma = -0.1
	if _, err := NewEngine(EngineConfig{Profile: q}); err == nil {
		t.Error("negative StepTimeSigma accepted")
	}
}

func TestEngineSeedMixes(t *testing.T) {
	seen := map[uint64]bool{}
	for s := range uint64(4) {
		for r := range 8 {
			k := EngineSeed(s, r)
			if seen[k] {
				t.Fatalf("EngineSeed(%d, %d) = %#x repeats", s, r, k)
			}
			seen[k] = true
		}
	}
}
