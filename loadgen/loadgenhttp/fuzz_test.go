package loadgenhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"testing/iotest"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// checkStreamResult asserts what must hold for any stream, however malformed.
func checkStreamResult(t *testing.T, r loadgen.Result) {
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

// presence keeps only whether each stream instant was set: instants are the
// instants the bytes were read (arrivalReader), so they depend on how the body was
// split into reads, and nothing else may.
func presence(r loadgen.Result) loadgen.Result {
	for _, t := range []*time.Duration{&r.FirstEvent, &r.FirstToken, &r.LastToken, &r.Done} {
		if *t != 0 {
			*t = 1
		}
	}
	return r
}

// fuzzStream checks a parser on arbitrary bytes: no panic, sane instants, and the same
// outcome (apart from the instants' values) whether the body arrives whole or one
// byte per read.
func fuzzStream(t *testing.T, body []byte, parseFn func(b *bytes.Reader, split bool) (loadgen.Result, string)) {
	// go-sse rescans a partial event on every read (bufio.Scanner), so one-byte reads
	// cost O(n^2) in the event size; real reads carry whole events. Bound the input
	// so the split run stays fast.
	if len(body) > 16<<10 {
		t.Skip("input larger than 16 KiB")
	}
	whole, wr := parseFn(bytes.NewReader(body), false)
	split, sr := parseFn(bytes.NewReader(body), true)
	checkStreamResult(t, whole)
	checkStreamResult(t, split)
	if !reflect.DeepEqual(presence(whole), presence(split)) || wr != sr {
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
		fuzzStream(t, body, func(b *bytes.Reader, split bool) (loadgen.Result, string) {
			r := loadgen.TurnRequest{}.NewResult()
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
		fuzzStream(t, body, func(b *bytes.Reader, split bool) (loadgen.Result, string) {
			r := loadgen.TurnRequest{}.NewResult()
			if split {
				return r, parseAnthropicStream(iotest.OneByteReader(b), newStepClock(), &r)
			}
			reply := parseAnthropicStream(b, newStepClock(), &r)
			return r, reply
		})
	})
}

// eventDecoder must decode a sequence of events exactly as json.Unmarshal decodes
// each alone: same success, same error text, same value (an absent or empty
// choices array may be empty instead of nil after reset), nothing carried over
// from one event to the next.
func FuzzEventDecoder(f *testing.F) {
	f.Add([]byte(roleChunk + "\n" + content("a") + "\n" + finishChunk + "\n" + usageChunk))
	f.Add([]byte(`{"choices":[{"delta":{"content":"x"}},{"delta":{"reasoning":"y"}}]}` + "\n" + `{"choices":[{"delta":{}}]}` + "\n" + `{"object":"error","message":"m"}`))
	f.Add([]byte(`{"a":1} x` + "\n" + `{"choices":[]}` + "\n" + `123` + "\n" + `{"choices":[{"delta":{"content":"z"}}]}`))
	f.Add([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":3}}}` + "\n" + `{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}` + "\n" + `{"choices":[{"delta":{"content":"a"}` + "\n" + `{"type":"message_stop"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var ochunk openAIChunk
		var oaDec, anDec eventDecoder
		for line := range bytes.SplitSeq(in, []byte("\n")) {
			data := string(bytes.TrimSpace(line))
			if data == "" {
				continue
			}
			ochunk.reset()
			gotErr := oaDec.decode(data, &ochunk)
			var want openAIChunk
			wantErr := json.Unmarshal([]byte(data), &want)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("openai %q: error %v, json.Unmarshal %v", data, gotErr, wantErr)
			}
			got := ochunk
			if len(got.Choices) == 0 && len(want.Choices) == 0 {
				got.Choices, want.Choices = nil, nil
			}
			if wantErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("openai %q:\ngot  %+v\nwant %+v", data, got, want)
			}

			var agot, awant anthropicEvent
			gotErr = anDec.decode(data, &agot)
			wantErr = json.Unmarshal([]byte(data), &awant)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("anthropic %q: error %v, json.Unmarshal %v", data, gotErr, wantErr)
			}
			if wantErr == nil && !reflect.DeepEqual(agot, awant) {
				t.Fatalf("anthropic %q:\ngot  %+v\nwant %+v", data, agot, awant)
			}
		}
	})
}
