package routerhttp

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// docs/router.md failure case 2, "release exactly once": two streams in flight on one replica; when
// the first ends the count is exactly 1 (a double release would show 0, which the
// floor at zero would otherwise hide), and 0 after the second.
func TestReleaseExactlyOncePerRequest(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, nil, up)
	g1, open1 := testGate(t)
	g2, open2 := testGate(t)
	gates := map[string]chan struct{}{"s1": g1, "s2": g2}
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-gates[r.Header.Get("X-Session-ID")]
		io.WriteString(w, "data: [DONE]\n\n")
	})
	open := func(key string) *http.Response {
		return f.openStream(t, context.Background(), "/v1/chat/completions", key, chatBody("m"))
	}
	r1, r2 := open("s1"), open("s2")
	if got := f.totalInFlight(); got != 2 {
		t.Fatalf("in flight with two open streams = %d, want 2", got)
	}
	open1()
	f.endStream(t, r1, 1, "the first stream ended")
	open2()
	f.endStream(t, r2, 0, "both ended")
}

// openStream posts body to path with session key and returns the response once
// its first line arrived (the stream is open at the replica).
func (f *front) openStream(t *testing.T, ctx context.Context, path, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("X-Session-ID", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp
}

// endStream reads resp to its end and closes it, waits for the proxy's handler,
// and checks the replicas' total in-flight count is want (what: when).
func (f *front) endStream(t *testing.T, resp *http.Response, want int, what string) {
	t.Helper()
	io.ReadAll(resp.Body)
	resp.Body.Close()
	f.waitDone(t)
	if got := f.totalInFlight(); got != want {
		t.Fatalf("in flight after %s = %d, want exactly %d", what, got, want)
	}
}

// docs/router.md failure case 7, "retry only if nothing was streamed yet": with a second healthy
// replica available, a stream that breaks after its first byte reached the client
// ends with an error event and is NOT sent again to the other replica.
func TestNoRetryAfterBytesReachedClient(t *testing.T) {
	a, b := newStub(t, "a"), newStub(t, "b")
	breaker := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}
	a.setHandler(breaker)
	b.setHandler(breaker)
	f := newFront(t, true, nil, a, b)
	resp, body := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": "k"}, `{"model":"m","stream":true}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `data: {"error":{`) {
		t.Fatalf("status %d body %q: want the partial stream closed by an error event", resp.StatusCode, body)
	}
	n := len(a.requests("/v1/chat/completions")) + len(b.requests("/v1/chat/completions"))
	if n != 1 {
		t.Fatalf("upstream requests = %d, want 1: a stream that already sent bytes must not be retried", n)
	}
}

// testGate returns a channel a stub handler waits on and the function that opens
// it (idempotent). The gate is also opened when the test ends, before the stub's
// server is closed, so a test that fails while a handler waits fails instead of
// hanging in httptest.Server.Close.
func testGate(t *testing.T) (chan struct{}, func()) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return ch, open
}

// docs/router.md failure cases 2 and 9 on both APIs: a stream that ends badly (the replica breaks
// it mid-stream, or the client disconnects) releases its in-flight count exactly
// once: with a second stream still open on the same replica the count is exactly
// 1 afterwards (a double release would show 0). The client's disconnect reaches
// the replica (its request context ends).
func TestReleaseExactlyOnceWhenAStreamEndsBadly(t *testing.T) {
	for _, api := range []string{"/v1/chat/completions", "/v1/messages?beta=true"} {
		for _, end := range []string{"upstream breaks", "client disconnects"} {
			t.Run(api+" "+end, func(t *testing.T) {
				up := newStub(t, "a")
				f := newFront(t, true, nil, up)
				hold, openHold := testGate(t)
				canceled := make(chan struct{})
				up.setHandler(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "event: ping\ndata: {}\n\n")
					w.(http.Flusher).Flush()
					switch {
					case r.Header.Get("X-Session-ID") == "hold":
						<-hold
					case end == "upstream breaks":
						if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
							conn.Close()
						}
					default:
						<-r.Context().Done()
						close(canceled)
					}
				})
				open := func(ctx context.Context, key string) *http.Response {
					return f.openStream(t, ctx, api, key, `{"model":"m","stream":true}`)
				}
				held := open(context.Background(), "hold")
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				bad := open(ctx, "bad")
				if end == "client disconnects" {
					cancel()
					select {
					case <-canceled:
					case <-time.After(guard):
						t.Fatal("the client's disconnect did not reach the replica")
					}
				}
				f.endStream(t, bad, 1, "the bad stream ended (the held one is open)")
				openHold()
				f.endStream(t, held, 0, "both ended")
			})
		}
	}
}
