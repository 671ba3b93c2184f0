package sim

import (
	"fmt"
	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen/trace"
)

// templateOverhead is what the ChatML template adds around one user message's
// content, generation prompt included (10 tokens).
func templateOverhead() int {
	return len(RenderChat(nil, []ChatMessage{{Role: "user", Content: ""}}, true))
}

// The simulator's prefix cache agrees with an independent computation: one
// replica whose KV cache holds C tokens, fed the Mooncake conversation trace in
// order (one request at a time, prompts synthesized from the block ids, one
// output token), serves within 2 points of the hit rate of trace.LRU at C.
func TestPrefixCacheAgreesWithTraceLRU(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 145 M prompt tokens per capacity")
	}
	path := sharedtrace.Path(t, sharedtrace.Mooncake)
	synth := trace.Synth{Overhead: templateOverhead()}
	for _, capTokens := range []int{1_000_000, 3_000_000, 10_000_000} {
		t.Run(strconv.Itoa(capTokens), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			e, err := NewEngine(EngineConfig{
				Profile:             ProfileA4000Qwen3_4B,
				BlockSize:           16,
				NumGPUBlocks:        capTokens/16 + 1, // + vLLM's null block
				MaxModelLen:         131072,
				MaxNumBatchedTokens: 32768,
			})
			if err != nil {
				t.Fatal(err)
			}
			lru := trace.NewHitCounter(capTokens, trace.DefaultBlockSize)
			var content strings.Builder
			now := time.Duration(0)
			var prompt []uint32
			mismatch := 0
			i := 0
			err = trace.Each(trace.NewReader(f, "conversation_trace.jsonl", 0), func(r trace.Request) error {
				lru.Add(&r)
				content.Reset()
				if err := synth.WriteContent(&content, &r, i); err != nil {
					return err
				}
				prompt = RenderChat(prompt[:0], []ChatMessage{{Role: "user", Content: content.String()}}, true)
				if len(prompt) != r.InputLength && r.InputLength > synth.Overhead {
					mismatch++
				}
				if err := e.Submit(&Request{ID: strconv.Itoa(i), Prompt: prompt, MaxTokens: 1}, now); err != nil {
					return err
				}
				for res := e.Step(now); res.Busy; res = e.Step(now) {
					now = res.NextAt
				}
				if st := e.Stats(); st.RequestsFinished != int64(i+1) {
					return fmt.Errorf("request %d (line %d) did not finish", i, r.Line)
				}
				i++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if mismatch > 0 {
				t.Errorf("%d prompts whose rendered length is not input_length", mismatch)
			}
			st := e.Stats()
			simPct := 100 * float64(st.PrefixHits) / float64(st.PrefixQueries)
			if d := math.Abs(simPct - lru.HitPct()); !(d <= 2) { // NaN fails too
				t.Errorf("capacity %d tokens: simulator %.2f %% hits, trace LRU %.2f %% (|diff| %.2f > 2 points)", capTokens, simPct, lru.HitPct(), d)
			}
			t.Logf("capacity %d tokens: simulator %.2f %%, trace LRU %.2f %% (%d requests, %d prompt tokens)", capTokens, simPct, lru.HitPct(), i, st.PrefixQueries)
		})
	}
}
