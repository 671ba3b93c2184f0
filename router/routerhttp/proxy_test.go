package routerhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// guard bounds waits on channels so a broken proxy fails a test instead of hanging
// it. It is a liveness guard, never a timing assertion.
const guard = 10 * time.Second

// recorded is one request an upstream stub received.
type recorded struct {
	Method, URI string
	Header      http.Header
	Body        []byte
}

// stub is an httptest upstream standing in for a vLLM replica.
type stub struct {
	name string
	srv  *httptest.Server

	mu      sync.Mutex
	reqs    []recorded
	handler http.HandlerFunc // overrides the default answers when set
	metrics string           // body of /metrics
	health  atomic.Int32     // status of /health; 0 means 200
}

func newStub(t *testing.T, name string) *stub {
	s := &stub{name: name}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stub) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, recorded{r.Method, r.RequestURI, r.Header.Clone(), body})
	h, metrics := s.handler, s.metrics
	s.mu.Unlock()
	if h != nil && r.URL.Path != "/health" && r.URL.Path != "/metrics" {
		h(w, r)
		return
	}
	switch r.URL.Path {
	case "/health":
		code := int(s.health.Load())
		if code == 0 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
	case "/metrics":
		io.WriteString(w, metrics)
	case "/v1/messages/count_tokens":
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": 42})
	case "/v1/messages":
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":3}}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi from ` + s.name + `"}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		} {
			io.WriteString(w, ev+"\n\n")
			w.(http.Flusher).Flush()
		}
	case wire.PathResponses:
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_"+s.name+"\"}}\n\n")
		io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi from "+s.name+"\"}\n\n")
		io.WriteString(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_"+s.name+"\"}}\n\n")
	default: // OpenAI paths
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"delta":{"content":"hi from `+s.name+`"}}]}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

func (s *stub) requests(path string) []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []recorded
	for _, r := range s.reqs {
		if strings.HasPrefix(r.URI, path) {
			out = append(out, r)
		}
	}
	return out
}

func (s *stub) setHandler(h http.HandlerFunc) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// front is a router in front of stubs, with a channel that receives once per
// finished proxy handler call (so tests can wait for the release at its end).
type front struct {
	rt    *Router
	srv   *httptest.Server
	done  chan string
	clock *simclock.Manual
}

func newFront(t *testing.T, affinity bool, mod func(*Config), stubs ...*stub) *front {
	t.Helper()
	var specs []string
	for _, s := range stubs {
		specs = append(specs, s.name+"="+s.srv.URL)
	}
	cfg, err := ConfigForURLs(specs, affinity)
	if err != nil {
		t.Fatal(err)
	}
	clk := &simclock.Manual{}
	cfg.Clock = clk
	cfg.HealthInterval, cfg.ScrapeInterval = -1, -1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Models[0].MaxNumSeqs = 32
	if mod != nil {
		mod(&cfg)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{rt: rt, done: make(chan string, 100), clock: clk}
	h := rt.Handler()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { f.done <- r.URL.Path }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *front) pool() *Pool { return f.rt.Pools()[0] }

func (f *front) inFlight() []int {
	var out []int
	for _, s := range f.pool().Balancer.Status() {
		out = append(out, s.InFlight)
	}
	return out
}

func (f *front) totalInFlight() int {
	n := 0
	for _, v := range f.inFlight() {
		n += v
	}
	return n
}

func (f *front) waitDone(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(guard):
		t.Fatal("proxy handler did not finish")
	}
}

// post sends a request and reads the whole response.
func (f *front) post(t *testing.T, path string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	f.waitDone(t)
	return resp, string(b)
}

