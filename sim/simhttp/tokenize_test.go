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
