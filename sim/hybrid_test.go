package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestKVGroups mirrors vllm/v1/core/kv_cache_utils.py
// _get_kv_cache_groups_uniform_page_size: the group size is the smaller layer count
// of the two attention types unless the larger is under 1.5 times it.
func TestKVGroups(t *testing.T) {
	tests := []struct {
		name                string
		layers, sliding, w  int
		group, full, slides int
	}{
		{"full attention only: one group of every layer", 36, 0, 0, 36, 1, 0},
		{"Gemma 3 27B: 10 global, 52 local -> groups of 10, 6 sliding groups", 62, 52, 1024, 10, 1, 6},
		{"Gemma 3 4B: 34 layers, 5 global, 29 local -> 6 sliding groups of 5", 34, 29, 1024, 5, 1, 6},
		{"12 local + 13 global (gpt-oss-20b + eagle): one group each of 13", 25, 12, 128, 13, 1, 1},
		{"window 0 means no sliding window", 62, 52, 0, 62, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Profile{Layers: tc.layers, SlidingLayers: tc.sliding, SlidingWindow: tc.w}
			g, f, s := p.KVGroups()
			if g != tc.group || f != tc.full || s != tc.slides {
				t.Errorf("KVGroups = %d, %d, %d; want %d, %d, %d", g, f, s, tc.group, tc.full, tc.slides)
			}
		})
	}
	// Gemma 3 27B capacity, by hand: (34.36e9 x 0.9 - 16.02e9 - 2.7e9) / (16 x 10 x 8192).
	p := ProfileRTX5090Gemma3_27B
	if got := p.BlockBytes(16); got != 1310720 {
		t.Errorf("Gemma block bytes %v, want 1310720", got)
	}
	if got := p.NumGPUBlocks(16); got != 9310 {
		t.Errorf("Gemma num_gpu_blocks %d, want 9310", got)
	}
	// With kv_cache_dtype fp8 a block costs half: 655,360 B, and the same memory
	// holds floor(12.20e9 / 655,360) = 18,621 blocks.
	fp8 := ProfileRTX5090Gemma3_27BFP8KV
	if got := fp8.BlockBytes(16); got != 655360 {
		t.Errorf("Gemma fp8 KV block bytes %v, want 655360", got)
	}
	if got := fp8.NumGPUBlocks(16); got != 18621 {
		t.Errorf("Gemma fp8 KV num_gpu_blocks %d, want 18621", got)
	}
	// Decode reads half the KV bytes per step: at a long context the fp8 step is
	// shorter, the weights' share being the same.
	long := []SeqWork{{Start: 60000, New: 1}, {Start: 60000, New: 1}}
	if a, b := p.StepTime(long), fp8.StepTime(long); !(b < a) {
		t.Errorf("decode step at 60k context: fp8 KV %v, bf16 %v; want fp8 faster", b, a)
	}
	// The full-attention profiles: one group, blocks of 144 KiB x 16. From vLLM's
	// start-up terms (docs/simulator.md section 10): (15.92 x 0.9 - 7.56 - 0.15 -
	// 0.61 - 0.04) GiB / 2,359,296 B = 2716; the lumped reserve of before: 2463.
	if got := ProfileA4000Qwen3_4B.NumGPUBlocks(16); got != 2716 {
		t.Errorf("Qwen num_gpu_blocks %d, want 2716", got)
	}
	if got := ProfileA4000Qwen3_4BLockstep.NumGPUBlocks(16); got != 2463 {
		t.Errorf("Qwen lockstep num_gpu_blocks %d, want 2463", got)
	}
}

// TestSlidingBlocks mirrors SlidingWindowManager: blocks wholly before the first
// position the window of the first new token sees are skipped (freed); the rest up to
// the last token written are held.
func TestSlidingBlocks(t *testing.T) {
	p := Profile{Layers: 2, SlidingLayers: 1, SlidingWindow: 64}
	tests := []struct {
		name          string
		computed, new int
		want          int
	}{
		{"a cold 100-token prefill holds all its blocks", 0, 100, 7},
		{"decode at 1000: window 937..1000 -> blocks 58..62", 1000, 1, 5},
		{"decode at 1007: token 1007 sees 944..1007 -> blocks 59..62", 1007, 1, 4},
		{"a 2048 chunk after 4096: 4033..6143 -> blocks 252..383", 4096, 2048, 132},
		{"within the first window nothing is skipped", 40, 1, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.SlidingBlocks(tc.computed, tc.new, 16); got != tc.want {
				t.Errorf("SlidingBlocks(%d, %d) = %d, want %d", tc.computed, tc.new, got, tc.want)
			}
		})
	}
	if got := (Profile{Layers: 2}).SlidingBlocks(1000, 1, 16); got != 0 {
		t.Errorf("no window: %d blocks", got)
	}
}

