package loadgenhttp

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// parse runs an API's stream parser over body, read one byte at a time (so every
// event is split across reads).
func parse(api, body string) (loadgen.Result, string) {
	r := loadgen.TurnRequest{}.NewResult()
	clk := newStepClock()
	rd := iotest.OneByteReader(strings.NewReader(body))
	var reply string
	switch api {
	case loadgen.APIAnthropicMessages:
		reply = parseAnthropicStream(rd, clk, &r)
	case loadgen.APIOpenAIResponses:
		reply = parseResponsesStream(rd, clk, &r)
	default:
		reply = parseOpenAIStream(rd, clk, &r)
	}
	if r.Err == "" {
		r.Status = 200
	}
	return r, reply
}

const (
	roleChunk    = `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	finishChunk  = `{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`
	usageChunk   = `{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":3,"total_tokens":123,"prompt_tokens_details":{"cached_tokens":96}}}`
	usageNoCache = `{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":3,"total_tokens":123}}`
)

func content(s string) string {
	b, _ := json.Marshal(s)
	return `{"choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}`
}

// docs/bench.md failure case 1: vLLM's first chunk is role-only with content "": it is the first
// event, not the first token.
func TestRoleOnlyFirstChunkIsNotFirstToken(t *testing.T) {
	t.Run("fixture", func(t *testing.T) {
		// The recorded vLLM stream: role-only chunk, then content "v" (cut after that).
		r, reply := parse(loadgen.APIOpenAIChat, readFixture(t, "vllm-chat-stream.txt"))
		if r.FirstEvent == 0 || r.FirstToken == 0 {
			t.Fatalf("FirstEvent %v FirstToken %v: want both set", r.FirstEvent, r.FirstToken)
		}
		if r.FirstToken <= r.FirstEvent {
			t.Errorf("FirstToken %v not after FirstEvent %v: the role-only chunk was timed as a token", r.FirstToken, r.FirstEvent)
		}
		if reply != "v" {
			t.Errorf("reply %q, want %q", reply, "v")
		}
		// The excerpt ends without [DONE]: a cut stream is a failed turn.
		if !strings.Contains(r.Err, "[DONE]") {
			t.Errorf("Err %q: want a stream cut before [DONE]", r.Err)
		}
	})
	t.Run("role chunk alone", func(t *testing.T) {
		r, _ := parse(loadgen.APIOpenAIChat, sseOpenAI(roleChunk, finishChunk, "[DONE]"))
		if r.FirstToken != 0 || r.LastToken != 0 {
			t.Errorf("FirstToken %v LastToken %v: want none for a stream without content", r.FirstToken, r.LastToken)
		}
		if r.FirstEvent == 0 {
			t.Error("FirstEvent not set")
		}
	})
	t.Run("reasoning and tool calls are tokens", func(t *testing.T) {
		reasoning := `{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}`
		emptyTool := `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}`
		tool := `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}`
		for name, first := range map[string]string{"reasoning": reasoning, "tool": tool} {
			r, _ := parse(loadgen.APIOpenAIChat, sseOpenAI(roleChunk, emptyTool, first, "[DONE]"))
			// events: role (1st Now), empty tool (2nd), token (3rd), [DONE]
			if r.FirstToken == 0 || r.FirstToken <= r.FirstEvent {
				t.Errorf("%s: FirstToken %v FirstEvent %v", name, r.FirstToken, r.FirstEvent)
			}
			if r.OutputTokens != 1 {
				t.Errorf("%s: OutputTokens %d, want 1 (one content event, no usage)", name, r.OutputTokens)
			}
		}
	})
	t.Run("anthropic content_block_start is not a token", func(t *testing.T) {
		r, reply := parse(loadgen.APIAnthropicMessages, readFixture(t, "anthropic-stream.txt"))
		if r.Err != "" {
			t.Fatalf("Err %q", r.Err)
		}
		// message_start, content_block_start, ping come before the text_delta "2".
		if r.FirstToken-r.FirstEvent < 3*time.Millisecond {
			t.Errorf("FirstToken %v only %v after FirstEvent %v: an empty event was timed as a token",
				r.FirstToken, r.FirstToken-r.FirstEvent, r.FirstEvent)
		}
		if reply != "2" {
			t.Errorf("reply %q, want %q", reply, "2")
		}
	})
}

// docs/bench.md failure case 2: usage-only, finish-only and [DONE] events are not tokens; the counts
// come from the server's usage when present.
func TestUsageAndDoneEventsAreNotTokens(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantOut    int
		wantPrompt int
		wantCached int
	}{
		{"usage with cached tokens", sseOpenAI(roleChunk, content("a"), content(" b"), content(" c"), finishChunk, usageChunk, "[DONE]"), 3, 120, 96},
		{"usage without details", sseOpenAI(roleChunk, content("a"), content(" b"), content(" c"), finishChunk, usageNoCache, "[DONE]"), 3, 120, -1},
		// Without usage the count is the number of content events, and prompt/cache are unknown.
		{"no usage", sseOpenAI(roleChunk, content("a"), content(" b"), content(" c"), finishChunk, "[DONE]"), 3, -1, -1},
		// Usage says more tokens than events (several tokens per chunk): usage wins.
		{"usage wins", sseOpenAI(roleChunk, content("ab"), finishChunk, `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`, "[DONE]"), 2, 5, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := parse(loadgen.APIOpenAIChat, tt.body)
			if !r.OK() {
				t.Fatalf("turn failed: %s", r.Err)
			}
			if r.OutputTokens != tt.wantOut || r.PromptTokens != tt.wantPrompt || r.CachedTokens != tt.wantCached {
				t.Errorf("tokens out %d prompt %d cached %d, want %d %d %d",
					r.OutputTokens, r.PromptTokens, r.CachedTokens, tt.wantOut, tt.wantPrompt, tt.wantCached)
			}
			// LastToken is the last content event, before the finish, usage and
			// [DONE] events, which all came later (each Now() advances the clock).
			if r.LastToken == 0 || r.LastToken >= r.Done-2*time.Millisecond {
				t.Errorf("LastToken %v too close to Done %v: a non-content event was timed as a token", r.LastToken, r.Done)
			}
		})
	}
	t.Run("anthropic", func(t *testing.T) {
		r, reply := parse(loadgen.APIAnthropicMessages, readFixture(t, "anthropic-stream-tool-use.txt"))
		if !r.OK() {
			t.Fatalf("turn failed: %s", r.Err)
		}
		if r.OutputTokens != 89 || r.PromptTokens != 472 || r.CachedTokens != -1 {
			t.Errorf("tokens out %d prompt %d cached %d, want 89 472 -1", r.OutputTokens, r.PromptTokens, r.CachedTokens)
		}
		if want := "Okay, let's check the weather for San Francisco, CA:"; reply != want {
			t.Errorf("reply %q, want %q", reply, want)
		}
	})
	t.Run("anthropic cache read", func(t *testing.T) {
		r, reply := parse(loadgen.APIAnthropicMessages, readFixture(t, "anthropic-stream-cache-read.txt"))
		if !r.OK() {
			t.Fatalf("turn failed: %s", r.Err)
		}
		// message_delta's usage is cumulative and final (Anthropic streaming docs), so
		// it overrides message_start's (input 100, cache read 55096).
		if r.PromptTokens != 181 || r.CachedTokens != 0 || r.OutputTokens != 8 {
			t.Errorf("tokens prompt %d cached %d out %d, want 181 0 8", r.PromptTokens, r.CachedTokens, r.OutputTokens)
		}
		if reply != "Hello! 👋" {
			t.Errorf("reply %q", reply)
		}
	})
	t.Run("anthropic cache read from message_start", func(t *testing.T) {
		body := sseNamed(
			"message_start", `{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":4000,"cache_creation_input_tokens":6,"output_tokens":1}}}`,
			"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
			"message_stop", `{"type":"message_stop"}`)
		r, _ := parse(loadgen.APIAnthropicMessages, body)
		if !r.OK() || r.PromptTokens != 4016 || r.CachedTokens != 4000 || r.OutputTokens != 2 {
			t.Errorf("ok %v prompt %d cached %d out %d, want true 4016 4000 2", r.OK(), r.PromptTokens, r.CachedTokens, r.OutputTokens)
		}
	})
}

