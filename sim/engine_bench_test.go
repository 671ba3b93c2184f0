package sim

import (
	"fmt"
	"testing"
	"time"
)

// benchDecodeEngine returns an engine with 32 requests decoding (prefill done) and
// the instant of its next Step.
func benchDecodeEngine(b *testing.B) (*Engine, time.Duration) {
	e, err := NewEngine(EngineConfig{Profile: ProfileA4000Qwen3_4B, NumGPUBlocks: 80000, MaxModelLen: 40000})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 32 {
		if err := e.Submit(&Request{ID: fmt.Sprint(i), Prompt: testPrompt(i, 1000), MaxTokens: 35000}, 0); err != nil {
			b.Fatal(err)
		}
	}
	res := e.Step(0)
	for range 20 { // 32 x 1000 prompt tokens under a 2048 budget: ~16 steps
		res = e.Step(res.NextAt)
	}
	if s := e.Stats(); s.Running != 32 || s.Waiting != 0 {
		b.Fatalf("setup: %+v", s)
	}
	return e, res.NextAt
}

// BenchmarkStep32Running: one Step of a batch of 32 decoding requests (completes 32
// tokens, caches a block every 16 tokens, schedules 32 decodes, times the step).
func BenchmarkStep32Running(b *testing.B) {
	b.ReportAllocs()
	e, now := benchDecodeEngine(b)
	steps := 0
	for i := 0; i < b.N; i++ {
		if steps == 30000 { // requests would finish: start over outside the timer
			b.StopTimer()
			e, now = benchDecodeEngine(b)
			steps = 0
			b.StartTimer()
		}
		now = e.Step(now).NextAt
		steps++
	}
}

// BenchmarkPrefixLookup12k: the prefix lookup of a fully cached 12k-token prompt
// (750 block hashes, 749 map probes).
func BenchmarkPrefixLookup12k(b *testing.B) {
	b.ReportAllocs()
	e, err := NewEngine(EngineConfig{Profile: ProfileA4000Qwen3_4B})
	if err != nil {
		b.Fatal(err)
	}
	p := testPrompt(1, 12000)
	if err := e.Submit(&Request{ID: "warm", Prompt: p, MaxTokens: 1}, 0); err != nil {
		b.Fatal(err)
	}
	drain(b, e, 0)
	hashes := appendBlockHashes(nil, p, 16)
	buf := make([]int32, 0, len(hashes))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = e.pool.lookup(buf[:0], hashes, (len(p)-1)/16)
	}
	if len(buf) != (len(p)-1)/16 {
		b.Fatalf("hit %d blocks", len(buf))
	}
}

// BenchmarkSubmit12k: Submit of a 12k-token prompt (copy + hashing 750 blocks) and
// its Abort.
func BenchmarkSubmit12k(b *testing.B) {
	b.ReportAllocs()
	e, err := NewEngine(EngineConfig{Profile: ProfileA4000Qwen3_4B})
	if err != nil {
		b.Fatal(err)
	}
	r := &Request{ID: "x", Prompt: testPrompt(1, 12000), MaxTokens: 256}
	for i := 0; i < b.N; i++ {
		if err := e.Submit(r, 0); err != nil {
			b.Fatal(err)
		}
		e.Abort("x")
	}
}

// BenchmarkTokenize: tokenizing about 6k words of text.
func BenchmarkTokenize(b *testing.B) {
	b.ReportAllocs()
	text := ""
	for i := range 6000 {
		text += genWords[i%len(genWords)] + "ing "
	}
	dst := make([]uint32, 0, 20000)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst = Tokenize(dst[:0], text)
	}
}