func chatBody(model string) string {
	return `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
}

func TestReplayRecordedClaudeCodeTurnsStayOnOneReplica(t *testing.T) {
	stubs := []*stub{newStub(t, "a"), newStub(t, "b"), newStub(t, "c"), newStub(t, "d")}
	f := newFront(t, true, nil, stubs...)
	var served []string
	for _, name := range []string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json"} {
		fx := loadFixture(t, name)
		method, uri, _ := strings.Cut(fx.RequestLine, " ")
		uri, _, _ = strings.Cut(uri, " ")
		req, err := http.NewRequest(method, f.srv.URL+uri, bytes.NewReader(fx.Body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range fx.Headers {
			switch k {
			case "Host", "Content-Length", "Connection":
				continue
			}
			req.Header.Set(k, v)
		}
		// A client trying to pin a DP rank itself must not get through.
		req.Header.Set(wire.HeaderDPRank, "3")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		f.waitDone(t)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", name, resp.StatusCode, body)
		}
		replica := resp.Header.Get(wire.HeaderReplica)
		served = append(served, replica)
		if !strings.Contains(string(body), "hi from "+replica) {
			t.Fatalf("%s: body %q not from %s", name, body, replica)
		}
		var got *recorded
		for _, s := range stubs {
			if rs := s.requests("/v1/messages"); s.name == replica && len(rs) > 0 {
				got = &rs[len(rs)-1]
			}
		}
		if got == nil {
			t.Fatalf("%s: replica %s saw no request", name, replica)
		}
		if got.URI != "/v1/messages?beta=true" || !bytes.Equal(got.Body, fx.Body) {
			t.Fatalf("%s: upstream got %s with %d bytes, want the same path and body (%d bytes)", name, got.URI, len(got.Body), len(fx.Body))
		}
		for k, v := range fx.Headers {
			if strings.HasPrefix(strings.ToLower(k), "x-stainless") || strings.HasPrefix(strings.ToLower(k), "anthropic-") ||
				k == "x-api-key" || k == "User-Agent" || k == wire.HeaderClaudeSession || k == "x-app" {
				if got.Header.Get(k) != v {
					t.Errorf("%s: header %s = %q upstream, client sent %q", name, k, got.Header.Get(k), v)
				}
			}
		}
		if got.Header.Get(wire.HeaderDPRank) != "" {
			t.Errorf("client-set %s reached the upstream", wire.HeaderDPRank)
		}
	}
	if served[0] != served[1] {
		t.Fatalf("turns of one session on %v", served)
	}
	st := f.rt.Status().Models[0]
	if st.Sessions != 1 {
		t.Fatalf("sessions %d", st.Sessions)
	}
}

func TestTwoSessionsCanLandOnDifferentReplicas(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"), newStub(t, "b"))
	seen := map[string]string{}
	for _, sess := range []string{"s1", "s2", "s1", "s2"} {
		resp, _ := f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: sess}, `{"model":"m","stream":true}`)
		r := resp.Header.Get(wire.HeaderReplica)
		want := "placed"
		if prev, ok := seen[sess]; ok {
			want = "sticky"
			if prev != r {
				t.Fatalf("session %s moved %s -> %s", sess, prev, r)
			}
		}
		seen[sess] = r
		if resp.Header.Get(wire.HeaderDecision) != want {
			t.Fatalf("decision %q, want %q", resp.Header.Get(wire.HeaderDecision), want)
		}
	}
	if seen["s1"] == seen["s2"] {
		t.Fatalf("two sessions on one replica of two idle ones: %v", seen)
	}
}

func TestBadJSONGets400NotCrash(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, nil, up)
	tests := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":`},
		{"/v1/chat/completions", `not json`},
		{"/v1/messages?beta=true", `[1,2]`},
		{"/v1/messages", `null`},
		{"/v1/completions", "\xff\xfe"},
		{"/v1/chat/completions", ""}, // empty body: nothing to route by
		{"/v1/messages", " \n "},     // white space only
	}
	for _, tc := range tests {
		t.Run(tc.path+" "+tc.body, func(t *testing.T) {
			resp, body := f.post(t, tc.path, nil, tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("error body is not JSON: %q", body)
			}
			if apiFor(tc.path) == apiAnthropic {
				if v["type"] != "error" {
					t.Fatalf("not the Anthropic error shape: %s", body)
				}
			} else if _, ok := v["error"].(map[string]any); !ok {
				t.Fatalf("not the OpenAI error shape: %s", body)
			}
		})
	}
	if n := len(up.requests("/v1")); n != 0 {
		t.Fatalf("upstream got %d bad requests", n)
	}
}