// docs/bench.md failure case 3: an error event inside an HTTP 200 stream is a failed turn.
func TestErrorEventInsideOKStreamFailsTurn(t *testing.T) {
	tests := []struct {
		name, api, body, want string
	}{
		{"openai error object", loadgen.APIOpenAIChat,
			sseOpenAI(roleChunk, content("a"), `{"error":{"object":"error","message":"out of KV cache","type":"InternalServerError","code":500}}`, "[DONE]"),
			"out of KV cache"},
		{"openai error response", loadgen.APIOpenAIChat,
			sseOpenAI(roleChunk, `{"object":"error","message":"engine dead","type":"EngineDeadError","code":500}`, "[DONE]"),
			"engine dead"},
		{"anthropic error event", loadgen.APIAnthropicMessages,
			sseNamed("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":3}}}`,
				"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
				"message_stop", `{"type":"message_stop"}`),
			"Overloaded"},
		{"anthropic error without event name", loadgen.APIAnthropicMessages,
			"data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n",
			"boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, via := range []string{"parser", "http"} {
				var r loadgen.Result
				if via == "parser" {
					r, _ = parse(tt.api, tt.body)
				} else {
					srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
						w.Header().Set("Content-Type", "text/event-stream")
						io.WriteString(w, tt.body)
					}))
					defer srv.Close()
					sc := loadgen.TinyScenario()
					sc.API = tt.api
					c := NewClient(sc, srv.URL, srv.Client(), nil)
					tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
					r, _ = c.Do(context.Background(), tr, newStepClock())
					if r.Status != 200 {
						t.Fatalf("%s: status %d", via, r.Status)
					}
				}
				if r.OK() {
					t.Fatalf("%s: turn counted a success", via)
				}
				if !strings.Contains(r.Err, tt.want) {
					t.Errorf("%s: Err %q, want it to contain %q", via, r.Err, tt.want)
				}
			}
		})
	}
}

func TestStreamCutBeforeTerminatorFails(t *testing.T) {
	tests := []struct{ name, api, body string }{
		{"openai no DONE", loadgen.APIOpenAIChat, sseOpenAI(roleChunk, content("a"), usageChunk)},
		{"openai half event", loadgen.APIOpenAIChat, sseOpenAI(roleChunk, content("a")) + "data: [DO"},
		{"anthropic no message_stop", loadgen.APIAnthropicMessages, sseNamed(
			"message_start", `{"type":"message_start","message":{"usage":{"input_tokens":3}}}`,
			"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`)},
		{"empty body", loadgen.APIOpenAIChat, ""},
		{"not json", loadgen.APIOpenAIChat, sseOpenAI("{nope", "[DONE]")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := parse(tt.api, tt.body)
			if r.OK() || r.Err == "" {
				t.Errorf("cut stream counted a success (Err %q)", r.Err)
			}
		})
	}
}