// TestSlidingStepTime: a local layer attends at most window positions and reads at
// most window-1+n KV entries, so a long-context step costs the global layers' share
// plus a bounded local share.
func TestSlidingStepTime(t *testing.T) {
	// Two layers, one local with window 100; round numbers as in unitProfile.
	p := unitProfile
	p.Layers, p.SlidingLayers, p.SlidingWindow = 2, 1, 100
	sec := func(s float64) time.Duration { return time.Millisecond + time.Duration(s*1e9) }
	tests := []struct {
		name string
		work []SeqWork
		want time.Duration
	}{
		// memory: 1e9 + 4 B x (1000 global + 100 local).
		{"decode at 1000: the local layer reads 100 entries", []SeqWork{{999, 1}}, sec((1e9 + 4*1100) / 1e9)},
		// compute: 2e12 + 4 x (1000*1001/2 + (100*101/2 + 900*100)); memory smaller.
		{"1000-token prefill: local positions capped at 100", []SeqWork{{0, 1000}}, sec((2e12 + 4*(500500+5050+90000)) / 1e12)},
		// memory: 1e9 + 4 x (50 + 50): inside the window both layers read it all.
		{"decode inside the window reads the whole context in both layers", []SeqWork{{49, 1}}, sec((1e9 + 4*100) / 1e9)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.StepTime(tc.work); got-tc.want < -time.Microsecond || got-tc.want > time.Microsecond {
				t.Errorf("StepTime = %v, want %v", got, tc.want)
			}
		})
	}
	for _, c := range []struct{ a, b, w float64 }{{1, 10, 100}, {1, 10, 5}, {7, 30, 20}, {50, 60, 40}} {
		var want float64
		for p := c.a; p <= c.b; p++ {
			want += min(p, c.w)
		}
		if got := sumMin(c.a, c.b, c.w); got != want {
			t.Errorf("sumMin(%v, %v, %v) = %v, want %v", c.a, c.b, c.w, got, want)
		}
	}
}

// hybridEngine is a small engine with 2 sliding-window groups of window 64 beside one
// full-attention group (2 local + 2 global layers: groups of 2).
func hybridEngine(t testing.TB, usable int, mod func(*EngineConfig)) *Engine {
	p := ProfileA4000Qwen3_4BLockstep
	p.Layers, p.SlidingLayers, p.SlidingWindow = 6, 4, 64
	return newTestEngine(t, func(c *EngineConfig) {
		c.Profile = p
		c.NumGPUBlocks = usable + 1
		c.MaxModelLen = 512
		c.MaxNumBatchedTokens = 128
		if mod != nil {
			mod(c)
		}
	})
}

// TestHybridEngineBlocks follows one request through prefill and decode on a hybrid
// engine and checks the blocks it holds in each group at each step.
func TestHybridEngineBlocks(t *testing.T) {
	e := hybridEngine(t, 400, nil)
	if e.slideGroups != 2 || e.window != 64 {
		t.Fatalf("groups %d window %d", e.slideGroups, e.window)
	}
	mustSubmit(t, e, "a", testPrompt(1, 300), 40, 0)
	q := e.reqs["a"]
	var now time.Duration
	type want struct{ full, slide int }
	// Budget 128: chunks 0-127, 128-255, 256-299, then decodes from 300.
	steps := []want{
		{8, 2 * 8},          // tokens 0..127: all 8 blocks in each group
		{16, 2 * (16 - 4)},  // 128..255: window of token 128 starts at 65 -> block 4
		{19, 2 * (19 - 12)}, // 256..299: window of 256 starts at 193 -> block 12
		{19, 2 * (19 - 14)}, // decode at 300: window 237.. -> block 14
	}
	for i, w := range steps {
		res := e.Step(now)
		checkEngine(t, e)
		if len(q.blocks) != w.full || len(q.slide) != w.slide {
			t.Fatalf("step %d: %d full and %d sliding blocks, want %d and %d", i, len(q.blocks), len(q.slide), w.full, w.slide)
		}
		now = res.NextAt
	}
	if used := 400 - e.pool.numFree; used != 19+10 {
		t.Errorf("pool: %d blocks used, want 29", used)
	}
	drain(t, e, now)
	checkEngine(t, e)
	if e.pool.numFree != 400 {
		t.Errorf("after finishing: %d free of 400", e.pool.numFree)
	}
}

