package routerhttp

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// keepAliveAfter is the keepalive_after of these tests, in the router's
// (manual) clock.
const keepAliveAfter = 300 * time.Millisecond

// heldStream is a streaming request of a new conversation held at the router.
type heldStream struct {
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
}

// fill posts conversation "a", which fills admitFront's one replica.
func fill(t *testing.T, f *front, path string) {
	t.Helper()
	if resp, _ := f.post(t, path, map[string]string{"X-Session-ID": "a"}, bigBody("a")); resp.StatusCode != 200 {
		t.Fatalf("a: %d", resp.StatusCode)
	}
}

// startStream posts body for conversation key and returns a function that
// waits for its response headers.
func startStream(t *testing.T, f *front, path, key, body string) func() *heldStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("X-Session-ID", key)
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	return func() *heldStream {
		t.Helper()
		select {
		case resp := <-got:
			if resp == nil {
				t.FailNow()
			}
			return &heldStream{resp: resp, rd: bufio.NewReader(resp.Body), cancel: cancel}
		case <-time.After(guard):
			t.Fatalf("%s: no response headers", key)
		}
		return nil
	}
}

// holdStream fills the replica, posts body for conversation "b", waits until
// it is queued, runs advance (which moves the clock past keepalive_after) and
// returns b's response once its headers arrived.
func holdStream(t *testing.T, f *front, path, body string, advance func()) *heldStream {
	t.Helper()
	fill(t, f, path)
	wait := startStream(t, f, path, "b", body)
	waitQueue(t, f, 1)
	advance()
	return wait()
}