// The SSE reading path (go-sse) must handle every line ending, comments, multi-line
// data and events split across reads (parse reads one byte at a time).
func TestSSEFramingVariants(t *testing.T) {
	base := sseOpenAI(roleChunk, content("hel"), content("lo"), usageChunk, "[DONE]")
	tests := map[string]string{
		"LF":       base,
		"CRLF":     strings.ReplaceAll(base, "\n", "\r\n"),
		"CR":       strings.ReplaceAll(base, "\n", "\r"),
		"comments": ": keep-alive\n\n" + strings.Replace(base, "data: [DONE]", ": ping\ndata: [DONE]", 1),
		"multi-line data": "data: {\"choices\":[{\"index\":0,\n" +
			"data: \"delta\":{\"content\":\"hel\"}}]}\n\n" + sseOpenAI(content("lo"), usageChunk, "[DONE]"),
		"no space after colon": strings.ReplaceAll(base, "data: ", "data:"),
		"BOM":                  "\ufeff" + base,
		"id and retry fields":  "id: 7\nretry: 100\n" + base,
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			r, reply := parse(loadgen.APIOpenAIChat, body)
			if !r.OK() {
				t.Fatalf("turn failed: %s", r.Err)
			}
			if reply != "hello" || r.OutputTokens != 3 || r.CachedTokens != 96 {
				t.Errorf("reply %q out %d cached %d, want \"hello\" 3 96", reply, r.OutputTokens, r.CachedTokens)
			}
		})
	}
}

