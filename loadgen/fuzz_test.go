package loadgen

import (
	"bytes"
	"reflect"
	"testing"
	"testing/iotest"
)

// checkStreamResult asserts what must hold for any stream, however malformed.
func checkStreamResult(t *testing.T, r Result) {
	t.Helper()
	if r.Done == 0 {
		t.Fatal("Done not set")
	}
	if r.FirstToken != 0 && (r.FirstEvent == 0 || r.FirstEvent > r.FirstToken || r.FirstToken > r.LastToken || r.LastToken > r.Done) {
		t.Fatalf("instants out of order: event %v first %v last %v done %v", r.FirstEvent, r.FirstToken, r.LastToken, r.Done)
	}
	if r.FirstToken == 0 && r.LastToken != 0 {
		t.Fatal("LastToken without FirstToken")
	}
}

// fuzzStream checks a parser on arbitrary bytes: no panic, sane instants, and the same
// outcome whether the body arrives whole or one byte per read.
func fuzzStream(t *testing.T, body []byte, parseFn func(b *bytes.Reader, split bool) (Result, string)) {
	// go-sse rescans a partial event on every read (bufio.Scanner), so one-byte reads
	// cost O(n^2) in the event size; real reads carry whole events. Bound the input
	// so the split run stays fast.
	if len(body) > 16<<10 {
		t.Skip("input larger than 16 KiB")
	}
	whole, wr := parseFn(bytes.NewReader(body), false)
	split, sr := parseFn(bytes.NewReader(body), true)
	checkStreamResult(t, whole)
	if !reflect.DeepEqual(whole, split) || wr != sr {
		t.Fatalf("outcome depends on read sizes:\nwhole %+v %q\nsplit %+v %q", whole, wr, split, sr)
	}
	if whole.Err == "" && whole.FirstEvent == 0 {
		t.Fatal("success without any event")
	}
}

func streamSeeds(f *testing.F, names ...string) {
	for _, n := range names {
		f.Add([]byte(readFixture(f, n)))
	}
}

func FuzzOpenAIStream(f *testing.F) {
	streamSeeds(f, "vllm-chat-stream.txt")
	f.Add([]byte(sseOpenAI(roleChunk, content("a"), finishChunk, usageChunk, "[DONE]")))
	f.Add([]byte("data: {\"error\":{\"message\":\"x\"}}\r\n\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzStream(t, body, func(b *bytes.Reader, split bool) (Result, string) {
			r := TurnRequest{}.NewResult()
			if split {
				return r, parseOpenAIStream(iotest.OneByteReader(b), newStepClock(), &r)
			}
			reply := parseOpenAIStream(b, newStepClock(), &r)
			return r, reply
		})
	})
}

func FuzzAnthropicStream(f *testing.F) {
	streamSeeds(f, "anthropic-stream.txt", "anthropic-stream-tool-use.txt", "anthropic-stream-cache-read.txt")
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"message\":\"x\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzStream(t, body, func(b *bytes.Reader, split bool) (Result, string) {
			r := TurnRequest{}.NewResult()
			if split {
				return r, parseAnthropicStream(iotest.OneByteReader(b), newStepClock(), &r)
			}
			reply := parseAnthropicStream(b, newStepClock(), &r)
			return r, reply
		})
	})
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte("stages: [2, 4]\nstage_duration: 20s\nturn_tokens: {mean: 80, jitter: 20}\n"))
	f.Add([]byte("name: x\nturns: 0\nvariants: [on-2, off]\n"))
	f.Add([]byte("first_turn_tokens: {min: 1, max: 3}\nwarmup: 1s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario does not validate: %v", err)
		}
		if d := sc.WithDefaults(); !reflect.DeepEqual(d, sc) {
			t.Fatalf("defaults not applied:\n%+v\n%+v", d, sc)
		}
		// A workload can be built and a session started from anything accepted
		// (sizes are kept small to bound the fuzzer's memory).
		if sc.SystemPromptTokens+sc.FirstTurnTokens+sc.FirstTurnSpread.Max+sc.SystemPromptSpread.Max < 100_000 {
			w := NewWorkload(sc)
			if _, ok := w.Session(0).NextTurn(0); !ok {
				t.Fatal("no first turn")
			}
		}
	})
}
