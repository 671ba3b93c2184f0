package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// tinyEngine has usable KV blocks of 16 tokens (plus the null block).
func tinyEngine(t testing.TB, usable int, mod func(*EngineConfig)) *Engine {
	return newTestEngine(t, func(c *EngineConfig) {
		c.NumGPUBlocks = usable + 1
		c.MaxModelLen = usable * 16
		if mod != nil {
			mod(c)
		}
	})
}

// scheduledTokens reports the running batch as id -> tokens scheduled.
func scheduledTokens(e *Engine) map[string]int {
	m := map[string]int{}
	for _, q := range e.batch {
		m[q.id] = q.scheduled
	}
	return m
}

func mustSubmit(t testing.TB, e *Engine, id string, prompt []uint32, maxTokens int, now time.Duration) {
	t.Helper()
	if err := e.Submit(&Request{ID: id, Prompt: prompt, MaxTokens: maxTokens}, now); err != nil {
		t.Fatal(err)
	}
}

// TestChunkedPrefill: vllm/v1/core/sched/scheduler.py schedule() with chunked prefill:
// a 5000-token prompt under a 2048-token budget runs 2048 + 2048 + 904 and emits its
// first token when the third step completes.
func TestChunkedPrefill(t *testing.T) {
	e := newTestEngine(t, nil)
	mustSubmit(t, e, "a", testPrompt(1, 5000), 4, 0)
	var now time.Duration
	var chunks []int
	for step := 1; ; step++ {
		res := e.Step(now)
		for _, ev := range res.Events {
			if ev.Kind == EventFirstToken {
				if step != 4 { // the 4th Step call completes the 3rd batch
					t.Fatalf("first token after %d batches, want 3 (chunks %v)", step-1, chunks)
				}
				if want := ProfileA4000Qwen3_4BLockstep.PrefillTime(5000, 2048); now != want {
					t.Errorf("first token at %v, want PrefillTime %v", now, want)
				}
				if !slices.Equal(chunks, []int{2048, 2048, 904}) {
					t.Errorf("chunks %v", chunks)
				}
				return
			}
		}
		if !res.Busy {
			t.Fatal("went idle before the first token")
		}
		chunks = append(chunks, scheduledTokens(e)["a"])
		now = res.NextAt
	}
}