func TestTimeoutIsFailedTurnWithReason(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseOpenAI(roleChunk))
		w.(http.Flusher).Flush()
		select { // hang until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	sc := loadgen.TinyScenario()
	// Long enough for the headers to arrive first on a loaded machine (at 20 ms
	// the timeout sometimes hit before them: status 0).
	sc.RequestTimeout = 300 * time.Millisecond
	c := NewClient(sc, srv.URL, srv.Client(), nil)
	tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
	r, _ := c.Do(context.Background(), tr, newStepClock())
	if r.OK() || !strings.HasPrefix(r.Err, "timeout") || r.Status != 200 {
		t.Errorf("status %d Err %q: want a failed turn whose reason starts with \"timeout\"", r.Status, r.Err)
	}
	if r.FirstEvent == 0 || r.FirstToken != 0 || r.Done <= r.FirstEvent {
		t.Errorf("instants FirstEvent %v FirstToken %v Done %v", r.FirstEvent, r.FirstToken, r.Done)
	}

	// A canceled context (end of variant, Ctrl-C) is reported as canceled, not timeout.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { cancel() }()
	r, _ = c.Do(ctx, tr, newStepClock())
	if r.OK() || strings.HasPrefix(r.Err, "timeout") {
		t.Errorf("canceled turn: Err %q", r.Err)
	}
}

// request_timeout is a no-byte timeout, as clients keep it: a stream that
// takes twice the timeout in all but sends a token every third of it
// succeeds; one whose bytes stop for longer fails, naming the timeout.
func TestTimeoutCountsFromTheLastByte(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, stall := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, sseOpenAI(roleChunk))
			w.(http.Flusher).Flush()
			for range 6 {
				pause := timeout / 3
				if stall {
					pause = 2 * timeout
				}
				select {
				case <-r.Context().Done():
					return
				case <-time.After(pause):
				}
				io.WriteString(w, sseOpenAI(content("hi")))
				w.(http.Flusher).Flush()
			}
			io.WriteString(w, sseOpenAI(finishChunk, usageChunk, "[DONE]"))
		}))
		sc := loadgen.TinyScenario()
		sc.RequestTimeout = timeout
		c := NewClient(sc, srv.URL, srv.Client(), nil)
		tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
		r, _ := c.Do(context.Background(), tr, newStepClock())
		srv.Close()
		if !stall && !r.OK() {
			t.Errorf("tokens every %v: %q, want the turn done", timeout/3, r.Err)
		}
		if stall && (r.OK() || !strings.HasPrefix(r.Err, "timeout: no byte for")) {
			t.Errorf("a %v stall: ok %v %q, want a timeout", 2*timeout, r.OK(), r.Err)
		}
	}
}

func TestNonOKStatusIsFailedTurn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.HeaderReplica, "r3")
		http.Error(w, `{"error":"prompt too long"}`, http.StatusBadRequest)
	}))
	defer srv.Close()
	sc := loadgen.TinyScenario()
	tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
	r, _ := NewClient(sc, srv.URL, srv.Client(), nil).Do(context.Background(), tr, newStepClock())
	if r.OK() || r.Status != 400 || !strings.Contains(r.Err, "prompt too long") || r.Replica != "r3" {
		t.Errorf("status %d Err %q replica %q", r.Status, r.Err, r.Replica)
	}
	// A refused connection: no status at all.
	srv.Close()
	r, _ = NewClient(sc, srv.URL, nil, nil).Do(context.Background(), tr, newStepClock())
	if r.OK() || r.Status != 0 || r.Err == "" || r.Done < r.Sent {
		t.Errorf("refused: status %d Err %q", r.Status, r.Err)
	}
}

// captured is one request as a stub server saw it.
type captured struct {
	path, query string
	header      http.Header
	body        map[string]any
}