func TestUnknownModelGets404InAPIShape(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, func(c *Config) { c.Models[0].Name = "qwen3-4b" }, up)
	resp, body := f.post(t, "/v1/messages", nil, `{"model":"other"}`)
	if resp.StatusCode != 404 || !strings.Contains(body, `"not_found_error"`) || !strings.Contains(body, `\"other\"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = f.post(t, "/v1/chat/completions", nil, chatBody("other"))
	if resp.StatusCode != 404 || !strings.Contains(body, `"error":{`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, _ = f.post(t, "/v1/chat/completions", nil, chatBody("qwen3-4b"))
	if resp.StatusCode != 200 {
		t.Fatalf("configured model: %d", resp.StatusCode)
	}
}

func TestBodyOverLimitGets413(t *testing.T) {
	f := newFront(t, true, func(c *Config) { c.BodyLimit = 100 }, newStub(t, "a"))
	resp, body := f.post(t, "/v1/chat/completions", nil, `{"model":"m","x":"`+strings.Repeat("a", 200)+`"}`)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if f.totalInFlight() != 0 {
		t.Fatal("rejected request counted in flight")
	}
}

func TestWrongMethodAndUnknownPath(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"))
	resp, err := http.Get(f.srv.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.waitDone(t)
	if resp.StatusCode != 405 {
		t.Fatalf("GET on a POST path: %d", resp.StatusCode)
	}
	resp, _ = f.post(t, "/v1/embeddings", nil, `{}`)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown path: %d", resp.StatusCode)
	}
}

// docs/router.md failure case 2: the in-flight count must be released at the end of the stream,
// not when the headers arrive.
func TestReleaseInFlightAtStreamEndNotHeaders(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, nil, up)
	cont, openCont := testGate(t)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-cont
		io.WriteString(w, "data: [DONE]\n\n")
	})
	resp, err := http.Post(f.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m")))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // first event arrived: headers long gone
		t.Fatal(err)
	}
	if got := f.totalInFlight(); got != 1 {
		t.Fatalf("in flight after headers and first event = %d, want 1", got)
	}
	openCont()
	io.ReadAll(br)
	resp.Body.Close()
	f.waitDone(t)
	if got := f.totalInFlight(); got != 0 {
		t.Fatalf("in flight after stream end = %d, want 0", got)
	}
}

func TestReleaseInFlightOnClientDisconnect(t *testing.T) {
	up := newStub(t, "a")
	canceled := make(chan struct{})
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the client's cancel must reach the replica
		close(canceled)
	})
	f := newFront(t, true, nil, up)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("m")))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	resp.Body.Close()
	select {
	case <-canceled:
	case <-time.After(guard):
		t.Fatal("client cancel did not reach the upstream")
	}
	f.waitDone(t)
	if got := f.totalInFlight(); got != 0 {
		t.Fatalf("in flight after client disconnect = %d, want 0", got)
	}
}

// docs/router.md failure case 3: every proxied path feeds the load counters.
func TestEveryProxiedPathCountsInFlight(t *testing.T) {
	for _, path := range ProxiedPaths {
		t.Run(path, func(t *testing.T) {
			up := newStub(t, "a")
			entered := make(chan struct{})
			f := newFront(t, true, nil, up)
			cont, openCont := testGate(t)
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-cont
				writeJSON(w, 200, map[string]string{"ok": "yes"})
			})
			errc := make(chan error, 1)
			go func() {
				resp, err := http.Post(f.srv.URL+path, "application/json", strings.NewReader(`{"model":"m"}`))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			<-entered
			if got := f.totalInFlight(); got != 1 {
				t.Fatalf("%s: in flight %d while upstream works, want 1", path, got)
			}
			openCont()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			f.waitDone(t)
			if got := f.totalInFlight(); got != 0 {
				t.Fatalf("%s: in flight %d after, want 0", path, got)
			}
			st := f.pool().Balancer.Status()[0]
			if st.ServedTotal != 1 {
				t.Fatalf("%s: served %d", path, st.ServedTotal)
			}
		})
	}
}

// docs/router.md failure case 9: SSE passes event by event; the client sees the first event while
// the upstream still holds the second.
func TestSSEPassesEventByEvent(t *testing.T) {
	for _, api := range []string{"/v1/chat/completions", "/v1/messages?beta=true"} {
		t.Run(api, func(t *testing.T) {
			up := newStub(t, "a")
			f := newFront(t, true, nil, up)
			cont, openCont := testGate(t)
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "event: ping\ndata: {\"n\":1}\n\n")
				w.(http.Flusher).Flush()
				<-cont
				io.WriteString(w, "event: ping\ndata: {\"n\":2}\n\n")
			})
			resp, err := http.Post(f.srv.URL+api, "application/json", strings.NewReader(`{"model":"m","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
				t.Fatalf("stream has a Content-Length: %d", resp.ContentLength)
			}
			first := make(chan string, 1)
			br := bufio.NewReader(resp.Body)
			go func() {
				var ev strings.Builder
				for {
					line, err := br.ReadString('\n')
					ev.WriteString(line)
					if err != nil || line == "\n" {
						break
					}
				}
				first <- ev.String()
			}()
			select {
			case ev := <-first:
				if ev != "event: ping\ndata: {\"n\":1}\n\n" {
					t.Fatalf("first event %q", ev)
				}
			case <-time.After(guard):
				t.Fatal("first event held back until the upstream continued: the proxy buffers")
			}
			openCont()
			rest, _ := io.ReadAll(br)
			if string(rest) != "event: ping\ndata: {\"n\":2}\n\n" {
				t.Fatalf("rest %q", rest)
			}
			f.waitDone(t)
		})
	}
}

