package routerhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// simFront is a router in front of n simulated vLLM servers with the Responses
// store on (VLLM_ENABLE_RESPONSES_API_STORE=1), overflow threshold 1.
func simFront(t *testing.T, n int) (*front, []*stub) {
	t.Helper()
	var stubs []*stub
	for i := range n {
		cfg := simhttp.DefaultConfig()
		cfg.Replicas, cfg.Speed, cfg.ResponsesStore, cfg.Model = 1, 50, true, "m"
		srv, err := simhttp.NewServer(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		t.Cleanup(func() { ts.Close(); srv.Close() })
		stubs = append(stubs, &stub{name: string(rune('a' + i)), srv: ts})
	}
	f := newFront(t, true, func(c *Config) { c.Models[0].OverflowThreshold = 1 }, stubs...)
	return f, stubs
}

// responseID reads the id of a Responses answer: response.created's in a stream,
// the top-level id of a JSON body.
func responseID(t *testing.T, body string) string {
	t.Helper()
	if !strings.HasPrefix(body, "event:") {
		var v struct{ ID string }
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.ID == "" {
			t.Fatalf("no id in body %q: %v", body, err)
		}
		return v.ID
	}
	for ev, err := range sse.Read(strings.NewReader(body), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == wire.EventResponseCreated {
			var v struct{ Response struct{ ID string } }
			if json.Unmarshal([]byte(ev.Data), &v) == nil && v.Response.ID != "" {
				return v.Response.ID
			}
		}
	}
	t.Fatalf("no response.created with an id in %q", body)
	return ""
}

// TestResponsesStickyByCodexKeyAndContinuation: /v1/responses is proxied sticky
// by the Codex CLI's session-id; a previous_response_id request goes to the
// replica that produced the response even over the overflow threshold (another
// replica would answer 404: the store is per server); an unknown id routes by
// the session key and gets the server's own 404, not a router failure.
func TestResponsesStickyByCodexKeyAndContinuation(t *testing.T) {
	for _, stream := range []bool{true, false} {
		f, _ := simFront(t, 2)
		body := func(extra string) string {
			return `{"model":"m","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `,"max_output_tokens":4,"input":"hello there"` + extra + `}`
		}
		codex := map[string]string{wire.HeaderCodexSession: "th-1", wire.HeaderCodexThread: "th-1"}
		resp, out := f.post(t, wire.PathResponses, codex, body(""))
		if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderDecision) != "placed" {
			t.Fatalf("stream %v: first turn %d %s: %s", stream, resp.StatusCode, resp.Header.Get(wire.HeaderDecision), out)
		}
		home := resp.Header.Get(wire.HeaderReplica)
		id := responseID(t, out)
		resp, _ = f.post(t, wire.PathResponses, codex, body(""))
		if resp.Header.Get(wire.HeaderReplica) != home || resp.Header.Get(wire.HeaderDecision) != "sticky" {
			t.Errorf("stream %v: second turn on %s (%s), want sticky on %s", stream, resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision), home)
		}
		// Load the home over the threshold (1) with requests held open.
		b := f.pool().Balancer
		hi := indexOf(f, home)
		for range 3 {
			if _, err := b.Acquire(router.Facts{ResponseID: id}); err != nil {
				t.Fatal(err)
			}
		}
		resp, _ = f.post(t, wire.PathResponses, map[string]string{wire.HeaderCodexSession: "th-new"}, body(""))
		if resp.Header.Get(wire.HeaderReplica) == home {
			t.Errorf("stream %v: a new conversation went to the loaded home %s", stream, home)
		}
		resp, out = f.post(t, wire.PathResponses, map[string]string{wire.HeaderCodexSession: "th-other"}, body(`,"previous_response_id":"`+id+`"`))
		if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderReplica) != home || resp.Header.Get(wire.HeaderDecision) != router.ReasonResponse.String() {
			t.Errorf("stream %v: continuation of %s: %d on %s (%s), want 200 on %s (response): %.200s", stream, id, resp.StatusCode,
				resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision), home, out)
		}
		resp, out = f.post(t, wire.PathResponses, codex, body(`,"previous_response_id":"resp_unknown"`))
		if resp.StatusCode != 404 || resp.Header.Get(wire.HeaderDecision) == router.ReasonResponse.String() ||
			!strings.Contains(out, `"message":"Response with id 'resp_unknown' not found."`) {
			t.Errorf("stream %v: unknown id: %d (%s) %s", stream, resp.StatusCode, resp.Header.Get(wire.HeaderDecision), out)
		}
		for range 3 {
			b.Release(hi)
		}
		if n := f.totalInFlight(); n != 0 {
			t.Errorf("stream %v: %d left in flight", stream, n)
		}
	}
}

// A store: false request's response cannot be continued: its id is not learned.
func TestResponsesStoreFalseLearnsNothing(t *testing.T) {
	f, _ := simFront(t, 2)
	_, out := f.post(t, wire.PathResponses, nil, `{"model":"m","stream":true,"store":false,"max_output_tokens":2,"input":"x"}`)
	id := responseID(t, out)
	if d, err := f.pool().Balancer.Acquire(router.Facts{ResponseID: id}); err != nil || d.Reason == router.ReasonResponse {
		t.Errorf("store false: continuation decided %+v %v, want no response home", d, err)
	}
}

// The Responses API during an admission hold: an SSE comment as keep-alive (it
// has no ping event), the replica's stream once admitted; refused at the limit,
// the API's own error event with rate_limit_exceeded, counted as the 429.
func TestProxyKeepsHeldResponsesStreamAlive(t *testing.T) {
	const keepAliveInterval = 2 * time.Second
	body := `{"model":"m","stream":true,"input":[{"role":"user","content":"` + strings.Repeat("b", 2400) + `"}]}`
	path := wire.PathResponses

	f, _ := admitFront(t, router.AdmissionConfig{MaxHold: -1, KeepAliveAfter: keepAliveAfter})
	f.rt.proxy.keepAliveInterval = keepAliveInterval
	h := holdStream(t, f, path, body, func() { f.clock.Advance(time.Second) })
	if h.resp.StatusCode != 200 || h.resp.Header.Get(wire.HeaderAdmission) != wire.AdmissionWaiting {
		t.Fatalf("committed response: %d %v", h.resp.StatusCode, h.resp.Header)
	}
	if ev := h.event(t); ev != ": keep-alive" {
		t.Fatalf("first event %q, want the SSE comment", ev)
	}
	f.pool().Balancer.ObserveCapacity(0, 5000)
	rest := h.rest(t)
	f.waitDone(t)
	if !strings.Contains(rest, "hi from r0") || !strings.Contains(rest, "event: response.completed") || strings.Contains(rest, "error") {
		t.Errorf("after the keep-alive, want the replica's stream: %q", rest)
	}

	f, _ = admitFront(t, router.AdmissionConfig{MaxHold: 2 * time.Second, OnLimit: router.AdmitLimitRefuse, KeepAliveAfter: keepAliveAfter})
	f.rt.proxy.keepAliveInterval = keepAliveInterval
	h = holdStream(t, f, path, body, func() { f.clock.Advance(time.Second) })
	if ev := h.event(t); ev != ": keep-alive" {
		t.Fatalf("first event %q", ev)
	}
	f.clock.Advance(2 * time.Second)
	rest = h.rest(t)
	f.waitDone(t)
	want := `event: error` + "\n" + `data: {"code":"rate_limit_exceeded","message":"model \"m\": overloaded: admission limit reached: held 3s, max_hold 2s","param":null,"sequence_number":0,"type":"error"}` + "\n\n"
	if rest != want {
		t.Errorf("refused after the keep-alive:\n%q\nwant\n%q", rest, want)
	}
	if m := routerMetrics(f.rt); !strings.Contains(m, `warden_responses_total{code="429",model="*"} 1`) {
		t.Errorf("metrics lack the 429:\n%s", grepLines(m, "warden_responses_total"))
	}
}

// A Responses body carries the conversation in "input" items: one with an
// assistant item continues a conversation (admission never holds it).
func TestContinuingFromResponsesInput(t *testing.T) {
	tests := []struct {
		body string
		want bool
	}{
		{`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}`, true},
		{`{"messages":[{"role":"user","content":"assistant"}]}`, false},
		{`{"input":[{"type":"message","role":"developer","content":[]},{"type":"message","role":"assistant","content":[]}]}`, true},
		{`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"the assistant"}]}]}`, false},
		// A string input is one user message.
		{`{"input":"\"assistant\""}`, false},
	}
	for _, tc := range tests {
		info, err := ExtractKey(http.Header{}, []byte(tc.body), KeyConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if info.Continuing != tc.want {
			t.Errorf("ExtractKey(%s).Continuing = %v, want %v", tc.body, info.Continuing, tc.want)
		}
	}
}