// TestScheduler covers schedule()'s rules one by one.
func TestScheduler(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"one budget shared: decodes take 1 token each, the prefill chunk the rest", func(t *testing.T) {
			e := newTestEngine(t, nil)
			for i := range 3 {
				mustSubmit(t, e, fmt.Sprint("d", i), testPrompt(i, 50), 10, 0)
			}
			res := e.Step(0) // prefill of the three
			mustSubmit(t, e, "long", testPrompt(9, 8000), 10, 0)
			e.Step(res.NextAt) // first tokens; then 3 decodes + a chunk
			got := scheduledTokens(e)
			want := map[string]int{"d0": 1, "d1": 1, "d2": 1, "long": 2048 - 3}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("scheduled %v, want %v", got, want)
			}
		}},
		{"running requests are served before waiting ones", func(t *testing.T) {
			e := newTestEngine(t, func(c *EngineConfig) { c.MaxNumBatchedTokens = 100 })
			mustSubmit(t, e, "a", testPrompt(1, 150), 10, 0)
			res := e.Step(0) // a: 100 of 150
			mustSubmit(t, e, "b", testPrompt(2, 150), 10, 0)
			e.Step(res.NextAt) // a: its last 50, then b: 50
			if got := scheduledTokens(e); got["a"] != 50 || got["b"] != 50 {
				t.Errorf("scheduled %v", got)
			}
		}},
		{"admission stops at max_num_seqs", func(t *testing.T) {
			e := newTestEngine(t, func(c *EngineConfig) { c.MaxNumSeqs = 2 })
			for i := range 3 {
				mustSubmit(t, e, fmt.Sprint(i), testPrompt(i, 20), 10, 0)
			}
			e.Step(0)
			if s := e.Stats(); s.Running != 2 || s.Waiting != 1 {
				t.Errorf("running %d waiting %d", s.Running, s.Waiting)
			}
		}},
		{"a waiting request that does not fit stops admission (no skipping ahead)", func(t *testing.T) {
			e := tinyEngine(t, 8, nil)
			mustSubmit(t, e, "a", testPrompt(1, 96), 10, 0) // 6 blocks
			mustSubmit(t, e, "b", testPrompt(2, 60), 10, 0) // needs 4, 2 free
			mustSubmit(t, e, "c", testPrompt(3, 10), 10, 0) // needs 1: would fit
			e.Step(0)
			if got := scheduledTokens(e); len(got) != 1 || got["a"] != 96 {
				t.Errorf("scheduled %v, want only a", got)
			}
			if s := e.Stats(); s.Waiting != 2 {
				t.Errorf("waiting %d", s.Waiting)
			}
		}},
		{"the step that completes prefill emits the first token, then one per step", func(t *testing.T) {
			e := newTestEngine(t, func(c *EngineConfig) { c.EmitTokens = true })
			mustSubmit(t, e, "a", testPrompt(1, 30), 3, 0)
			evs, _ := drain(t, e, 0)
			var got []string
			for _, ev := range evs {
				got = append(got, fmt.Sprint(ev.Kind, ev.OutputTokens))
			}
			if want := "[first_token 1 token 2 token 3 finished 3]"; fmt.Sprint(got) != want {
				t.Errorf("events %v, want %s", got, want)
			}
		}},
		{"without EmitTokens only first token and finish are reported", func(t *testing.T) {
			e := newTestEngine(t, nil)
			mustSubmit(t, e, "a", testPrompt(1, 30), 50, 0)
			evs, _ := drain(t, e, 0)
			if len(evs) != 2 || evs[0].Kind != EventFirstToken || evs[1].Kind != EventFinished || evs[1].OutputTokens != 50 {
				t.Errorf("events %+v", evs)
			}
			if s := e.Stats(); s.GenerationTokens != 50 {
				t.Errorf("generation tokens %d", s.GenerationTokens)
			}
		}},
		{"max_tokens 1 finishes in the prefill step", func(t *testing.T) {
			e := newTestEngine(t, nil)
			mustSubmit(t, e, "a", testPrompt(1, 30), 1, 0)
			evs, _ := drain(t, e, 0)
			if len(evs) != 2 || evs[0].Kind != EventFirstToken || evs[1].Kind != EventFinished || evs[0].At != evs[1].At {
				t.Errorf("events %+v", evs)
			}
		}},
		{"a Step before NextAt changes nothing", func(t *testing.T) {
			e := newTestEngine(t, nil)
			mustSubmit(t, e, "a", testPrompt(1, 30), 2, 0)
			res := e.Step(0)
			early := e.Step(res.NextAt - 1)
			if !early.Busy || early.NextAt != res.NextAt || len(early.Events) != 0 {
				t.Errorf("early step %+v", early)
			}
			if ev := e.Step(res.NextAt).Events; len(ev) != 1 || ev[0].Kind != EventFirstToken {
				t.Errorf("on-time step events %+v", ev)
			}
		}},
		{"an idle engine with nothing to do stays idle", func(t *testing.T) {
			e := newTestEngine(t, nil)
			if res := e.Step(5); res.Busy || len(res.Events) != 0 || e.Busy() {
				t.Errorf("%+v", res)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

// TestPreemption: scheduler.py _preempt_request via schedule(): KV full while a running
// request needs a block preempts the newest running request.
func TestPreemption(t *testing.T) {
	t.Run("the newest running request is preempted for an older one", func(t *testing.T) {
		e := tinyEngine(t, 8, func(c *EngineConfig) { c.EmitTokens = true })
		mustSubmit(t, e, "a", testPrompt(1, 64), 20, 0) // 4 blocks; needs a 5th at its first decode
		mustSubmit(t, e, "b", testPrompt(2, 60), 20, 0) // 4 blocks
		res := e.Step(0)
		if s := e.Stats(); s.KVUsage != 1 || s.Running != 2 {
			t.Fatalf("after admission %+v", s)
		}
		res = e.Step(res.NextAt) // first tokens for both; a's decode needs block 5
		var kinds []string
		for _, ev := range res.Events {
			kinds = append(kinds, ev.ReqID+":"+ev.Kind.String())
		}
		if want := "[a:first_token b:first_token b:preempted]"; fmt.Sprint(kinds) != want {
			t.Fatalf("events %v, want %s", kinds, want)
		}
		s := e.Stats()
		if s.Preemptions != 1 || s.Running != 1 || s.Waiting != 1 {
			t.Fatalf("stats %+v", s)
		}
		if got := scheduledTokens(e); fmt.Sprint(got) != "map[a:1]" {
			t.Errorf("after preemption nothing is admitted in the same step: scheduled %v", got)
		}
		b := e.reqs["b"]
		if b.computed != 0 || b.numOutput != 1 || len(b.blocks) != 0 || e.waiting.front() != b {
			t.Errorf("preempted b: computed %d outputs %d blocks %d", b.computed, b.numOutput, len(b.blocks))
		}
		// Run to the end: b resumes (recomputing prompt + its first output), emits
		// exactly 20 tokens in all, and the prefix counters saw each request once.
		evs, _ := drain(t, e, res.NextAt)
		outs := map[string][]int{}
		for _, ev := range evs {
			if ev.Kind == EventToken || ev.Kind == EventFirstToken {
				outs[ev.ReqID] = append(outs[ev.ReqID], ev.OutputTokens)
			}
		}
		if len(outs["b"]) != 19 || outs["b"][18] != 20 || len(outs["a"]) != 19 {
			t.Errorf("outputs after preemption a=%v b=%v", outs["a"], outs["b"])
		}
		s = e.Stats()
		if s.PrefixQueries != 64+60 || s.PrefixHits != 0 || s.RequestsFinished != 2 || s.KVUsage != 0 {
			t.Errorf("final stats %+v", s)
		}
		if s.PromptTokens != 124 || s.PromptComputed != 124 {
			t.Errorf("prompt tokens counted on re-admission: %+v", s)
		}
	})
	t.Run("a request that is itself the newest preempts itself and the step stops", func(t *testing.T) {
		e := tinyEngine(t, 8, nil)
		mustSubmit(t, e, "a", testPrompt(1, 60), 3, 0) // decodes fit in its 4 blocks
		mustSubmit(t, e, "b", testPrompt(2, 64), 3, 0) // needs a 5th block at once
		res := e.Step(0)
		res = e.Step(res.NextAt)
		last := res.Events[len(res.Events)-1]
		if last.ReqID != "b" || last.Kind != EventPreempted {
			t.Fatalf("events %+v", res.Events)
		}
		if got := scheduledTokens(e); fmt.Sprint(got) != "map[a:1]" {
			t.Errorf("scheduled %v", got)
		}
	})
	t.Run("preempted blocks keep their hashes and hit on re-admission", func(t *testing.T) {
		e := tinyEngine(t, 8, nil)
		mustSubmit(t, e, "a", testPrompt(1, 60), 3, 0)
		mustSubmit(t, e, "b", testPrompt(2, 64), 3, 0)
		res := e.Step(0)
		res = e.Step(res.NextAt) // b preempted (4 full blocks cached: 64 prompt tokens)
		// While a runs, b (65 tokens, 4 cached blocks + 1 new) does not fit.
		for e.reqs["a"] != nil {
			res = e.Step(res.NextAt)
		}
		b := e.reqs["b"]
		if b.state != stateRunning || b.computed-b.scheduled != 64 {
			t.Errorf("b re-admitted with %d cached tokens, want 64", b.computed-b.scheduled)
		}
		if s := e.Stats(); s.PrefixHits != 0 || s.PrefixQueries != 124 {
			t.Errorf("a re-admission changed the exported counters: %+v", s)
		}
	})
}

// TestPrefixCacheEngine: kv_cache_manager.py get_computed_blocks / allocate_slots at
// engine level.
func TestPrefixCacheEngine(t *testing.T) {
	t.Run("identical prompts in sequence hit floor((len-1)/16)*16", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 7))
		e := newTestEngine(t, nil)
		var now time.Duration
		for i := range 60 {
			n := 1 + rng.IntN(3000)
			if i < 4 {
				n = []int{1, 16, 17, 100}[i] // edges: 1 token, one full block, one over, a 100-token prompt (hits 96)
			}
			p := testPrompt(1000+i, n)
			mustSubmit(t, e, "x", p, 2, now)
			_, now = drain(t, e, now)
			before := e.Stats().PrefixHits
			mustSubmit(t, e, "y", p, 2, now)
			_, now = drain(t, e, now)
			if got, want := e.Stats().PrefixHits-before, int64((n-1)/16*16); got != want {
				t.Fatalf("prompt of %d tokens: hit %d, want %d", n, got, want)
			}
		}
	})
	t.Run("generated tokens are cached: the next turn hits prompt plus reply", func(t *testing.T) {
		e := newTestEngine(t, func(c *EngineConfig) { c.EmitTokens = true })
		p1 := testPrompt(1, 1000)
		mustSubmit(t, e, "t1", p1, 100, 0)
		evs, now := drain(t, e, 0)
		var reply []uint32
		for _, ev := range evs {
			if ev.Kind == EventToken || ev.Kind == EventFirstToken {
				reply = append(reply, ev.Token)
			}
		}
		p2 := slices.Concat(p1, reply, testPrompt(2, 300))
		mustSubmit(t, e, "t2", p2, 10, now)
		before := e.Stats().PrefixHits
		drain(t, e, now)
		// The last output token is sampled but never fed back, so its KV is not
		// computed: the cached run is the full blocks of prompt + 99 outputs.
		if got, want := e.Stats().PrefixHits-before, int64((1000+99)/16*16); got != want {
			t.Errorf("turn 2 hit %d, want %d", got, want)
		}
	})
	t.Run("blocks cached at schedule time serve a request admitted later in the same step", func(t *testing.T) {
		e := newTestEngine(t, nil)
		p := testPrompt(1, 500)
		mustSubmit(t, e, "a", p, 2, 0)
		mustSubmit(t, e, "b", p, 2, 0)
		e.Step(0)
		if got := scheduledTokens(e); got["a"] != 500 || got["b"] != 500-496 {
			t.Errorf("scheduled %v", got)
		}
	})
	t.Run("counters once per request at admission, or per attempt with the old-bug option", func(t *testing.T) {
		for _, perAttempt := range []bool{false, true} {
			e := tinyEngine(t, 8, func(c *EngineConfig) { c.CountPrefixStatsPerAttempt = perAttempt })
			mustSubmit(t, e, "a", testPrompt(1, 96), 5, 0) // 6 of 8 blocks
			mustSubmit(t, e, "b", testPrompt(2, 60), 5, 0) // waits until a finishes
			_, _ = drain(t, e, 0)
			s := e.Stats()
			if !perAttempt && s.PrefixQueries != 96+60 {
				t.Errorf("once: queries %d, want %d", s.PrefixQueries, 96+60)
			}
			// b is looked up at every step a runs (1 prefill + 4 decodes) plus
			// once at admission: 6 times.
			if perAttempt && s.PrefixQueries != 96+6*60 {
				t.Errorf("per attempt: queries %d, want %d", s.PrefixQueries, 96+6*60)
			}
		}
	})
	t.Run("eviction takes a finished request's deepest blocks first, keeping its prefix", func(t *testing.T) {
		e := tinyEngine(t, 20, nil)
		a := testPrompt(1, 160) // 10 blocks
		mustSubmit(t, e, "a", a, 1, 0)
		_, now := drain(t, e, 0)
		// 10 never-used blocks then a's 10 blocks, deepest first, are free. A
		// 14-block prompt takes the 10 unused ones and a's 4 deepest.
		mustSubmit(t, e, "b", testPrompt(2, 14*16), 1, now)
		_, now = drain(t, e, now)
		before := e.Stats().PrefixHits
		mustSubmit(t, e, "a2", a, 1, now)
		drain(t, e, now)
		if got := e.Stats().PrefixHits - before; got != 6*16 {
			t.Errorf("a's prompt hits %d tokens after eviction, want its first 6 blocks (96)", got)
		}
	})
	t.Run("live context counts prompt plus output tokens of live requests", func(t *testing.T) {
		e := newTestEngine(t, nil)
		mustSubmit(t, e, "a", testPrompt(1, 100), 10, 0)
		mustSubmit(t, e, "b", testPrompt(2, 50), 10, 0)
		if got := e.Stats().LiveContextTokens; got != 150 {
			t.Errorf("after submit %d", got)
		}
		res := e.Step(0)
		res = e.Step(res.NextAt) // first tokens
		e.Step(res.NextAt)       // second tokens
		if got := e.Stats().LiveContextTokens; got != 154 {
			t.Errorf("after two tokens each %d, want 154", got)
		}
	})
	t.Run("kv usage counts blocks held by live requests", func(t *testing.T) {
		e := tinyEngine(t, 20, nil)
		mustSubmit(t, e, "a", testPrompt(1, 100), 5, 0) // ceil(100/16) = 7 blocks
		e.Step(0)
		if got, want := e.Stats().KVUsage, 7.0/20; got != want {
			t.Errorf("usage %v, want %v", got, want)
		}
	})
}

