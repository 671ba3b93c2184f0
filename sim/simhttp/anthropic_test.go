package simhttp

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	sse "github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/sim"
)

func TestAnthropicStreamEventOrder(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	const maxTokens = 4
	body := map[string]any{
		"model": srv.Model(), "max_tokens": maxTokens, "stream": true,
		"system": []map[string]any{{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=1;"},
			{"type": "text", "text": "be brief", "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "hello there"}}}},
	}
	evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/messages?beta=true", body))
	var types []string
	for _, ev := range evs {
		m := jsonOf(t, ev.Data)
		if m["type"] != ev.Type {
			t.Errorf("event line %q carries data type %v", ev.Type, m["type"])
		}
		types = append(types, ev.Type)
	}
	want := []string{"message_start", "content_block_start"}
	for range maxTokens {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if !slices.Equal(types, want) {
		t.Fatalf("event order %v\nwant %v", types, want)
	}

	start := jsonOf(t, evs[0].Data)["message"].(map[string]any)
	if start["role"] != "assistant" || start["type"] != "message" || start["stop_reason"] != nil {
		t.Errorf("message_start message %v", start)
	}
	// The billing header block is dropped, as vLLM does.
	wantPrompt := len(sim.RenderChat(nil, []sim.ChatMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello there"}}, true))
	if got := num(t, start, "usage", "input_tokens"); got != wantPrompt {
		t.Errorf("input_tokens %d, want %d", got, wantPrompt)
	}
	block := jsonOf(t, evs[1].Data)
	if cb := block["content_block"].(map[string]any); cb["type"] != "text" || cb["text"] != "" || num(t, block, "index") != 0 {
		t.Errorf("content_block_start %v", block)
	}
	var text strings.Builder
	for _, ev := range evs[2 : 2+maxTokens] {
		d := jsonOf(t, ev.Data)["delta"].(map[string]any)
		if d["type"] != "text_delta" {
			t.Errorf("delta %v", d)
		}
		text.WriteString(d["text"].(string))
	}
	if n := len(sim.Tokenize(nil, text.String())); n != maxTokens {
		t.Errorf("text %q is %d tokens", text.String(), n)
	}
	md := jsonOf(t, evs[len(evs)-2].Data)
	if md["delta"].(map[string]any)["stop_reason"] != "max_tokens" {
		t.Errorf("message_delta %v", md)
	}
	if num(t, md, "usage", "output_tokens") != maxTokens || num(t, md, "usage", "input_tokens") != wantPrompt {
		t.Errorf("message_delta usage %v", md["usage"])
	}
}

func TestAnthropicNonStreamAndCountTokens(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	msgs := []map[string]any{{"role": "user", "content": "what is up"}}
	tools := []map[string]any{{"name": "Read", "description": "read a file",
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}}
	ct := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/messages/count_tokens",
		map[string]any{"model": srv.Model(), "messages": msgs, "tools": tools}), 200)
	n := num(t, ct, "input_tokens")
	m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/messages",
		map[string]any{"model": srv.Model(), "messages": msgs, "tools": tools, "max_tokens": 3}), 200)
	if m["type"] != "message" || m["role"] != "assistant" || m["stop_reason"] != "max_tokens" {
		t.Errorf("message %v", m)
	}
	if got := num(t, m, "usage", "input_tokens"); got != n {
		t.Errorf("input_tokens %d, count_tokens %d", got, n)
	}
	if got := num(t, m, "usage", "output_tokens"); got != 3 {
		t.Errorf("output_tokens %d", got)
	}
	content := m["content"].([]any)
	if len(content) != 1 || content[0].(map[string]any)["type"] != "text" {
		t.Errorf("content %v", content)
	}
	noTools := len(sim.RenderChat(nil, []sim.ChatMessage{{Role: "user", Content: "what is up"}}, true))
	if n <= noTools {
		t.Errorf("count with tools %d not above %d without: tools not rendered", n, noTools)
	}
}

// TestClaudeCodeTurns replays the two recorded Claude Code 2.1.328 turns (role
// "system" inside messages, system blocks with cache_control, 12 tools): both are
// accepted, and repeating turn 1 (as Claude Code's retry does) hits the prefix cache.
// The two recorded turns do not share a prefix with each other: the capture replaced
// their prose with independent filler.
func TestClaudeCodeTurns(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) {
		c.MaxModelLen = 131072         // the recorded turns ask for max_tokens 32000
		c.NumGPUBlocks = 131072/16 + 1 // vLLM keeps one null block
		c.ReplyTokens = 8
	})
	bs := srv.Engines()[0].Config().BlockSize
	type usage struct{ input, cached int }
	var got []usage
	for _, f := range []string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json", "claude-code-2.1.328-turn1.json"} {
		raw, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Body map[string]any `json:"body"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		rec.Body["model"] = srv.Model()
		evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/messages?beta=true", rec.Body,
			"anthropic-version", "2023-06-01", "anthropic-beta", "claude-code-20250219"))
		if evs[0].Type != "message_start" || evs[len(evs)-1].Type != "message_stop" {
			t.Fatalf("%s: events from %q to %q", f, evs[0].Type, evs[len(evs)-1].Type)
		}
		md := jsonOf(t, evs[len(evs)-2].Data)
		if md["delta"].(map[string]any)["stop_reason"] != "end_turn" {
			t.Errorf("%s: stop_reason %v (a reply shorter than max_tokens ends the turn)", f, md["delta"])
		}
		start := jsonOf(t, evs[0].Data)
		// The prompt is input_tokens (not from cache) + cache_read_input_tokens.
		read := num(t, start, "message", "usage", "cache_read_input_tokens")
		got = append(got, usage{num(t, start, "message", "usage", "input_tokens") + read, read})
		ct := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/messages/count_tokens", rec.Body), 200)
		if n := num(t, ct, "input_tokens"); n != got[len(got)-1].input {
			t.Errorf("%s: count_tokens %d, prompt (input + cache read) %d", f, n, got[len(got)-1].input)
		}
	}
	if got[0].cached != 0 {
		t.Errorf("cold turn 1 cached %d", got[0].cached)
	}
	if want := (got[2].input - 1) / bs * bs; got[2].cached != want {
		t.Errorf("repeated turn 1 cached %d, want %d", got[2].cached, want)
	}
}

// TestAnthropicStreamMatchesRecording compares the event sequence and the
// message_start keys with a stream recorded from api.anthropic.com
// (testdata/anthropic-stream.txt). The recording has a ping event, which vLLM does
// not send.
func TestAnthropicStreamMatchesRecording(t *testing.T) {
	f, err := os.Open("testdata/anthropic-stream.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recTypes []string
	var recStart map[string]any
	for ev, err := range sse.Read(f, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "ping" {
			continue
		}
		if ev.Type == "message_start" {
			recStart = jsonOf(t, ev.Data)["message"].(map[string]any)
		}
		recTypes = append(recTypes, ev.Type)
	}
	srv, ts := newTestServer(t, nil)
	body := map[string]any{"model": srv.Model(), "max_tokens": 1, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "2+2?"}}}
	evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/messages?beta=true", body))
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, recTypes) {
		t.Errorf("event types %v, recorded %v", types, recTypes)
	}
	start := jsonOf(t, evs[0].Data)["message"].(map[string]any)
	for k := range recStart {
		if _, ok := start[k]; !ok && k != "stop_details" {
			t.Errorf("message_start lacks %q (recorded has it)", k)
		}
	}
	for _, k := range []string{"input_tokens", "output_tokens", "cache_read_input_tokens"} {
		if _, ok := start["usage"].(map[string]any)[k]; !ok {
			t.Errorf("message_start usage lacks %s", k)
		}
	}
}
