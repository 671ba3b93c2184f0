package simhttp

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/sim"
)

func chatBody(model string, msgs []map[string]any, maxTokens int, stream bool) map[string]any {
	b := map[string]any{"model": model, "messages": msgs, "max_tokens": maxTokens}
	if stream {
		b["stream"] = true
		b["stream_options"] = map[string]any{"include_usage": true}
	}
	return b
}

func TestChatStreamShape(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	msgs := []map[string]any{
		{"role": "system", "content": "you are terse"},
		{"role": "user", "content": words("q", 40)},
	}
	const maxTokens = 5
	evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, maxTokens, true)))

	// role-only first event, maxTokens content events, usage event, [DONE].
	if got, want := len(evs), 1+maxTokens+1+1; got != want {
		t.Fatalf("got %d events, want %d: %+v", got, want, evs)
	}
	for _, ev := range evs {
		if ev.Type != "" {
			t.Errorf("OpenAI stream has an event line %q; vLLM sends data lines only", ev.Type)
		}
	}
	first := jsonOf(t, evs[0].Data)
	if first["object"] != "chat.completion.chunk" {
		t.Errorf("object = %v", first["object"])
	}
	ch0 := first["choices"].([]any)[0].(map[string]any)
	delta := ch0["delta"].(map[string]any)
	if !maps.Equal(delta, map[string]any{"role": "assistant", "content": ""}) {
		t.Errorf("first delta = %v, want role-only", delta)
	}
	if ch0["finish_reason"] != nil {
		t.Errorf("first finish_reason = %v", ch0["finish_reason"])
	}
	var text strings.Builder
	for i, ev := range evs[1 : 1+maxTokens] {
		c := jsonOf(t, ev.Data)["choices"].([]any)[0].(map[string]any)
		d := c["delta"].(map[string]any)
		content, _ := d["content"].(string)
		if content == "" {
			t.Errorf("content event %d is empty: %s", i, ev.Data)
		}
		if _, ok := d["role"]; ok {
			t.Errorf("content event %d repeats the role", i)
		}
		text.WriteString(content)
		wantFinish := any(nil)
		if i == maxTokens-1 {
			wantFinish = "length"
		}
		if c["finish_reason"] != wantFinish {
			t.Errorf("event %d finish_reason = %v, want %v", i, c["finish_reason"], wantFinish)
		}
	}
	if n := len(sim.Tokenize(nil, text.String())); n != maxTokens {
		t.Errorf("streamed text %q is %d tokens, want %d", text.String(), n, maxTokens)
	}
	usage := jsonOf(t, evs[1+maxTokens].Data)
	if c := usage["choices"].([]any); len(c) != 0 {
		t.Errorf("usage event choices = %v, want []", c)
	}
	wantPrompt := len(sim.RenderChat(nil, []sim.ChatMessage{
		{Role: "system", Content: "you are terse"}, {Role: "user", Content: words("q", 40)},
	}, true))
	if got := num(t, usage, "usage", "prompt_tokens"); got != wantPrompt {
		t.Errorf("prompt_tokens = %d, want %d", got, wantPrompt)
	}
	if got := num(t, usage, "usage", "completion_tokens"); got != maxTokens {
		t.Errorf("completion_tokens = %d, want %d", got, maxTokens)
	}
	if got := num(t, usage, "usage", "total_tokens"); got != wantPrompt+maxTokens {
		t.Errorf("total_tokens = %d", got)
	}
	if got := num(t, usage, "usage", "prompt_tokens_details", "cached_tokens"); got != 0 {
		t.Errorf("cold cache: cached_tokens = %d, want 0", got)
	}
	if evs[len(evs)-1].Data != "[DONE]" {
		t.Errorf("last event %q, want [DONE]", evs[len(evs)-1].Data)
	}
}