func TestAbortAndReset(t *testing.T) {
	e := newTestEngine(t, nil)
	p := testPrompt(1, 200)
	mustSubmit(t, e, "a", p, 50, 0)
	mustSubmit(t, e, "w", testPrompt(2, 10), 5, 0)
	e.Abort("w") // waiting
	res := e.Step(0)
	if e.ResetPrefixCache() {
		t.Error("reset succeeded while a request holds blocks")
	}
	e.Abort("a") // in the running batch
	e.Abort("nobody")
	s := e.Stats()
	if s.KVUsage != 0 || s.Running != 0 || s.Waiting != 0 || s.RequestsAborted != 2 || s.LiveContextTokens != 0 {
		t.Fatalf("after abort %+v", s)
	}
	if res = e.Step(res.NextAt); len(res.Events) != 0 || res.Busy {
		t.Errorf("aborted request produced %+v", res)
	}
	// Its computed blocks stay cached until reset.
	mustSubmit(t, e, "b", p, 1, res.NextAt)
	_, now := drain(t, e, res.NextAt)
	if got := e.Stats().PrefixHits; got != 192 {
		t.Errorf("hit after abort %d, want 192", got)
	}
	if !e.ResetPrefixCache() {
		t.Fatal("reset refused on an idle engine")
	}
	mustSubmit(t, e, "c", p, 1, now)
	drain(t, e, now)
	if got := e.Stats().PrefixHits; got != 192 {
		t.Errorf("hit after reset: counter moved to %d", got)
	}
}