func TestBrokenUpstreamStreamEndsWithErrorEvent(t *testing.T) {
	tests := []struct {
		path, partial, wantPrefix string
	}{
		{"/v1/chat/completions", "data: {\"choices\":[]}\n\n", "data: {\"choices\":[]}\n\ndata: {\"error\":{"},
		{"/v1/messages", "event: message_start\ndata: {}\n\n", "event: message_start\ndata: {}\n\nevent: error\ndata: {\"error\":{"},
		// Broken mid-event: the partial event is closed before the error event.
		{"/v1/chat/completions", "data: {\"choi", "data: {\"choi\n\ndata: {\"error\":{"},
		// Responses: the API's own error event (type error, code, message).
		{"/v1/responses", "event: response.created\ndata: {}\n\n", "event: response.created\ndata: {}\n\nevent: error\ndata: {\"code\":\"upstream_error\",\"message\":"},
	}
	for _, tc := range tests {
		t.Run(tc.path+" "+tc.partial, func(t *testing.T) {
			up := newStub(t, "a")
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.partial)
				w.(http.Flusher).Flush()
				// Kill the connection mid-stream (no chunked terminator).
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
			})
			f := newFront(t, true, nil, up)
			resp, body := f.post(t, tc.path, nil, `{"model":"m","stream":true}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			end := "}\n\n" // Anthropic: the error event is the last
			if strings.HasPrefix(tc.path, "/v1/chat") {
				end = "}\n\ndata: [DONE]\n\n" // OpenAI: then [DONE], as vLLM ends a failed stream
			}
			if !strings.HasPrefix(body, tc.wantPrefix) || !strings.HasSuffix(body, end) {
				t.Fatalf("body %q, want prefix %q and a complete error event ending %q", body, tc.wantPrefix, end)
			}
			if f.totalInFlight() != 0 {
				t.Fatal("broken stream left a request in flight")
			}
		})
	}
}

// docs/router.md failure case 7: a dead replica is retried elsewhere before the first byte, marked
// unhealthy, and its sessions re-homed.
func TestDeadReplicaRetriedElsewhereBeforeFirstByte(t *testing.T) {
	a, b := newStub(t, "a"), newStub(t, "b")
	f := newFront(t, true, nil, a, b)
	// Home session s on whichever replica, then kill that replica.
	resp, _ := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderSessionID: "s"}, chatBody("m"))
	home := resp.Header.Get(wire.HeaderReplica)
	dead, alive := a, b
	if home == "b" {
		dead, alive = b, a
	}
	dead.srv.Close() // connection refused from now on
	resp, body := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderSessionID: "s"}, chatBody("m"))
	if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderReplica) != alive.name || !strings.Contains(body, "hi from "+alive.name) {
		t.Fatalf("status %d replica %q body %q", resp.StatusCode, resp.Header.Get(wire.HeaderReplica), body)
	}
	// The dial failure marked the home unhealthy, so the retry re-homed the session.
	if d := resp.Header.Get(wire.HeaderDecision); d != "rehome" {
		t.Fatalf("retried request decision %q, want rehome", d)
	}
	if f.pool().Balancer.Healthy(indexOf(f, dead.name)) {
		t.Fatal("dead replica not marked unhealthy")
	}
	if f.totalInFlight() != 0 {
		t.Fatalf("in flight %v after retry", f.inFlight())
	}
	// The next turn stays on the new home.
	resp, _ = f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderSessionID: "s"}, chatBody("m"))
	if resp.Header.Get(wire.HeaderReplica) != alive.name || resp.Header.Get(wire.HeaderDecision) != "sticky" {
		t.Fatalf("next turn: %s %s", resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision))
	}
	// Every replica dead: 503 in the API's shape once nothing is left.
	alive.srv.Close()
	resp, body = f.post(t, "/v1/messages", nil, `{"model":"m"}`)
	if resp.StatusCode != 503 || !strings.Contains(body, "overloaded_error") {
		t.Fatalf("all dead: %d %s", resp.StatusCode, body)
	}
	if f.totalInFlight() != 0 {
		t.Fatalf("in flight %v", f.inFlight())
	}
}

func TestResetBeforeResponseRetriedWithoutMarkingUnhealthy(t *testing.T) {
	a, b := newStub(t, "a"), newStub(t, "b")
	f := newFront(t, true, nil, a, b)
	resp, _ := f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s"}, `{"model":"m"}`)
	home := map[string]*stub{"a": a, "b": b}[resp.Header.Get(wire.HeaderReplica)]
	other := map[*stub]*stub{a: b, b: a}[home]
	home.setHandler(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // reset before any response byte
		}
	})
	resp, body := f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s"}, `{"model":"m"}`)
	if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderReplica) != other.name || resp.Header.Get(wire.HeaderDecision) != "overflow" {
		t.Fatalf("%d %s %s %s", resp.StatusCode, resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision), body)
	}
	if !f.pool().Balancer.Healthy(indexOf(f, home.name)) {
		t.Fatal("a reset marked the replica unhealthy; only failed connects should")
	}
	home.setHandler(nil)
	resp, _ = f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s"}, `{"model":"m"}`)
	if resp.Header.Get(wire.HeaderReplica) != home.name || resp.Header.Get(wire.HeaderDecision) != "sticky" {
		t.Fatalf("home lost after a one-off retry: %s %s", resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision))
	}
	if f.totalInFlight() != 0 {
		t.Fatalf("in flight %v", f.inFlight())
	}
}

func indexOf(f *front, name string) int {
	for i, u := range f.pool().Upstreams {
		if u.Name == name {
			return i
		}
	}
	return -1
}

func TestNoHealthyReplicaGets503(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"))
	f.pool().Balancer.SetHealthy(0, false)
	resp, body := f.post(t, "/v1/messages", nil, `{"model":"m"}`)
	if resp.StatusCode != 503 || !strings.Contains(body, "overloaded_error") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, _ = f.post(t, "/v1/chat/completions", nil, chatBody("m"))
	if resp.StatusCode != 503 {
		t.Fatalf("%d", resp.StatusCode)
	}
}

func TestUpstreamHeaderTimeoutGets504(t *testing.T) {
	up := newStub(t, "a")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	f := newFront(t, true, func(c *Config) { c.ResponseHeaderTimeout = 50 * time.Millisecond }, up)
	resp, body := f.post(t, "/v1/chat/completions", nil, chatBody("m"))
	if resp.StatusCode != 504 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if len(up.requests("/v1")) != 1 {
		t.Fatal("a timed-out request was retried (the upstream may still be working on it)")
	}
}

// docs/router.md failure case 6: DP ranks behind one URL are separate replicas, pinned with
// X-Data-Parallel-Rank.
func TestDPRanksAreSeparateReplicas(t *testing.T) {
	up := newStub(t, "dp")
	cfg, err := ConfigForURLs([]string{"dp=" + up.srv.URL + ",dp_ranks=2"}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Clock = &simclock.Manual{}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	ranks := map[string]string{}
	for _, sess := range []string{"s1", "s2"} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("m")))
		req.Header.Set(wire.HeaderSessionID, sess)
		req.Header.Set(wire.HeaderDPRank, "7") // clients may not pin ranks
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		rs := up.requests("/v1")
		ranks[resp.Header.Get(wire.HeaderReplica)] = rs[len(rs)-1].Header.Get(wire.HeaderDPRank)
	}
	if ranks["dp/rank0"] != "0" || ranks["dp/rank1"] != "1" {
		t.Fatalf("replica -> rank header: %v", ranks)
	}
	// /metrics engine labels map to ranks.
	up.metrics = "# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n" +
		"vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 5\n" +
		"# TYPE vllm:num_requests_waiting gauge\n" +
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n" +
		"vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2\n"
	rt.scrape(context.Background(), rt.targets[0])
	st := rt.Pools()[0].Balancer.Status()
	if st[0].Running != 1 || st[1].Running != 5 || st[1].Waiting != 2 {
		t.Fatalf("status %+v", st)
	}
}

func TestModelsAndHealthEndpoints(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, func(c *Config) { c.Models[0].Name = "qwen3-4b" }, up)
	get := func(path string) (int, string) {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		f.waitDone(t)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/v1/models"); code != 200 || !strings.Contains(body, `"id": "qwen3-4b"`) {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := get("/health"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Fatalf("%d %s", code, body)
	}
	f.pool().Balancer.SetHealthy(0, false)
	if code, _ := get("/health"); code != 503 {
		t.Fatalf("health with no healthy replica: %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, MetricInFlight) {
		t.Fatalf("%d %.200s", code, body)
	}
}

func TestModelsForwardedForWildcardPool(t *testing.T) {
	up := newStub(t, "a")
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []map[string]string{{"id": "served-model"}}})
	})
	f := newFront(t, true, nil, up)
	resp, err := http.Get(f.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f.waitDone(t)
	if !strings.Contains(string(b), "served-model") || f.totalInFlight() != 0 {
		t.Fatalf("%s", b)
	}
}

func TestRouterMetricsCountRequests(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"))
	f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s"}, `{"model":"m"}`)
	f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s"}, `{"model":"m"}`)
	f.post(t, "/v1/messages", nil, `not json`) // refused by the router itself: counted too
	rec := httptest.NewRecorder()
	f.rt.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`warden_requests_total{decision="placed",model="*",replica="a"} 1`,
		`warden_requests_total{decision="sticky",model="*",replica="a"} 1`,
		`warden_responses_total{code="200",model="*"} 2`,
		`warden_responses_total{code="400",model=""} 1`,
		`warden_sessions{model="*",replica="a"} 1`,
		`warden_replica_healthy{model="*",replica="a"} 1`,
		`warden_decision_seconds_count 2`,
		`warden_upstream_ttfb_seconds_count{model="*",replica="a"} 2`,
		`warden_live_conversations{model="*",replica="a"} 1`,
		`warden_usage_prompt_tokens_total{model="*",replica="a"} 0`, // the stub sends no usage
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The stub serves no vllm:cache_config_info: the capacity is unknown, not 0.
	if strings.Contains(body, MetricKVCapacityTokens+"{") {
		t.Errorf("metrics report a KV capacity the router never learned")
	}
}

func TestStatusFor(t *testing.T) {
	tests := []struct {
		err  error
		gone bool
		want int
	}{
		{nil, false, 200},
		{router.ErrNoReplica, false, 503},
		{fmt.Errorf("x: %w", router.ErrNoReplica), true, 503},
		{context.Canceled, true, 499},
		{context.DeadlineExceeded, false, 504},
		{io.ErrUnexpectedEOF, false, 502},
		{ErrBadBody, false, 400},
		{errUnknownModel, false, 404},
		{errTooLarge, false, 413},
	}
	for _, tc := range tests {
		if got := StatusFor(tc.err, tc.gone); got != tc.want {
			t.Errorf("StatusFor(%v, %v) = %d, want %d", tc.err, tc.gone, got, tc.want)
		}
	}
}

// A new session whose first request the upstream refuses (vLLM's 400 for a body
// like "messages":"hi") gets no home: the session table stays empty, and the
// session's next, valid request is placed afresh. A refused later request keeps
// the home.
func TestRefusedFirstRequestGivesNoHome(t *testing.T) {
	a, b := newStub(t, "a"), newStub(t, "b")
	vllm := func(st *stub) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			reqs := st.requests(r.URL.Path) // the stub has read the body already
			if strings.Contains(string(reqs[len(reqs)-1].Body), `"messages":"hi"`) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"object":"error","message":"messages: Input should be a valid list","type":"BadRequestError","param":null,"code":400}`)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
		}
	}
	a.setHandler(vllm(a))
	b.setHandler(vllm(b))
	f := newFront(t, true, nil, a, b)
	bad := `{"model":"m","stream":true,"messages":"hi"}`
	hdr := map[string]string{wire.HeaderClaudeSession: "s"}
	if resp, _ := f.post(t, "/v1/chat/completions", hdr, bad); resp.StatusCode != 400 || resp.Header.Get(wire.HeaderDecision) != "placed" {
		t.Fatalf("refused request: %d %q", resp.StatusCode, resp.Header.Get(wire.HeaderDecision))
	}
	if n := f.pool().Balancer.Sessions(); n != 0 {
		t.Fatalf("%d sessions after a refused first request, want 0", n)
	}
	if resp, _ := f.post(t, "/v1/chat/completions", hdr, chatBody("m")); resp.StatusCode != 200 || resp.Header.Get(wire.HeaderDecision) != "placed" {
		t.Fatalf("valid request: %d %q, want 200 placed", resp.StatusCode, resp.Header.Get(wire.HeaderDecision))
	}
	if resp, _ := f.post(t, "/v1/chat/completions", hdr, bad); resp.StatusCode != 400 || resp.Header.Get(wire.HeaderDecision) != "sticky" {
		t.Fatalf("refused later request: %d %q, want 400 sticky", resp.StatusCode, resp.Header.Get(wire.HeaderDecision))
	}
	if n := f.pool().Balancer.Sessions(); n != 1 {
		t.Fatalf("%d sessions after a refused later request, want 1 (the home stays)", n)
	}
}
