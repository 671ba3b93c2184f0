package simhttp

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/sim"
)

// shapeOf describes a decoded JSON value by kind, recursively: object keys with
// their shapes, the shape of an array's first element. Two values with the same
// shape have the same keys and value kinds.
func shapeOf(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + shapeOf(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		if len(x) == 0 {
			return "[]"
		}
		return "[" + shapeOf(x[0]) + "]"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", x)
	}
}

func readFixtureEvents(t *testing.T, path string) []sse.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			kept = append(kept, l)
		}
	}
	var evs []sse.Event
	for ev, err := range sse.Read(strings.NewReader(strings.Join(kept, "\n")), nil) {
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func responsesBody(model string, input any, maxTokens int, stream bool) map[string]any {
	return map[string]any{"model": model, "input": input, "max_output_tokens": maxTokens, "stream": stream, "store": false}
}

// TestResponsesStreamMatchesSpecFixture checks the streamed answer against the
// spec-derived fixture: the same events in the same order, each event line naming
// its data's type, sequence numbers 0..n-1, the same keys and value kinds, and usage
// that adds up with the streamed text.
func TestResponsesStreamMatchesSpecFixture(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	want := readFixtureEvents(t, "testdata/responses-stream-spec.txt")
	got := readEvents(t, post(t, context.Background(), ts.URL+"/v1/responses", responsesBody(srv.Model(), words("q", 20), 2, true)))
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d (fixture): %+v", len(got), len(want), got)
	}
	var text strings.Builder
	for i := range want {
		g, w := jsonOf(t, got[i].Data), jsonOf(t, want[i].Data)
		if got[i].Type != want[i].Type || g["type"] != got[i].Type {
			t.Errorf("event %d: event line %q, data type %v; want %q", i, got[i].Type, g["type"], want[i].Type)
		}
		if sg, sw := shapeOf(g), shapeOf(w); sg != sw {
			t.Errorf("event %d (%s) shape:\n got %s\nwant %s", i, want[i].Type, sg, sw)
		}
		if n := num(t, g, "sequence_number"); n != i {
			t.Errorf("event %d sequence_number = %d", i, n)
		}
		if got[i].Type == "response.output_text.delta" {
			text.WriteString(g["delta"].(string))
		}
	}
	last := jsonOf(t, got[len(got)-1].Data)
	resp := last["response"].(map[string]any)
	if resp["status"] != "completed" || !strings.HasPrefix(resp["id"].(string), "resp_") {
		t.Errorf("completed response status %v id %v", resp["status"], resp["id"])
	}
	if created := jsonOf(t, got[0].Data)["response"].(map[string]any)["id"]; created != resp["id"] {
		t.Errorf("response.created id %v != response.completed id %v", created, resp["id"])
	}
	if n := num(t, last, "response", "usage", "output_tokens"); n != 2 || len(sim.Tokenize(nil, text.String())) != 2 {
		t.Errorf("output_tokens %d, streamed text %q", n, text.String())
	}
	if in, tot := num(t, last, "response", "usage", "input_tokens"), num(t, last, "response", "usage", "total_tokens"); tot != in+2 || in < 20 {
		t.Errorf("input_tokens %d total_tokens %d", in, tot)
	}
}