func TestSubmitErrors(t *testing.T) {
	e := newTestEngine(t, func(c *EngineConfig) { c.MaxModelLen = 1000 })
	mustSubmit(t, e, "live", testPrompt(1, 10), 1, 0)
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{ID: "x", MaxTokens: 1}, ErrInvalidRequest},
		{"max_tokens 0", Request{ID: "x", Prompt: testPrompt(1, 5)}, ErrInvalidRequest},
		{"duplicate live id", Request{ID: "live", Prompt: testPrompt(1, 5), MaxTokens: 1}, ErrInvalidRequest},
		{"prompt + max_tokens over max_model_len", Request{ID: "x", Prompt: testPrompt(1, 900), MaxTokens: 101}, ErrPromptTooLong},
		{"exactly max_model_len is allowed", Request{ID: "x", Prompt: testPrompt(1, 900), MaxTokens: 100}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.Submit(&tc.req, 0); !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestNewEngineConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     EngineConfig
		wantErr bool
		wantLen int
	}{
		{"defaults from the profile", EngineConfig{Profile: ProfileA4000Qwen3_4B}, false, DefaultMaxModelLen},
		{"default max_model_len lowered to the KV capacity", EngineConfig{Profile: ProfileA4000Qwen3_4B, NumGPUBlocks: 101}, false, 1600},
		{"explicit max_model_len over capacity refused", EngineConfig{Profile: ProfileA4000Qwen3_4B, NumGPUBlocks: 101, MaxModelLen: 2000}, true, 0},
		{"no KV cache", EngineConfig{Profile: Profile{Name: "x", GPUMemoryBytes: 1, GPUMemoryUtil: 0.9, Params: 1e9, BytesPerParam: 2, Layers: 1, KVHeads: 1, HeadDim: 1}}, true, 0},
		{"negative setting", EngineConfig{Profile: ProfileA4000Qwen3_4B, MaxNumSeqs: -1}, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewEngine(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && e.Config().MaxModelLen != tc.wantLen {
				t.Errorf("max_model_len %d, want %d", e.Config().MaxModelLen, tc.wantLen)
			}
		})
	}
}