// TestChatFirstEventMatchesVLLM compares the first event's keys with a recorded vLLM
// stream (testdata/vllm-chat-stream.txt; its "modality"/"metrics"/"prompt_token_ids"
// keys are vLLM-Omni additions, and "usage" appears because that client asked for
// continuous usage stats, which this request does too).
func TestChatFirstEventMatchesVLLM(t *testing.T) {
	raw, err := os.ReadFile("testdata/vllm-chat-stream.txt")
	if err != nil {
		t.Fatal(err)
	}
	var recorded map[string]any
	for line := range strings.Lines(string(raw)) {
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			recorded = jsonOf(t, d)
			break
		}
	}
	srv, ts := newTestServer(t, nil)
	body := chatBody(srv.Model(), []map[string]any{{"role": "user", "content": "hi there"}}, 2, true)
	body["stream_options"] = map[string]any{"include_usage": true, "continuous_usage_stats": true}
	evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", body))
	ours := jsonOf(t, evs[0].Data)

	omni := []string{"modality", "metrics", "prompt_token_ids"}
	wantKeys := slices.DeleteFunc(slices.Sorted(maps.Keys(recorded)), func(k string) bool { return slices.Contains(omni, k) })
	if got := slices.Sorted(maps.Keys(ours)); !slices.Equal(got, wantKeys) {
		t.Errorf("first event keys %v, recorded vLLM %v", got, wantKeys)
	}
	rc := recorded["choices"].([]any)[0].(map[string]any)
	oc := ours["choices"].([]any)[0].(map[string]any)
	if got, want := slices.Sorted(maps.Keys(oc)), slices.Sorted(maps.Keys(rc)); !slices.Equal(got, want) {
		t.Errorf("choice keys %v, recorded %v", got, want)
	}
	if !maps.Equal(oc["delta"].(map[string]any), rc["delta"].(map[string]any)) {
		t.Errorf("delta %v, recorded %v", oc["delta"], rc["delta"])
	}
	if num(t, ours, "usage", "completion_tokens") != 0 {
		t.Errorf("role event usage %v, want 0 completion tokens", ours["usage"])
	}
}

func TestChatNonStream(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{
		{"type": "text", "text": "first part"}, {"type": "text", "text": "second part"},
	}}}
	body := map[string]any{"model": srv.Model(), "messages": msgs, "max_completion_tokens": 7, "max_tokens": 99}
	m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", body), 200)
	if m["object"] != "chat.completion" || !strings.HasPrefix(m["id"].(string), "chatcmpl-") {
		t.Errorf("object %v id %v", m["object"], m["id"])
	}
	c := m["choices"].([]any)[0].(map[string]any)
	msg := c["message"].(map[string]any)
	if msg["role"] != "assistant" {
		t.Errorf("role %v", msg["role"])
	}
	// max_completion_tokens wins over max_tokens, as in vLLM.
	if n := len(sim.Tokenize(nil, msg["content"].(string))); n != 7 {
		t.Errorf("content %q is %d tokens, want 7", msg["content"], n)
	}
	if c["finish_reason"] != "length" {
		t.Errorf("finish_reason %v", c["finish_reason"])
	}
	want := len(sim.RenderChat(nil, []sim.ChatMessage{{Role: "user", Content: "first part\nsecond part"}}, true))
	if got := num(t, m, "usage", "prompt_tokens"); got != want {
		t.Errorf("prompt_tokens %d, want %d", got, want)
	}
	if got := num(t, m, "usage", "completion_tokens"); got != 7 {
		t.Errorf("completion_tokens %d", got)
	}
	_ = num(t, m, "usage", "prompt_tokens_details", "cached_tokens")
}

// TestReplyTokensStop: without a client limit (or a larger one) the simulated model
// stops on its own after ReplyTokens tokens with finish_reason "stop".
func TestReplyTokensStop(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.ReplyTokens = 4 })
	for _, tc := range []struct {
		name   string
		limit  any
		finish string
		n      int
	}{
		{"no limit", nil, "stop", 4},
		{"larger limit", 100, "stop", 4},
		{"equal limit", 4, "length", 4},
		{"smaller limit", 2, "length", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"model": srv.Model(), "messages": []map[string]any{{"role": "user", "content": "go on"}}}
			if tc.limit != nil {
				body["max_tokens"] = tc.limit
			}
			m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", body), 200)
			c := m["choices"].([]any)[0].(map[string]any)
			if c["finish_reason"] != tc.finish {
				t.Errorf("finish_reason %v, want %s", c["finish_reason"], tc.finish)
			}
			if got := num(t, m, "usage", "completion_tokens"); got != tc.n {
				t.Errorf("completion_tokens %d, want %d", got, tc.n)
			}
		})
	}
}

