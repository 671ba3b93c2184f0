package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestKeepPrompt checks Request.Keep and Request.Hashes: an engine that keeps the
// caller's prompt, or is handed its block hashes, produces the same events as one
// that copies and hashes it, writes the output tokens in place
// after the prompt, and leaves the prompt itself as it was. It also checks that the
// copying engine leaves the caller's spare capacity alone.
func TestKeepPrompt(t *testing.T) {
	const n, out = 300, 40
	run := func(keep, hashes bool) ([]timedEvent, []uint32) {
		e := newTestEngine(t, func(c *EngineConfig) { c.EmitTokens = true })
		var arrays [][]uint32
		for i := range 6 {
			// Six requests sharing a prefix, as conversations share a system prompt.
			p := append(make([]uint32, 0, n+out), testPrompt(1, 200)...)
			p = append(p, testPrompt(10+i, n-200)...)
			arrays = append(arrays, p)
			var hs []uint64
			if hashes { // the first blocks only, as a conversation's earlier turns
				hs = AppendBlockHashes(nil, p[:200+i*16], e.Config().BlockSize)
			}
			if err := e.Submit(&Request{ID: string(rune('a' + i)), Prompt: p, MaxTokens: out, Keep: keep, Hashes: hs}, 0); err != nil {
				t.Fatal(err)
			}
		}
		evs, _ := drain(t, e, 0)
		if e.Stats().LiveContextTokens != 0 {
			t.Fatalf("keep=%v: %d live context tokens after drain", keep, e.Stats().LiveContextTokens)
		}
		var toks []uint32
		for i, p := range arrays {
			if !slices.Equal(p, slices.Concat(testPrompt(1, 200), testPrompt(10+i, n-200))) {
				t.Fatalf("keep=%v: prompt %d changed", keep, i)
			}
			toks = append(toks, p[:n+out]...) // the spare capacity too
		}
		return evs, toks
	}
	copied, spareCopied := run(false, false)
	kept, spareKept := run(true, false)
	if !slices.Equal(copied, kept) {
		t.Fatalf("events differ: copied %d, kept %d", len(copied), len(kept))
	}
	if hashed, _ := run(true, true); !slices.Equal(copied, hashed) {
		t.Fatalf("events differ: hashed by the engine %d, handed over %d", len(copied), len(hashed))
	}
	var gen []uint32
	for _, ev := range kept {
		if ev.ReqID == "a" && (ev.Kind == EventToken || ev.Kind == EventFirstToken) {
			gen = append(gen, ev.Token)
		}
	}
	if len(gen) != out || !slices.Equal(spareKept[n:n+out], gen) {
		t.Fatalf("kept prompt a: spare capacity holds %v, want the %d output tokens %v", spareKept[n:n+out], out, gen)
	}
	if slices.ContainsFunc(spareCopied[n:n+out], func(v uint32) bool { return v != 0 }) {
		t.Fatalf("copying engine wrote into the caller's spare capacity")
	}
}

// TestFailMemoChangesNothing: skipping the admission of a waiting request whose
// allocation failed while the pool is unchanged (request.failVer) gives the same
// events, instants and counters as retrying it in full, on a KV cache small enough
// that requests queue, preempt and share prefixes.
func TestFailMemoChangesNothing(t *testing.T) {
	run := func(memo bool) ([]timedEvent, Stats) {
		e := newTestEngine(t, func(c *EngineConfig) { c.NumGPUBlocks = 120; c.MaxNumBatchedTokens = 256 })
		e.noFailMemo = !memo
		r := rand.New(rand.NewPCG(3, 4))
		var all []timedEvent
		now := time.Duration(0)
		for i := range 200 {
			p := append(testPrompt(r.IntN(3), 16*r.IntN(20)), testPrompt(100+i, 1+r.IntN(300))...)
			if err := e.Submit(&Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 1 + r.IntN(60)}, now); err != nil {
				t.Fatal(err)
			}
			if i%10 == 9 {
				evs, end := drain(t, e, now)
				all = append(all, evs...)
				now = end + time.Millisecond
			}
		}
		return all, e.Stats()
	}
	a, sa := run(true)
	b, sb := run(false)
	if sa.Preemptions == 0 || sa.PrefixHits == 0 {
		t.Fatalf("the workload does not stress the pool: %+v", sa)
	}
	if !slices.Equal(a, b) || sa != sb {
		t.Fatalf("memo changed the run: %d vs %d events, stats %+v vs %+v", len(a), len(b), sa, sb)
	}
}