// randomWorkload submits sessions whose turns share prefixes, on a small KV so that
// eviction and preemption happen, and returns every event with its instant.
func randomWorkload(t testing.TB, seed uint64) []timedEvent {
	e := tinyEngine(t, 300, func(c *EngineConfig) { c.EmitTokens = true; c.MaxNumSeqs = 8; c.MaxNumBatchedTokens = 512 })
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []timedEvent
	var now time.Duration
	prompts := map[string][]uint32{}
	next := 0
	for round := range 40 {
		for range 1 + rng.IntN(3) {
			id := fmt.Sprint("r", next)
			base := prompts[fmt.Sprint("r", rng.IntN(next+1))]
			p := slices.Concat(base, testPrompt(next, 50+rng.IntN(400)))
			if len(p) > 3000 {
				p = p[len(p)-3000:]
			}
			prompts[id] = p
			next++
			mustSubmit(t, e, id, p, 1+rng.IntN(60), now)
		}
		if round%7 == 3 && next > 2 {
			e.Abort(fmt.Sprint("r", rng.IntN(next)))
		}
		if !e.Busy() {
			res := e.Step(now)
			for _, ev := range res.Events {
				out = append(out, timedEvent{now, ev})
			}
		}
		for range 1 + rng.IntN(20) {
			if !e.Busy() {
				break
			}
			now = e.NextAt()
			for _, ev := range e.Step(now).Events {
				out = append(out, timedEvent{now, ev})
			}
		}
	}
	evs, _ := drain(t, e, now)
	out = append(out, evs...)
	if s := e.Stats(); s.KVUsage != 0 || s.LiveContextTokens != 0 {
		t.Fatalf("engine not empty at the end: %+v", s)
	}
	return out
}