func TestCompletions(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	t.Run("stream", func(t *testing.T) {
		body := map[string]any{"model": srv.Model(), "prompt": words("p", 30), "max_tokens": 3, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}
		evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/completions", body))
		if len(evs) != 3+1+1 {
			t.Fatalf("%d events: %+v", len(evs), evs)
		}
		for i, ev := range evs[:3] {
			m := jsonOf(t, ev.Data)
			if m["object"] != "text_completion" {
				t.Errorf("object %v", m["object"])
			}
			c := m["choices"].([]any)[0].(map[string]any)
			if c["text"] == "" {
				t.Errorf("event %d has no text", i)
			}
			if (i == 2) != (c["finish_reason"] == "length") {
				t.Errorf("event %d finish_reason %v", i, c["finish_reason"])
			}
		}
		u := jsonOf(t, evs[3].Data)
		if got, want := num(t, u, "usage", "prompt_tokens"), len(sim.Tokenize(nil, words("p", 30))); got != want {
			t.Errorf("prompt_tokens %d, want %d", got, want)
		}
		if evs[4].Data != "[DONE]" {
			t.Errorf("last %q", evs[4].Data)
		}
	})
	t.Run("token ids", func(t *testing.T) {
		body := map[string]any{"model": srv.Model(), "prompt": []int{101, 102, 103, 104}, "max_tokens": 2}
		m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", body), 200)
		if got := num(t, m, "usage", "prompt_tokens"); got != 4 {
			t.Errorf("prompt_tokens %d, want 4", got)
		}
		c := m["choices"].([]any)[0].(map[string]any)
		if n := len(sim.Tokenize(nil, c["text"].(string))); n != 2 {
			t.Errorf("text %q is %d tokens", c["text"], n)
		}
	})
}

// TestPrefixCacheHitIsBlockAligned: a second request repeating the first's prompt hits
// the longest run of full cached blocks, capped at prompt length - 1 (vLLM
// get_computed_blocks), through both APIs since they render the same tokens.
func TestPrefixCacheHitIsBlockAligned(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	bs := srv.Engines()[0].Config().BlockSize
	msgs := []map[string]any{
		{"role": "system", "content": words("sys", 120)},
		{"role": "user", "content": words("u", 77)},
	}
	first := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 3, false)), 200)
	p := num(t, first, "usage", "prompt_tokens")
	if c := num(t, first, "usage", "prompt_tokens_details", "cached_tokens"); c != 0 {
		t.Fatalf("first request cached_tokens %d, want 0", c)
	}
	evs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 3, true)))
	u := jsonOf(t, evs[len(evs)-2].Data)
	cached := num(t, u, "usage", "prompt_tokens_details", "cached_tokens")
	if want := (p - 1) / bs * bs; cached != want {
		t.Errorf("repeat cached_tokens %d, want %d (prompt %d, block %d)", cached, want, p, bs)
	}

	// The same conversation through the Anthropic API: same tokens, so it hits too.
	ab := map[string]any{"model": srv.Model(), "max_tokens": 3, "stream": true,
		"system": words("sys", 120), "messages": []map[string]any{{"role": "user", "content": words("u", 77)}}}
	aevs := readEvents(t, post(t, context.Background(), ts.URL+"/v1/messages", ab))
	start := jsonOf(t, aevs[0].Data)
	read := num(t, start, "message", "usage", "cache_read_input_tokens")
	if want := (p - 1) / bs * bs; read != want {
		t.Errorf("anthropic cache_read_input_tokens %d, want %d", read, want)
	}
	// Anthropic's semantics: input_tokens is what the cache did not serve.
	if got := num(t, start, "message", "usage", "input_tokens"); got+read != p {
		t.Errorf("anthropic input_tokens %d + cache_read_input_tokens %d, OpenAI prompt_tokens %d", got, read, p)
	}
}

