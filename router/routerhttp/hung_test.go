package routerhttp

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// hang makes s answer API requests by writing head (when not empty: SSE headers
// and those bytes, flushed), telling got, and then sending nothing more until the
// request goes away or the test ends: a replica process that stopped with its
// connections open. Call it after newFront, so that the release at the test's
// end comes before the servers' Close (which waits for their handlers): a
// failing test then fails instead of hanging.
func hang(t *testing.T, s *stub, head string, got chan<- struct{}) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s.mu.Lock()
	s.handler = func(w http.ResponseWriter, r *http.Request) {
		if head != "" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, head)
			w.(http.Flusher).Flush()
		}
		got <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	s.mu.Unlock()
}

// TestHungReplicaRequestsEndWhenHealthCheckFails: a replica that hangs with its
// connections open gets no error from the transport, so only its failed health
// check can free the requests sent to it. A request that has no response yet is
// retried on the healthy replica; a stream that started ends with the API's error
// event and [DONE]; a request that heard from its replica within the silence
// limit is left alone.
func TestHungReplicaRequestsEndWhenHealthCheckFails(t *testing.T) {
	// send starts a request on replica a (b is held unhealthy while it is placed)
	// and returns its response once it arrives.
	send := func(t *testing.T, f *front, a *stub, got chan struct{}, session string) <-chan *http.Response {
		t.Helper()
		f.pool().Balancer.SetHealthy(1, false)
		out := make(chan *http.Response, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("m")))
			req.Header.Set(wire.HeaderClaudeSession, session)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				close(out)
				return
			}
			out <- resp
		}()
		select {
		case <-got:
		case <-time.After(guard):
			t.Fatal("the hung replica never got the request")
		}
		f.pool().Balancer.SetHealthy(1, true)
		return out
	}
	fail := func(t *testing.T, f *front, a *stub) {
		t.Helper()
		a.health.Store(http.StatusServiceUnavailable)
		f.rt.checkHealth(context.Background(), f.rt.targets[0])
	}

	t.Run("no response yet: retried on the healthy replica", func(t *testing.T) {
		a, b := newStub(t, "a"), newStub(t, "b")
		got := make(chan struct{}, 1)
		f := newFront(t, true, nil, a, b)
		hang(t, a, "", got)
		f.rt.silentAbort = 0
		out := send(t, f, a, got, "s1")
		fail(t, f, a)
		var resp *http.Response
		select {
		case resp = <-out:
		case <-time.After(guard):
			t.Fatal("the request still waits on the hung replica")
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		f.waitDone(t)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(wire.HeaderReplica) != "b" || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("status %d from %q, body %q; want 200 from b", resp.StatusCode, resp.Header.Get(wire.HeaderReplica), body)
		}
		if n := f.totalInFlight(); n != 0 {
			t.Errorf("%d requests still counted in flight", n)
		}
	})

	t.Run("stream started: ends with the error event", func(t *testing.T) {
		a, b := newStub(t, "a"), newStub(t, "b")
		got := make(chan struct{}, 1)
		first := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
		f := newFront(t, true, nil, a, b)
		hang(t, a, first, got)
		f.rt.silentAbort = 0
		out := send(t, f, a, got, "s2")
		var resp *http.Response
		select {
		case resp = <-out:
		case <-time.After(guard):
			t.Fatal("no response headers")
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		line, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line %q, %v", line, err)
		}
		fail(t, f, a)
		done := make(chan string, 1)
		go func() { rest, _ := io.ReadAll(rd); done <- string(rest) }()
		var rest string
		select {
		case rest = <-done:
		case <-time.After(guard):
			t.Fatal("the stream still waits on the hung replica")
		}
		f.waitDone(t)
		if !strings.Contains(rest, `"error"`) || !strings.Contains(rest, "marked down") || !strings.HasSuffix(rest, "data: [DONE]\n\n") {
			t.Fatalf("rest of stream %q: want an error event naming the health check, then [DONE]", rest)
		}
		if n := f.totalInFlight(); n != 0 {
			t.Errorf("%d requests still counted in flight", n)
		}
	})

	t.Run("a request heard from recently is left alone", func(t *testing.T) {
		a, b := newStub(t, "a"), newStub(t, "b")
		got := make(chan struct{}, 1)
		f := newFront(t, true, nil, a, b)
		hang(t, a, "", got)
		f.rt.silentAbort = time.Hour
		out := send(t, f, a, got, "s3")
		fail(t, f, a)
		if n := f.rt.proxy.AbortSilent(f.pool(), []int{0}, time.Hour); n != 0 {
			t.Fatalf("AbortSilent(1h) ended %d requests sent just now", n)
		}
		select {
		case resp := <-out:
			t.Fatalf("request ended (%d) although its replica was silent for less than the limit", resp.StatusCode)
		case <-time.After(50 * time.Millisecond):
		}
		if n := f.rt.proxy.AbortSilent(f.pool(), []int{0}, 0); n != 1 {
			t.Fatalf("AbortSilent(0) ended %d requests, want 1", n)
		}
		select {
		case resp := <-out:
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		case <-time.After(guard):
			t.Fatal("the request was not ended")
		}
		f.waitDone(t)
	})
}