func TestDeterminism(t *testing.T) {
	a, b := randomWorkload(t, 42), randomWorkload(t, 42)
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("same submissions gave different event sequences (%d vs %d events)", len(a), len(b))
	}
	preempted := 0
	for _, ev := range a {
		if ev.Kind == EventPreempted {
			preempted++
		}
	}
	t.Logf("%d events, %d preemptions", len(a), preempted)
	if c := randomWorkload(t, 43); slices.Equal(a, c) {
		t.Error("a different workload gave the same events")
	}
}

// TestInvariants runs random workloads and checks pool invariants after every step.
func TestInvariants(t *testing.T) {
	for seed := range uint64(5) {
		e := tinyEngine(t, 120, func(c *EngineConfig) { c.MaxNumSeqs = 6; c.MaxNumBatchedTokens = 256 })
		rng := rand.New(rand.NewPCG(seed, 9))
		var now time.Duration
		finished := 0
		for i := range 60 {
			mustSubmit(t, e, fmt.Sprint(i), testPrompt(int(seed)*1000+i%7, 20+rng.IntN(900)), 1+rng.IntN(100), now)
			for range rng.IntN(30) {
				res := e.Step(now)
				for _, ev := range res.Events {
					if ev.Kind == EventFinished {
						finished++
					}
				}
				checkEngine(t, e)
				if !res.Busy {
					break
				}
				now = res.NextAt
			}
		}
		evs, _ := drain(t, e, now)
		for _, ev := range evs {
			if ev.Kind == EventFinished {
				finished++
			}
		}
		if finished != 60 {
			t.Errorf("seed %d: %d of 60 finished", seed, finished)
		}
	}
}

