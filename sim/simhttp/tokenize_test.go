package simhttp

import (
	"context"
	"net/http"
	"testing"

	"github.com/lmwarden/warden/sim"
)

// POST /tokenize answers as vLLM's does, with the count the engine will see.
func TestTokenize(t *testing.T) {
	_, ts := newTestServer(t, nil)
	ctx := context.Background()
	msgs := []sim.ChatMessage{{Role: "user", Content: "abcd efgh ijklmnop"}}
	want := len(sim.RenderChat(nil, msgs, true))
	for _, tc := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"chat", map[string]any{"messages": []map[string]string{{"role": "user", "content": "abcd efgh ijklmnop"}}}, want},
		{"chat without generation prompt", map[string]any{"add_generation_prompt": false,
			"messages": []map[string]string{{"role": "user", "content": "abcd efgh ijklmnop"}}}, len(sim.RenderChat(nil, msgs, false))},
		{"prompt", map[string]any{"prompt": "abcd efgh ijklmnop"}, 4}, // ijklmnop is two 4-byte pieces
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decodeBody(t, post(t, ctx, ts.URL+"/tokenize", tc.body), http.StatusOK)
			if n := int(got["count"].(float64)); n != tc.want || len(got["tokens"].([]any)) != n || got["max_model_len"].(float64) <= 0 {
				t.Errorf("got %v, want count %d", got, tc.want)
			}
		})
	}
	decodeBody(t, post(t, ctx, ts.URL+"/tokenize", map[string]any{"model": "x"}), http.StatusBadRequest)
}

// ignore_eos and min_tokens keep the simulated model from stopping on its own
// (after ReplyTokens), as vLLM's sampling parameters do.
func TestIgnoreEOSAndMinTokens(t *testing.T) {
	_, ts := newTestServer(t, func(c *Config) { c.ReplyTokens = 20 })
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		extra  map[string]any
		want   int
		finish string
	}{
		{"natural stop", nil, 20, "stop"},
		{"ignore_eos", map[string]any{"ignore_eos": true}, 60, "length"},
		{"min_tokens", map[string]any{"min_tokens": 35}, 35, "stop"},
		{"min_tokens at the limit", map[string]any{"min_tokens": 60, "ignore_eos": true}, 60, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 60}
			for k, v := range tc.extra {
				body[k] = v
			}
			got := decodeBody(t, post(t, ctx, ts.URL+"/v1/chat/completions", body), http.StatusOK)
			n := int(got["usage"].(map[string]any)["completion_tokens"].(float64))
			fin := got["choices"].([]any)[0].(map[string]any)["finish_reason"]
			if n != tc.want || fin != tc.finish {
				t.Errorf("%d tokens, finish %v; want %d, %s", n, fin, tc.want, tc.finish)
			}
		})
	}
	decodeBody(t, post(t, ctx, ts.URL+"/v1/chat/completions", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 10, "min_tokens": 11}), http.StatusBadRequest)
}
