package routerhttp

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client that sends its body at 1 byte a second is cut at
// the body read timeout with 408 in the API's error shape (and counted so),
// instead of holding a goroutine, a descriptor and its buffer for ever.
func TestSlowBodyIsCutAtReadTimeoutWith408(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f := newFront(t, true, func(c *Config) { c.BodyReadTimeout = timeout }, newStub(t, "a"))
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // 1 byte every 50 ms: never done within the timeout
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte{' '}); err != nil {
					return
				}
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(guard))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response to the slow body: %v", err)
	}
	took := time.Since(start)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d after %v, want 408: %s", resp.StatusCode, took, body)
	}
	if took < timeout || took > timeout+2*time.Second {
		t.Errorf("answered after %v, want about the read timeout %v", took, timeout)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Type != "timeout_error" || !strings.Contains(e.Error.Message, "body") {
		t.Errorf("body %s, want an Anthropic error of type timeout_error about the body", body)
	}
	f.waitDone(t)
	if m := routerMetrics(f.rt); !strings.Contains(m, `warden_responses_total{code="408",model=""} 1`) {
		t.Errorf("metrics lack the 408:\n%s", grepLines(m, "warden_responses_total"))
	}
}

// The memory all bodies being read may hold together is capped: a request
// whose body would take the total past body_memory_bytes is answered 503 with
// Retry-After in the API's shape, and the others still get through.
func TestBodyMemoryCapAnswers503WithRetryAfter(t *testing.T) {
	f := newFront(t, true, func(c *Config) {
		c.BodyReadTimeout = guard
		c.BodyMemoryBytes = 4 * bodyChunk
	}, newStub(t, "a"))
	// Two slow bodies that have each sent more than one chunk hold the cap.
	var conns []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"+strings.Repeat(" ", bodyChunk+1))
		conns = append(conns, conn)
	}
	deadline := time.Now().Add(guard)
	for f.rt.proxy.bodyMem.used.Load() < 4*bodyChunk && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp, body := f.post(t, "/v1/chat/completions", nil, chatBody("m"))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q with the body memory full; want 503 with Retry-After: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if !strings.Contains(body, `"type":"service_unavailable"`) || !strings.Contains(body, "body memory") {
		t.Errorf("body %s, want an OpenAI error saying the body memory is full", body)
	}
	for _, c := range conns {
		c.Close()
	}
	for range conns {
		f.waitDone(t)
	}
	if resp, body := f.post(t, "/v1/chat/completions", nil, chatBody("m")); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the slow bodies left: status %d: %s", resp.StatusCode, body)
	}
	if n := f.rt.proxy.bodyMem.used.Load(); n != 0 {
		t.Errorf("body memory in use after every body was read: %d bytes, want 0", n)
	}
}

// Regression: a body whose Content-Length is over the limit was refused only
// after limit bytes were read; now on the header, with nothing of it sent.
func TestOversizedContentLengthRefusedOnTheHeader(t *testing.T) {
	f := newFront(t, true, func(c *Config) { c.BodyLimit = 1 << 20 }, newStub(t, "a"))
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{")
	conn.SetReadDeadline(time.Now().Add(2 * time.Second)) // the body read timeout is 30 s
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the header alone: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "limit is 1048576 bytes") {
		t.Fatalf("%d %s, want 413 naming the limit", resp.StatusCode, body)
	}
}