// checkEngine: every block's ref count equals the number of live requests holding it,
// the free queue holds exactly the unreferenced blocks, and the hash map points at
// blocks carrying that hash.
func checkEngine(t *testing.T, e *Engine) {
	t.Helper()
	refs := make([]int32, len(e.pool.blocks))
	for _, q := range e.reqs {
		for _, id := range q.blocks {
			refs[id]++
		}
		for _, id := range q.slide {
			refs[id]++
		}
		if len(q.slide) != e.slideGroups*(q.slideHi-q.slideLo) {
			t.Fatalf("request %s holds %d sliding-window blocks for block range [%d, %d) in %d groups", q.id, len(q.slide), q.slideLo, q.slideHi, e.slideGroups)
		}
		if q.state == stateRunning && e.slideGroups > 0 && q.slideHi*e.cfg.BlockSize < q.computed {
			t.Fatalf("request %s: sliding-window blocks end at block %d, before its %d computed tokens", q.id, q.slideHi, q.computed)
		}
		if q.state == stateRunning && len(q.blocks) < (q.computed+e.cfg.BlockSize-1)/e.cfg.BlockSize {
			t.Fatalf("request %s has %d blocks for %d computed tokens", q.id, len(q.blocks), q.computed)
		}
	}
	free := 0
	for id := 1; id < len(refs); id++ {
		b := e.pool.blocks[id]
		if b.refCnt != refs[id] || b.inFree != (refs[id] == 0) {
			t.Fatalf("block %d: ref %d, held by %d, inFree %v", id, b.refCnt, refs[id], b.inFree)
		}
		if b.inFree {
			free++
		}
	}
	if free != e.pool.numFree {
		t.Fatalf("numFree %d, counted %d", e.pool.numFree, free)
	}
	e.pool.cached.all(func(h uint64, id int32) {
		if e.pool.blocks[id].hash != h {
			t.Fatalf("map %x -> %d whose hash is %x", h, id, e.pool.blocks[id].hash)
		}
	})
	// The converse, which blockPool.lookupAgain relies on: a block whose hash is set
	// is the block the index maps that hash to.
	for id := 1; id < len(e.pool.blocks); id++ {
		if h := e.pool.blocks[id].hash; h != 0 {
			if got, ok := e.pool.cached.get(h); !ok || got != int32(id) {
				t.Fatalf("block %d has hash %x, which the index maps to %d (%v)", id, h, got, ok)
			}
		}
	}
}
