package loadgenhttp

import (
	"context"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

// TestResponsesStreamFixture: on the spec-derived stream, TTFB is the first
// output_text delta (not response.created), usage comes from response.completed.
func TestResponsesStreamFixture(t *testing.T) {
	r, reply := parse(loadgen.APIOpenAIResponses, readFixture(t, "responses-stream-spec.txt"))
	if !r.OK() {
		t.Fatalf("turn failed: %s", r.Err)
	}
	if r.FirstEvent == 0 || r.FirstToken <= r.FirstEvent {
		t.Errorf("FirstEvent %v FirstToken %v: want the first delta after response.created", r.FirstEvent, r.FirstToken)
	}
	if reply != "Hello there" || r.PromptTokens != 20 || r.OutputTokens != 2 || r.CachedTokens != 0 {
		t.Errorf("reply %q prompt %d output %d cached %d", reply, r.PromptTokens, r.OutputTokens, r.CachedTokens)
	}
}

func respEv(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

func TestResponsesStreamCases(t *testing.T) {
	created := respEv("response.created", `{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}`)
	completed := respEv("response.completed", `{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":32},"output_tokens":3,"total_tokens":53}}}`)
	tests := []struct {
		name        string
		body        string
		wantErr     string // substring; "" = ok
		wantTokens  int    // content events before usage (usage wins for OutputTokens)
		wantCached  int
		wantFirstAt int // index of the event that is the first token, counted from 1
	}{
		{name: "reasoning first", body: created + respEv("response.reasoning_text.delta", `{"delta":"hmm"}`) + respEv("response.output_text.delta", `{"delta":"x"}`) + completed, wantCached: 32, wantFirstAt: 2},
		{name: "function call", body: created + respEv("response.function_call_arguments.delta", `{"delta":"{\"a\":"}`) + completed, wantCached: 32, wantFirstAt: 2},
		// An empty delta is no token: the first token is the later one.
		{name: "empty delta", body: created + respEv("response.output_text.delta", `{"delta":""}`) + respEv("response.output_text.delta", `{"delta":"y"}`) + completed, wantCached: 32, wantFirstAt: 3},
		{name: "error event", body: created + respEv("error", `{"type":"error","code":null,"message":"engine died","param":null}`), wantErr: "engine died"},
		{name: "failed", body: created + respEv("response.failed", `{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}`), wantErr: "boom"},
		{name: "cut before completed", body: created + respEv("response.output_text.delta", `{"delta":"x"}`), wantErr: "response.completed"},
		// No event line: the JSON type is used.
		{name: "type only in data", body: "data: {\"type\":\"response.output_text.delta\",\"delta\":\"z\"}\n\n" + completed, wantCached: 32, wantFirstAt: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := parse(loadgen.APIOpenAIResponses, tc.body)
			if tc.wantErr != "" {
				if r.OK() || !strings.Contains(r.Err, tc.wantErr) {
					t.Fatalf("Err %q, want it to contain %q", r.Err, tc.wantErr)
				}
				return
			}
			if !r.OK() {
				t.Fatalf("turn failed: %s", r.Err)
			}
			if r.PromptTokens != 50 || r.OutputTokens != 3 || r.CachedTokens != tc.wantCached {
				t.Errorf("prompt %d output %d cached %d", r.PromptTokens, r.OutputTokens, r.CachedTokens)
			}
			// The step clock advances per read; compare against a parse of the
			// stream cut right after the expected first-token event.
			evs := strings.SplitAfter(tc.body, "\n\n")
			cut, _ := parse(loadgen.APIOpenAIResponses, strings.Join(evs[:tc.wantFirstAt], ""))
			if cut.FirstToken != r.FirstToken {
				t.Errorf("FirstToken %v, want %v (event %d)", r.FirstToken, cut.FirstToken, tc.wantFirstAt)
			}
		})
	}
}

// TestResponsesRequestShape: the Codex CLI's request form (docs/responses-api.md).
func TestResponsesRequestShape(t *testing.T) {
	srv, got := captureServer(t, readFixture(t, "responses-stream-spec.txt"))
	sc := loadgen.TinyScenario()
	sc.API, sc.Model, sc.SessionHeader = loadgen.APIOpenAIResponses, "m", "" // the API's default style: codex
	s := loadgen.NewWorkload(sc).Session(1)
	tr, _ := s.NextTurn(0)
	r, _ := NewClient(sc, srv.URL, srv.Client(), nil).Do(context.Background(), tr, newStepClock())
	if !r.OK() {
		t.Fatalf("turn failed: %s", r.Err)
	}
	c := (*got)[0]
	if c.path != "/v1/responses" {
		t.Errorf("path %s", c.path)
	}
	if c.header.Get("Session-Id") != s.Key || c.header.Get("Thread-Id") != s.Key || c.header.Get("X-Claude-Code-Session-Id") != "" {
		t.Errorf("headers %v", c.header)
	}
	if c.body["prompt_cache_key"] != s.Key || c.body["stream"] != true || c.body["store"] != false || c.body["instructions"] != s.System {
		t.Errorf("body %v", c.body)
	}
	input, _ := c.body["input"].([]any)
	if len(input) != len(tr.Messages) {
		t.Fatalf("input %v", c.body["input"])
	}
	first := input[0].(map[string]any)
	part := first["content"].([]any)[0].(map[string]any)
	if first["type"] != "message" || first["role"] != tr.Messages[0].Role || part["type"] != "input_text" || part["text"] != tr.Messages[0].Content {
		t.Errorf("input[0] %v", first)
	}
}