func captureServer(t *testing.T, reply string) (*httptest.Server, *[]captured) {
	t.Helper()
	var got []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("decoding request body: %v", err)
		}
		got = append(got, captured{r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		w.Header().Set(wire.HeaderReplica, "r1/rank0")
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, reply)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func TestOpenAIRequestShape(t *testing.T) {
	srv, got := captureServer(t, sseOpenAI(roleChunk, content("ok"), usageChunk, "[DONE]"))
	for _, style := range []string{loadgen.SessionHeaderClaudeCode, loadgen.SessionHeaderXSessionID} {
		sc := loadgen.TinyScenario()
		sc.SessionHeader, sc.Model = style, "qwen3-4b-dp4"
		s := loadgen.NewWorkload(sc).Session(3)
		tr, _ := s.NextTurn(0)
		r, reply := NewClient(sc, srv.URL+"/", srv.Client(), http.Header{"Authorization": {"Bearer x"}}).Do(context.Background(), tr, newStepClock())
		if !r.OK() || reply != "ok" || r.Replica != "r1/rank0" {
			t.Fatalf("%s: ok %v Err %q reply %q replica %q", style, r.OK(), r.Err, reply, r.Replica)
		}
		c := (*got)[len(*got)-1]
		if c.path != "/v1/chat/completions" {
			t.Errorf("path %q", c.path)
		}
		if c.body["model"] != "qwen3-4b-dp4" || c.body["stream"] != true || c.body["max_tokens"] != float64(8) {
			t.Errorf("body model/stream/max_tokens: %v %v %v", c.body["model"], c.body["stream"], c.body["max_tokens"])
		}
		if so, _ := c.body["stream_options"].(map[string]any); so["include_usage"] != true {
			t.Errorf("stream_options %v", c.body["stream_options"])
		}
		msgs, _ := c.body["messages"].([]any)
		if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[0].(map[string]any)["content"] != s.System ||
			msgs[1].(map[string]any)["role"] != "user" {
			t.Errorf("messages: want system + first user message, got %d", len(msgs))
		}
		if c.header.Get("Authorization") != "Bearer x" {
			t.Error("extra header not forwarded")
		}
		hdr := map[string]string{loadgen.SessionHeaderClaudeCode: "X-Claude-Code-Session-Id", loadgen.SessionHeaderXSessionID: "X-Session-ID"}[style]
		if c.header.Get(hdr) != s.Key {
			t.Errorf("%s: header %s = %q, want %q", style, hdr, c.header.Get(hdr), s.Key)
		}
		if r.SessionKey != s.Key || r.Session != 3 || r.Turn != 0 {
			t.Errorf("result identity %q %d %d", r.SessionKey, r.Session, r.Turn)
		}
	}
}

func TestAnthropicRequestShape(t *testing.T) {
	srv, got := captureServer(t, readFixture(t, "anthropic-stream.txt"))
	sc := loadgen.TinyScenario()
	sc.API, sc.Model = loadgen.APIAnthropicMessages, "m"
	s := loadgen.NewWorkload(sc).Session(1)
	tr, _ := s.NextTurn(0)
	r, _ := NewClient(sc, srv.URL, srv.Client(), nil).Do(context.Background(), tr, newStepClock())
	if !r.OK() {
		t.Fatalf("turn failed: %s", r.Err)
	}
	c := (*got)[0]
	if c.path != "/v1/messages" || c.query != "beta=true" {
		t.Errorf("request %s?%s", c.path, c.query)
	}
	if c.header.Get("anthropic-version") != AnthropicVersion || c.header.Get("X-Claude-Code-Session-Id") != s.Key {
		t.Errorf("headers %v", c.header)
	}
	md, _ := c.body["metadata"].(map[string]any)
	uid, _ := md["user_id"].(string)
	var u map[string]string
	if err := json.Unmarshal([]byte(uid), &u); err != nil {
		t.Fatalf("metadata.user_id %q is not a JSON string document: %v", uid, err)
	}
	if u["session_id"] != s.Key || len(u["device_id"]) != 64 || u["account_uuid"] != "" {
		t.Errorf("metadata.user_id %q", uid)
	}
	sys, _ := c.body["system"].([]any)
	if len(sys) != 1 || sys[0].(map[string]any)["text"] != s.System {
		t.Errorf("system %v", c.body["system"])
	}
	if c.body["stream"] != true || c.body["max_tokens"] != float64(8) {
		t.Errorf("stream/max_tokens %v %v", c.body["stream"], c.body["max_tokens"])
	}
}

func TestErrorTextShapes(t *testing.T) {
	tests := map[string]string{
		`"plain"`:                                "plain",
		`{"message":"m","type":"t"}`:             "t: m",
		`{"error":{"message":"inner"}}`:          "inner",
		`not json`:                               "not json",
		`{"error":{"error":{"message":"deep"}}}`: "deep",
	}
	for in, want := range tests {
		if got := errorText([]byte(in)); got != want {
			t.Errorf("errorText(%s) = %q, want %q", in, got, want)
		}
	}
}

// manualClock is a fake clock that stays where it was set: Now does not advance.
type manualClock struct{ t time.Duration }

func (c *manualClock) Now() time.Duration                                    { return c.t }
func (c *manualClock) SleepUntil(ctx context.Context, t time.Duration) error { return ctx.Err() }

// scriptedReader returns one chunk per Read, first setting the clock to Read i's
// instant, (i+1) seconds: a body whose bytes arrive at known instants.
type scriptedReader struct {
	chunks []string
	clock  *manualClock
	i      int
}

func (s *scriptedReader) Read(p []byte) (int, error) {
	if s.i == len(s.chunks) {
		return 0, io.EOF
	}
	s.clock.t = time.Duration(s.i+1) * time.Second
	n := copy(p, s.chunks[s.i])
	s.chunks[s.i] = s.chunks[s.i][n:]
	if s.chunks[s.i] == "" {
		s.i++
	}
	return n, nil
}

// The stream instants are when the event's last bytes were read, not when its
// first bytes came, and not after it was parsed: an event split over two reads
// takes the second read's instant; events delivered by one read share it.
func TestEventInstantIsWhenItsBytesWereRead(t *testing.T) {
	split := func(s string, at int) []string { return []string{s[:at], s[at:]} }
	tests := []struct {
		name   string
		api    string
		chunks []string
		// instants in seconds (read index + 1)
		firstEvent, firstToken, lastToken, done time.Duration
		reply                                   string
	}{
		{
			name: "openai",
			api:  loadgen.APIOpenAIChat,
			chunks: append(append([]string{sseOpenAI(roleChunk)}, // read 1
				split(sseOpenAI(content("a")), 20)...), // reads 2 and 3: "a" completes at 3
				sseOpenAI(content(" b"), content(" c")),       // read 4: two tokens at once
				sseOpenAI(finishChunk, usageChunk, "[DONE]")), // read 5
			firstEvent: 1, firstToken: 3, lastToken: 4, done: 5, reply: "a b c",
		},
		{
			name: "anthropic",
			api:  loadgen.APIAnthropicMessages,
			chunks: append([]string{
				// read 1: message_start, content_block_start and ping
				sseNamed("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}`,
					"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
					"ping", `{"type":"ping"}`)},
				append(split(sseNamed("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`), 30), // reads 2, 3
					sseNamed("content_block_stop", `{"type":"content_block_stop","index":0}`,
						"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
						"message_stop", `{"type":"message_stop"}`))...), // read 4
			firstEvent: 1, firstToken: 3, lastToken: 3, done: 4, reply: "hi",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{}
			body := &scriptedReader{chunks: slices.Clone(tt.chunks), clock: clk}
			r := loadgen.TurnRequest{}.NewResult()
			var reply string
			if tt.api == loadgen.APIAnthropicMessages {
				reply = parseAnthropicStream(body, clk, &r)
			} else {
				reply = parseOpenAIStream(body, clk, &r)
			}
			if r.Err != "" || reply != tt.reply {
				t.Fatalf("Err %q reply %q, want no error and %q", r.Err, reply, tt.reply)
			}
			got := []time.Duration{r.FirstEvent, r.FirstToken, r.LastToken, r.Done}
			want := []time.Duration{tt.firstEvent * time.Second, tt.firstToken * time.Second, tt.lastToken * time.Second, tt.done * time.Second}
			if !slices.Equal(got, want) {
				t.Errorf("first event, first token, last token, done = %v, want %v", got, want)
			}
		})
	}
	// With a clock that advances on every call, a body read in one piece still
	// gives every event the same instant: no instant is taken per parsed event.
	clk := newStepClock()
	r := loadgen.TurnRequest{}.NewResult()
	parseOpenAIStream(strings.NewReader(sseOpenAI(roleChunk, content("a"), content(" b"), usageChunk, "[DONE]")), clk, &r)
	if r.Err != "" || r.FirstEvent == 0 || r.FirstToken != r.FirstEvent || r.LastToken != r.FirstEvent || r.Done <= r.LastToken {
		t.Errorf("one read: Err %q first event %v first token %v last token %v done %v, want the first three equal and done later",
			r.Err, r.FirstEvent, r.FirstToken, r.LastToken, r.Done)
	}
}

// countingServer streams body on every request, flushed (so chunked, as a real
// stream is) in pieces of a few bytes, and counts the connections it accepted.
func countingServer(t *testing.T, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for rest := body; rest != ""; {
			n := min(len(rest), 64)
			io.WriteString(w, rest[:n])
			w.(http.Flusher).Flush()
			rest = rest[n:]
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// A session's turns reuse one keep-alive connection: the client reads the stream
// to its end after the terminator instead of closing it early (which makes
// net/http drop the connection and dial anew for every turn).
func TestTurnsReuseTheConnection(t *testing.T) {
	// The server ends each response right after the terminator; a loaded machine
	// may delay that, so the drain may wait as long as it takes here.
	defer func(d time.Duration) { drainWait = d }(drainWait)
	drainWait = time.Hour
	for _, api := range []string{loadgen.APIOpenAIChat, loadgen.APIAnthropicMessages} {
		t.Run(api, func(t *testing.T) {
			body := sseOpenAI(roleChunk, content("ok"), finishChunk, usageChunk, "[DONE]")
			if api == loadgen.APIAnthropicMessages {
				body = readFixture(t, "anthropic-stream.txt")
			}
			srv, conns := countingServer(t, body)
			sc := loadgen.TinyScenario()
			sc.API = api
			c := NewClient(sc, srv.URL, &http.Client{Transport: &http.Transport{}}, nil)
			s := loadgen.NewWorkload(sc).Session(0)
			for i := range 3 {
				tr, _ := s.NextTurn(0)
				r, reply := c.Do(context.Background(), tr, newStepClock())
				if !r.OK() {
					t.Fatalf("turn %d failed: %s", i, r.Err)
				}
				s.AddReply(reply)
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("3 sequential turns opened %d connections, want 1", n)
			}
		})
	}
}

// eofBody is a response body that records whether it was read to EOF before
// Close: net/http returns a connection to the pool only in that case.
type eofBody struct {
	r                io.Reader
	sawEOF, eofFirst bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.sawEOF = true
	}
	return n, err
}

func (b *eofBody) Close() error { b.eofFirst = b.sawEOF; return nil }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The client reads what follows the terminator (here the rest of the body, as the
// chunked encoding's last chunk would be) before closing the body.
func TestBodyReadToEOFAfterTerminator(t *testing.T) {
	for _, api := range []string{loadgen.APIOpenAIChat, loadgen.APIAnthropicMessages} {
		t.Run(api, func(t *testing.T) {
			body := sseOpenAI(roleChunk, content("ok"), usageChunk, "[DONE]")
			if api == loadgen.APIAnthropicMessages {
				body = readFixture(t, "anthropic-stream.txt")
			}
			var got *eofBody
			hc := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
				got = &eofBody{r: strings.NewReader(body + ": trailing comment after the terminator\n\n")}
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: got}, nil
			})}
			sc := loadgen.TinyScenario()
			sc.API = api
			tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
			r, _ := NewClient(sc, "http://stub", hc, nil).Do(context.Background(), tr, newStepClock())
			if !r.OK() {
				t.Fatalf("turn failed: %s", r.Err)
			}
			if !got.eofFirst {
				t.Error("body closed before it was read to EOF: the connection cannot be reused")
			}
		})
	}
}

