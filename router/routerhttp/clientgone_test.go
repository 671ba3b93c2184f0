package routerhttp

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the proxy's goroutines to log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// routerMetrics renders the router's /metrics text.
func routerMetrics(rt *Router) string {
	rec := httptest.NewRecorder()
	rt.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// A client that sends half its body and hangs up is a client
// cancellation like any other: 499 in warden_responses_total and in the log,
// not a 400 "bad body".
func TestDisconnectMidBodyCountsAs499(t *testing.T) {
	var logs syncBuffer
	f := newFront(t, true, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}, newStub(t, "a"))
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody("m")
	io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 1000\r\n\r\n"+body[:len(body)/2])
	time.Sleep(50 * time.Millisecond) // let the handler start reading
	conn.Close()
	f.waitDone(t)
	m := routerMetrics(f.rt)
	if !strings.Contains(m, `warden_responses_total{code="499",model=""} 1`) {
		t.Errorf("metrics lack a 499 for the client that hung up mid-body:\n%s", grepLines(m, "warden_responses_total"))
	}
	if strings.Contains(m, `warden_responses_total{code="400"`) {
		t.Errorf("a client that hung up mid-body is counted as 400:\n%s", grepLines(m, "warden_responses_total"))
	}
	if !strings.Contains(logs.String(), "status=499") {
		t.Errorf("log has no status=499 line for the client that hung up:\n%s", logs.String())
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