// TestResponsesBodyAndCachedTokens checks the non-streamed body against the
// fixture's final response and that a repeated prompt reports its prefix-cache hit
// in input_tokens_details.cached_tokens.
func TestResponsesBodyAndCachedTokens(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	want := readFixtureEvents(t, "testdata/responses-stream-spec.txt")
	final := jsonOf(t, want[len(want)-1].Data)["response"]
	input := []map[string]any{
		{"type": "message", "role": "developer", "content": []map[string]any{{"type": "input_text", "text": words("d", 300)}}},
		{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": "hi"}}},
	}
	var cached []int
	for range 2 {
		got := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/responses", responsesBody(srv.Model(), input, 2, false)), http.StatusOK)
		if sg, sw := shapeOf(got), shapeOf(final); sg != sw {
			t.Fatalf("body shape:\n got %s\nwant %s", sg, sw)
		}
		cached = append(cached, num(t, got, "usage", "input_tokens_details", "cached_tokens"))
	}
	if cached[0] != 0 || cached[1] < 256 {
		t.Errorf("cached_tokens %v: want 0 then at least the developer message's full blocks", cached)
	}
}

// TestResponsesStoreAndPreviousResponseID checks the per-server store behind the
// switch: with it off every previous_response_id is vLLM's 404; with it on a stored
// id continues (its conversation is the new prompt's prefix, so cached), an unknown
// one is 404, and another server does not know it.
func TestResponsesStoreAndPreviousResponseID(t *testing.T) {
	ctx := context.Background()
	_, off := newTestServer(t, nil)
	srvA, on := newTestServer(t, func(c *Config) { c.ResponsesStore = true })
	_, other := newTestServer(t, func(c *Config) { c.ResponsesStore = true })
	first := map[string]any{"model": srvA.Model(), "input": words("w", 300), "max_output_tokens": 3}
	body := decodeBody(t, post(t, ctx, on.URL+"/v1/responses", first), http.StatusOK)
	id := body["id"].(string)
	if body["store"] != true {
		t.Errorf("store = %v with the switch on and store defaulting to true", body["store"])
	}
	next := map[string]any{"model": srvA.Model(), "input": "and then?", "max_output_tokens": 3, "previous_response_id": id}
	cont := decodeBody(t, post(t, ctx, on.URL+"/v1/responses", next), http.StatusOK)
	if c := num(t, cont, "usage", "input_tokens_details", "cached_tokens"); c < 256 {
		t.Errorf("continuing %s: cached_tokens %d, want the first turn's prompt reused", id, c)
	}
	if in := num(t, cont, "usage", "input_tokens"); in <= num(t, body, "usage", "input_tokens") {
		t.Errorf("continued prompt %d tokens is not longer than the first %d", in, num(t, body, "usage", "input_tokens"))
	}
	for name, url := range map[string]string{"store off": off.URL, "other server": other.URL} {
		e := decodeBody(t, post(t, ctx, url+"/v1/responses", next), http.StatusNotFound)
		info := e["error"].(map[string]any)
		if info["message"] != fmt.Sprintf("Response with id '%s' not found.", id) || info["type"] != "invalid_request_error" || info["param"] != nil || num(t, e, "error", "code") != 404 {
			t.Errorf("%s: error body %v", name, e)
		}
	}
	stored := decodeBody(t, post(t, ctx, off.URL+"/v1/responses", first), http.StatusOK)
	if stored["store"] != false {
		t.Errorf("store off: store = %v, want the silent downgrade to false", stored["store"])
	}
	if keys := slices.Sorted(func(yield func(string) bool) {
		for k := range decodeBody(t, post(t, ctx, on.URL+"/v1/responses", map[string]any{"model": srvA.Model()}), http.StatusBadRequest) {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(keys, []string{"error"}) {
		t.Errorf("missing input: body keys %v", keys)
	}
}

// background: true is vLLM's 400 with the store off (the simulator serves no
// background mode at all, so also with it on).
func TestResponsesBackground(t *testing.T) {
	srv, off := newTestServer(t, nil)
	e := decodeBody(t, post(t, context.Background(), off.URL+"/v1/responses", map[string]any{"model": srv.Model(), "input": "x", "background": true}), http.StatusBadRequest)
	if msg, _ := e["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "VLLM_ENABLE_RESPONSES_API_STORE=1") {
		t.Errorf("background with the store off: %v", e)
	}
	_, on := newTestServer(t, func(c *Config) { c.ResponsesStore = true })
	decodeBody(t, post(t, context.Background(), on.URL+"/v1/responses", map[string]any{"model": srv.Model(), "input": "x", "background": true}), http.StatusBadRequest)
}
