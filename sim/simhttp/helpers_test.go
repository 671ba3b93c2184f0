package simhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"
)

// testSpeed runs tests at 50 simulated seconds per wall second.
const testSpeed = 50

// newTestServer starts one simulated server behind httptest.
func newTestServer(t *testing.T, mutate func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Replicas = 1
	cfg.Speed = testSpeed
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := NewServer(cfg, 0)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return srv, ts
}

// post sends a JSON body (a string is sent as is) with optional header pairs.
func post(t *testing.T, ctx context.Context, url string, body any, headers ...string) *http.Response {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatalf("marshal: %v", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// decodeBody reads a JSON response into a generic map, failing on other statuses.
func decodeBody(t *testing.T, resp *http.Response, wantStatus int) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, wantStatus, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return m
}

// readEvents reads a whole SSE body.
func readEvents(t *testing.T, resp *http.Response) []sse.Event {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	var evs []sse.Event
	for ev, err := range sse.Read(resp.Body, nil) {
		if err != nil {
			t.Fatalf("reading SSE: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func jsonOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
	return m
}

// num reads a JSON number at a path of object keys.
func num(t *testing.T, m map[string]any, path ...string) int {
	t.Helper()
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("path %v: %v is not an object", path, v)
		}
		v = mm[k]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("path %v: %v (%T) is not a number", path, v, v)
	}
	return int(f)
}

// waitFor polls cond until it holds or a generous wall-clock limit passes. It waits
// for asynchronous effects (an abort reaching the engine); it asserts nothing about
// how long they take.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// words returns n distinct-looking words for prompts.
func words(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(prefix)
		b.WriteString(strings.Repeat("x", i%3))
		b.WriteByte(byte('a' + i%26))
	}
	return b.String()
}