func waitQueue(t *testing.T, f *front, n int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for f.pool().Balancer.Admission().Queue != n {
		if time.Now().After(deadline) {
			t.Fatalf("admission queue %d, want %d", f.pool().Balancer.Admission().Queue, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// event reads one SSE block (up to its blank line), without the blank line.
func (h *heldStream) event(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := h.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream after %q: %v", b.String(), err)
		}
		if line == "\n" {
			return strings.TrimSuffix(b.String(), "\n")
		}
		b.WriteString(line)
	}
}

// rest reads the stream to its end (the trailers arrive with the end).
func (h *heldStream) rest(t *testing.T) string {
	t.Helper()
	b, err := io.ReadAll(h.rd)
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	h.resp.Body.Close()
	return string(b)
}

// keepAliveEvent is the keep-alive event of path's API.
func keepAliveEvent(path string) string {
	if strings.HasPrefix(path, "/v1/messages") {
		return "event: ping\ndata: {\"type\": \"ping\"}"
	}
	return ": keep-alive"
}

var keepAliveAPIs = []struct {
	name, path, done string
}{
	{"anthropic", "/v1/messages", "event: message_stop"},
	{"openai", "/v1/chat/completions", "data: [DONE]"},
}

// A streaming request held longer than keepalive_after gets
// a committed 200 SSE response with the API's keep-alive event at once and
// every router.KeepAliveInterval, then, once admitted, the replica's normal
// completion; the trailers carry the final hold (>= the hold), the decision and
// the replica.
func TestProxyKeepsHeldStreamAlive(t *testing.T) {
	// Shortened: the manual clock may not jump past router.TicketTTL (5 s)
	// between two asks, or the ticket expires as a vanished waiter's.
	const keepAliveInterval = 2 * time.Second
	for _, api := range keepAliveAPIs {
		t.Run(api.name, func(t *testing.T) {
			f, _ := admitFront(t, router.AdmissionConfig{MaxHold: -1, KeepAliveAfter: keepAliveAfter})
			f.rt.proxy.keepAliveInterval = keepAliveInterval
			h := holdStream(t, f, api.path, bigBody("b"), func() { f.clock.Advance(time.Second) })
			r := h.resp
			if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/event-stream" || r.Header.Get("Cache-Control") != "no-cache" ||
				r.Header.Get(wire.HeaderAdmission) != wire.AdmissionWaiting || r.Header.Get(wire.HeaderHeldMs) != "1000" {
				t.Fatalf("committed response: %d %v", r.StatusCode, r.Header)
			}
			for _, k := range []string{wire.HeaderHeldMs, wire.HeaderAdmission} {
				if _, ok := r.Trailer[k]; !ok {
					t.Errorf("trailer %s not declared: %v", k, r.Trailer)
				}
			}
			if ev := h.event(t); ev != keepAliveEvent(api.path) {
				t.Fatalf("first event %q, want the keep-alive", ev)
			}
			f.clock.Advance(keepAliveInterval)
			if ev := h.event(t); ev != keepAliveEvent(api.path) {
				t.Fatalf("second event %q, want the keep-alive", ev)
			}
			if st := f.pool().Balancer.Admission(); st.Queue != 1 {
				t.Fatalf("still held: queue %d", st.Queue)
			}
			f.pool().Balancer.ObserveCapacity(0, 5000) // room: b is admitted at its next ask
			body := h.rest(t)
			f.waitDone(t)
			if !strings.Contains(body, "hi from r0") || !strings.Contains(body, api.done) || strings.Contains(body, "error") {
				t.Errorf("after the keep-alives, want the replica's completion: %q", body)
			}
			held, _ := strconv.Atoi(r.Trailer.Get(wire.HeaderHeldMs))
			if hold := time.Second + keepAliveInterval; time.Duration(held)*time.Millisecond < hold {
				t.Errorf("trailer %s = %q, want >= %v", wire.HeaderHeldMs, r.Trailer.Get(wire.HeaderHeldMs), hold)
			}
			if r.Trailer.Get(wire.HeaderAdmission) != "held" || r.Trailer.Get(wire.HeaderReplica) != "r0" || r.Trailer.Get(wire.HeaderDecision) == "" {
				t.Errorf("trailers %v", r.Trailer)
			}
			if st := f.pool().Balancer.Admission(); st.Queue != 0 || st.Outcomes.AfterHold != 1 {
				t.Errorf("admission: %+v", st)
			}
			if f.totalInFlight() != 0 {
				t.Errorf("in flight %v", f.inFlight())
			}
		})
	}
}

// Refused at max_hold after the commit: the API's in-stream overload error
// (Anthropic overloaded_error, OpenAI rate_limit_exceeded), counted as the
// 529 / 429 it would have been.
func TestProxyRefusesKeptAliveStreamInStream(t *testing.T) {
	for _, api := range keepAliveAPIs {
		t.Run(api.name, func(t *testing.T) {
			f, _ := admitFront(t, router.AdmissionConfig{MaxHold: 2 * time.Second, OnLimit: router.AdmitLimitRefuse, KeepAliveAfter: keepAliveAfter})
			h := holdStream(t, f, api.path, bigBody("b"), func() { f.clock.Advance(time.Second) })
			if ev := h.event(t); ev != keepAliveEvent(api.path) {
				t.Fatalf("first event %q", ev)
			}
			f.clock.Advance(2 * time.Second)
			body := h.rest(t)
			f.waitDone(t)
			want, code := `data: {"error":{"code":429,"message":"model \"m\": overloaded: admission limit reached: held 3s, max_hold 2s","param":null,"type":"rate_limit_exceeded"}}`+"\n\ndata: [DONE]\n\n", "429"
			if api.name == "anthropic" {
				want, code = `event: error`+"\n"+`data: {"error":{"message":"model \"m\": overloaded: admission limit reached: held 3s, max_hold 2s","type":"overloaded_error"},"type":"error"}`+"\n\n", "529"
			}
			if body != want {
				t.Errorf("after the keep-alive:\n%q\nwant\n%q", body, want)
			}
			if h.resp.Trailer.Get(wire.HeaderAdmission) != "refused" || h.resp.Trailer.Get(wire.HeaderHeldMs) != "3000" {
				t.Errorf("trailers %v", h.resp.Trailer)
			}
			// Regression: the refused stream declared X-Warden-Replica and
			// X-Warden-Decision without sending them (no replica was chosen).
			for k, v := range h.resp.Trailer {
				if len(v) == 0 {
					t.Errorf("trailer %s declared but not sent: %v", k, h.resp.Trailer)
				}
			}
			if m := routerMetrics(f.rt); !strings.Contains(m, `warden_responses_total{code="`+code+`",model="*"} 1`) {
				t.Errorf("metrics lack the %s refusal:\n%s", code, grepLines(m, "warden_responses_total"))
			}
			if st := f.pool().Balancer.Admission(); st.Queue != 0 || st.Outcomes.Refused != 1 {
				t.Errorf("admission: %+v", st)
			}
		})
	}
}

// The upstream fails after the commit: its 500 (no other replica to retry on)
// becomes the API's in-stream error event with the upstream's message, and the
// call is counted as the 500, not as the 200 on the wire.
func TestProxyKeptAliveUpstreamFailureIsAnInStreamError(t *testing.T) {
	for _, api := range keepAliveAPIs {
		t.Run(api.name, func(t *testing.T) {
			f, s := admitFront(t, router.AdmissionConfig{MaxHold: -1, KeepAliveAfter: keepAliveAfter})
			h := holdStream(t, f, api.path, bigBody("b"), func() {
				s.setHandler(fail500)
				f.clock.Advance(time.Second)
			})
			if ev := h.event(t); ev != keepAliveEvent(api.path) {
				t.Fatalf("first event %q", ev)
			}
			f.pool().Balancer.ObserveCapacity(0, 5000)
			body := h.rest(t)
			f.waitDone(t)
			msg := `upstream r0 answered 500: EngineCore encountered an issue`
			want := `data: {"error":{"code":500,"message":"` + msg + `","param":null,"type":"upstream_error"}}` + "\n\ndata: [DONE]\n\n"
			if api.name == "anthropic" {
				want = `event: error` + "\n" + `data: {"error":{"message":"` + msg + `","type":"api_error"},"type":"error"}` + "\n\n"
			}
			if body != want {
				t.Errorf("after the keep-alive:\n%q\nwant\n%q", body, want)
			}
			if h.resp.Trailer.Get(wire.HeaderReplica) != "r0" {
				t.Errorf("trailers %v", h.resp.Trailer)
			}
			m := routerMetrics(f.rt)
			if !strings.Contains(m, `warden_responses_total{code="500",model="*"} 1`) || !strings.Contains(m, `warden_responses_total{code="200",model="*"} 1`) {
				t.Errorf("want a's 200 and b's 500 counted:\n%s", grepLines(m, "warden_responses_total"))
			}
		})
	}
}

// After the commit the retry before the upstream's first byte still works:
// the replica b is admitted to answers 500, the proxy retries on the other
// and the client gets that one's completion; the failed replica is counted as
// failed (ejected here at one failure).
func TestProxyKeptAliveStreamRetriesBeforeFirstByte(t *testing.T) {
	r0, r1 := newStub(t, "r0"), newStub(t, "r1")
	f := newFront(t, true, func(c *Config) {
		c.Models[0].Admission = AdmissionYAML(router.AdmissionConfig{Mode: router.AdmissionFit, FillTarget: 1, MaxHold: -1, KeepAliveAfter: keepAliveAfter})
		c.EjectConsecutiveFailures = 1
	}, r0, r1)
	b := f.pool().Balancer
	b.ObserveCapacity(0, 1000)
	b.ObserveCapacity(1, 1000)
	// Conversation c fills the replica a does not (each holds one).
	if resp, _ := f.post(t, "/v1/messages", map[string]string{"X-Session-ID": "c"}, bigBody("c")); resp.StatusCode != 200 {
		t.Fatalf("c: %d", resp.StatusCode)
	}
	h := holdStream(t, f, "/v1/messages", bigBody("b"), func() { f.clock.Advance(time.Second) })
	if ev := h.event(t); ev != keepAliveEvent("/v1/messages") {
		t.Fatalf("first event %q", ev)
	}
	r0.setHandler(fail500)
	b.ObserveCapacity(0, 5000) // room on r0 only: b is admitted there, fails, is retried on r1
	body := h.rest(t)
	f.waitDone(t)
	if !strings.Contains(body, "hi from r1") || strings.Contains(body, "error") {
		t.Errorf("want r1's completion after the retry: %q", body)
	}
	if h.resp.Trailer.Get(wire.HeaderReplica) != "r1" {
		t.Errorf("trailers %v", h.resp.Trailer)
	}
	if n := len(r0.requests("/v1/messages")); n < 2 {
		t.Errorf("r0 got %d requests, want a or c and b's failed attempt", n)
	}
	if st := f.rt.Status().Models[0].Replicas[0]; !st.Ejected {
		t.Errorf("r0 not ejected after b's failed attempt: %+v", st)
	}
}

// A request that does not stream cannot be kept alive: it is admitted at
// MaxSilentHold (shortened here) while a streaming one held as long is still
// held, kept alive.
func TestProxyCapsSilentHoldOfNonStreamingRequest(t *testing.T) {
	f, _ := admitFront(t, router.AdmissionConfig{MaxHold: -1, KeepAliveAfter: keepAliveAfter})
	f.rt.proxy.maxSilentHold = 2 * time.Second
	fill(t, f, "/v1/chat/completions")
	plain := strings.Replace(bigBody("p"), `"stream":true`, `"stream":false`, 1)
	waitPlain := startStream(t, f, "/v1/chat/completions", "p", plain)
	waitQueue(t, f, 1)
	waitStream := startStream(t, f, "/v1/chat/completions", "s", bigBody("s"))
	waitQueue(t, f, 2)
	f.clock.Advance(3 * time.Second)
	p := waitPlain()
	p.rest(t)
	f.waitDone(t)
	if p.resp.StatusCode != 200 || p.resp.Header.Get(wire.HeaderAdmission) != "limit" || p.resp.Header.Get(wire.HeaderHeldMs) != "3000" {
		t.Errorf("non-streaming request: %d %v, want admitted at the limit after 3000 ms", p.resp.StatusCode, p.resp.Header)
	}
	s := waitStream()
	if s.resp.Header.Get(wire.HeaderAdmission) != wire.AdmissionWaiting {
		t.Fatalf("streaming request: %d %v, want kept alive", s.resp.StatusCode, s.resp.Header)
	}
	if ev := s.event(t); ev != ": keep-alive" {
		t.Fatalf("first event %q", ev)
	}
	if st := f.pool().Balancer.Admission(); st.Queue != 1 || st.Outcomes.AtLimit != 1 {
		t.Errorf("admission: %+v, want the streaming request still held", st)
	}
}

// A client that disconnects while kept alive leaves the queue at once; the
// call is counted as 499.
func TestProxyKeptAliveClientDisconnectLeavesQueue(t *testing.T) {
	f, _ := admitFront(t, router.AdmissionConfig{MaxHold: -1, KeepAliveAfter: keepAliveAfter})
	h := holdStream(t, f, "/v1/messages", bigBody("b"), func() { f.clock.Advance(time.Second) })
	if ev := h.event(t); ev != keepAliveEvent("/v1/messages") {
		t.Fatalf("first event %q", ev)
	}
	h.cancel()
	h.resp.Body.Close()
	f.waitDone(t)
	if st := f.pool().Balancer.Admission(); st.Queue != 0 || st.Outcomes.GaveUp != 1 {
		t.Errorf("after disconnect: %+v", st)
	}
	if f.totalInFlight() != 0 {
		t.Errorf("in flight %v", f.inFlight())
	}
	if m := routerMetrics(f.rt); !strings.Contains(m, `warden_responses_total{code="499",model="*"} 1`) {
		t.Errorf("metrics lack the 499:\n%s", grepLines(m, "warden_responses_total"))
	}
}

// keepalive_after is set in the YAML admission mapping and by PUT
// /admin/models/{model}/admission (a Go duration, as max_hold).
func TestKeepAliveAfterConfig(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader("models:\n  - name: m\n    admission:\n      mode: fit\n      keepalive_after: 30s\n    replicas:\n      - url: http://127.0.0.1:1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Models[0].Admission.KeepAliveAfter; got != 30*time.Second {
		t.Errorf("yaml keepalive_after: %v, want 30s", got)
	}
	if _, err := ParseConfig(strings.NewReader("models:\n  - name: m\n    admission:\n      keep_alive: 30s\n")); err == nil || !strings.Contains(err.Error(), "keepalive_after") {
		t.Errorf("an unknown admission key should list keepalive_after among the fields: %v", err)
	}
	rt, srv := newAdmin(t, "", "m")
	code, body := adminDo(t, srv, "PUT", "/admin/models/m/admission", "", `{"mode":"fit","keepalive_after":"-1s"}`)
	if code != 200 || rt.Pools()[0].Balancer.AdmissionConfig().KeepAliveAfter != -time.Second {
		t.Fatalf("PUT keepalive_after -1s: %d %s, config %+v", code, body, rt.Pools()[0].Balancer.AdmissionConfig())
	}
	if code, body := adminDo(t, srv, "PUT", "/admin/models/m/admission", "", `{"keepalive_after":"soon"}`); code != 400 || !strings.Contains(body, "keepalive_after") {
		t.Errorf("PUT a bad keepalive_after: %d %s, want 400 naming the field", code, body)
	}
	if code, body := adminDo(t, srv, "GET", "/admin/models/m/admission", "", ""); code != 200 || !strings.Contains(body, `"keepalive_after": "-1s"`) {
		t.Errorf("GET: %d %s", code, body)
	}
}