func TestErrors(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.MaxModelLen = 200 })
	model := srv.Model()
	user := []map[string]any{{"role": "user", "content": "hello"}}
	long := []map[string]any{{"role": "user", "content": words("w", 300)}}
	for _, tc := range []struct {
		name    string
		path    string
		body    any
		headers []string
		status  int
		errType string
		msg     string // prefix of the message
	}{
		{"bad json", "/v1/chat/completions", `{"model":`, nil, 400, "BadRequestError", "JSON decode error"},
		{"not json media type", "/v1/chat/completions", chatBody(model, user, 2, false), []string{"Content-Type", "text/plain"}, 400, "BadRequestError", "Unsupported Media Type"},
		{"unknown model", "/v1/chat/completions", chatBody("nope", user, 2, false), nil, 404, "NotFoundError", "The model `nope` does not exist."},
		{"max_tokens too large", "/v1/chat/completions", chatBody(model, user, 195, false), nil, 400, "BadRequestError", "'max_tokens' or 'max_completion_tokens' is too large: 195. This model's maximum context length is 200 tokens"},
		{"prompt too long", "/v1/chat/completions", chatBody(model, long, 1, false), nil, 400, "BadRequestError", "This model's maximum context length is 200 tokens. However, your request has"},
		{"max_tokens zero", "/v1/chat/completions", chatBody(model, user, 0, false), nil, 400, "BadRequestError", "max_tokens must be at least 1"},
		{"messages missing", "/v1/chat/completions", map[string]any{"model": model}, nil, 400, "BadRequestError", "Field required"},
		{"completion bad json", "/v1/completions", `[`, nil, 400, "BadRequestError", "JSON decode error"},
		{"completion unknown model", "/v1/completions", map[string]any{"model": "x", "prompt": "hi"}, nil, 404, "NotFoundError", "The model `x` does not exist."},
		{"rank out of range", "/v1/chat/completions", chatBody(model, user, 2, false), []string{wire.HeaderDPRank, "1"}, 400, "BadRequestError", "Requested DP rank 1 is out of range [0, 1)"},
		{"messages bad json", "/v1/messages", `{]`, nil, 400, "BadRequestError", "JSON decode error"},
		{"messages no max_tokens", "/v1/messages", map[string]any{"model": model, "messages": user}, nil, 400, "BadRequestError", "Field required: max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decodeBody(t, post(t, context.Background(), ts.URL+tc.path, tc.body, tc.headers...), tc.status)
			e, ok := m["error"].(map[string]any)
			if !ok {
				t.Fatalf("no error object: %v", m)
			}
			if e["type"] != tc.errType {
				t.Errorf("type %v, want %s", e["type"], tc.errType)
			}
			if num(t, e, "code") != tc.status {
				t.Errorf("code %v, want %d", e["code"], tc.status)
			}
			if msg, _ := e["message"].(string); !strings.HasPrefix(msg, tc.msg) {
				t.Errorf("message %q, want prefix %q", msg, tc.msg)
			}
			if _, ok := e["param"]; !ok {
				t.Errorf("error has no param key: %v", e)
			}
		})
	}
	t.Run("unknown model exact body", func(t *testing.T) {
		resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody("nope", user, 2, false))
		defer resp.Body.Close()
		var raw json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		want := `{"error":{"message":"The model ` + "`nope`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}`
		if string(raw) != want {
			t.Errorf("body %s\nwant %s", raw, want)
		}
	})
	t.Run("anthropic unknown model", func(t *testing.T) {
		body := map[string]any{"model": "nope", "max_tokens": 3, "messages": user}
		m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/messages", body), 404)
		if m["type"] != "error" {
			t.Errorf("type %v", m["type"])
		}
		e := m["error"].(map[string]any)
		if e["type"] != "NotFoundError" || e["message"] != "The model `nope` does not exist." {
			t.Errorf("error %v", e)
		}
	})
	t.Run("anthropic too long", func(t *testing.T) {
		body := map[string]any{"model": model, "max_tokens": 32000, "messages": user}
		m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/messages?beta=true", body), 400)
		e := m["error"].(map[string]any)
		if !strings.HasPrefix(e["message"].(string), "'max_tokens' or 'max_completion_tokens' is too large: 32000.") {
			t.Errorf("error %v", e)
		}
	})
}