// A server that keeps the response open after [DONE] does not hold the turn: the
// drain gives up (drainWait) and the connection is dropped; the turn's record is
// what the stream showed up to the terminator.
func TestDrainAfterTerminatorIsBounded(t *testing.T) {
	gone := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseOpenAI(roleChunk, content("ok"), usageChunk, "[DONE]"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(gone)
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	sc := loadgen.TinyScenario()
	tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
	r, reply := NewClient(sc, srv.URL, srv.Client(), nil).Do(context.Background(), tr, newStepClock())
	if !r.OK() || reply != "ok" || r.OutputTokens != 3 {
		t.Fatalf("ok %v Err %q reply %q out %d", r.OK(), r.Err, reply, r.OutputTokens)
	}
	select { // hang guard only: the drain gives up after drainWait
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never saw the client give up the open response")
	}
}

// docs/bench.md failure case 1's last step: TTFB runs from the request being sent to the first
// token, not to the first event of any kind (a role-only chunk or headers-only
// event arrive earlier) and not from when the turn was intended.
func TestTTFBIsSentToFirstToken(t *testing.T) {
	r := loadgen.Result{Intended: 1 * time.Second, Sent: 2 * time.Second, Headers: 3 * time.Second,
		FirstEvent: 4 * time.Second, FirstToken: 7 * time.Second, Status: 200}
	if got := r.TTFB(); got != 5*time.Second {
		t.Errorf("TTFB = %v, want FirstToken - Sent = 5s", got)
	}
	r.FirstToken = 0 // no token produced
	if got := r.TTFB(); got != 0 {
		t.Errorf("TTFB without a token = %v, want 0", got)
	}
}