// TestHybridCapacity: the sliding-window groups' blocks count against the pool, so
// fewer requests run at once than the global layers alone would allow, and a running
// request that cannot get its window's blocks preempts the newest one.
func TestHybridCapacity(t *testing.T) {
	// 100 usable blocks; a 300-token request needs 19 full + 2 x 5 sliding = 29 blocks
	// when decoding (38 when its last prefill chunk runs), so three fit and a fourth
	// waits; on a full-attention engine of the same size five would start.
	e := hybridEngine(t, 100, nil)
	for i := range 5 {
		mustSubmit(t, e, fmt.Sprint(i), testPrompt(10+i, 300), 200, 0)
	}
	var now time.Duration
	maxRunning, preempted := 0, 0
	for range 2000 {
		res := e.Step(now)
		checkEngine(t, e)
		for _, ev := range res.Events {
			if ev.Kind == EventPreempted {
				preempted++
			}
		}
		maxRunning = max(maxRunning, e.Stats().Running)
		if !res.Busy {
			break
		}
		now = res.NextAt
	}
	if maxRunning > 3 {
		t.Errorf("%d requests ran at once; with windows at most 3 fit", maxRunning)
	}
	if e.Stats().RequestsFinished != 5 {
		t.Errorf("%d of 5 finished", e.Stats().RequestsFinished)
	}
	t.Logf("max running %d, %d preemptions", maxRunning, preempted)
}

// TestHybridInvariants runs random workloads with aborts on a hybrid engine and checks
// the pool after every step (ref counts, free queue, sliding-window ranges).
func TestHybridInvariants(t *testing.T) {
	for seed := range uint64(4) {
		e := hybridEngine(t, 150, func(c *EngineConfig) { c.MaxNumSeqs = 5 })
		rng := rand.New(rand.NewPCG(seed, 11))
		var now time.Duration
		for i := range 50 {
			mustSubmit(t, e, fmt.Sprint(i), testPrompt(int(seed)*100+i%5, 20+rng.IntN(300)), 1+rng.IntN(80), now)
			if rng.IntN(6) == 0 {
				e.Abort(fmt.Sprint(rng.IntN(i + 1)))
			}
			for range rng.IntN(30) {
				res := e.Step(now)
				checkEngine(t, e)
				if !res.Busy {
					break
				}
				now = res.NextAt
			}
		}
		drain(t, e, now)
		checkEngine(t, e)
		if s := e.Stats(); s.KVUsage != 0 || s.Running+s.Waiting != 0 {
			t.Fatalf("seed %d: not empty at the end: %+v", seed, s)
		}
	}
}

// TestGemmaMaxModelLen: the Gemma profile admits the fleet scenario's ~60-70k-token
// prompts; its default max_model_len is the model's 131072 lowered to what one
// sequence with its sliding-window reserve can hold.
func TestGemmaMaxModelLen(t *testing.T) {
	e, err := NewEngine(EngineConfig{Profile: ProfileRTX5090Gemma3_27B})
	if err != nil {
		t.Fatal(err)
	}
	// (9310 - 1 - 6 x (cdiv(1023 + 2048, 16) + 1)) x 16 = (9309 - 6 x 193) x 16.
	if got, want := e.Config().MaxModelLen, (9309-6*193)*16; got != want {
		t.Errorf("max_model_len %d, want %d", got, want)
	}
	if err := e.Submit(&Request{ID: "long", Prompt: testPrompt(1, 70000), MaxTokens: 256}, 0); err != nil {
		t.Errorf("a 70k-token prompt: %v", err)
	}
	if _, err := NewEngine(EngineConfig{Profile: ProfileRTX5090Gemma3_27B, MaxModelLen: 131072}); err == nil {
		t.Error("max_model_len 131072 accepted although one such sequence does not fit with its windows")
	}
}
