package routerhttp

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// BenchmarkProxyStream: one streamed chat completion of 64 SSE events through the
// router to a loopback upstream, end to end (client, proxy, upstream in-process).
func BenchmarkProxyStream(b *testing.B) {
	event := `data: {"choices":[{"delta":{"content":"token"}}]}` + "\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range 64 {
			io.WriteString(w, event)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	srv := quietRouterServer(b, up.URL)
	defer srv.Close()
	body := chatBody("m")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(wire.HeaderClaudeSession, "bench-session")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkProxyFirstEvent: one streamed request at a time whose response is a
// single SSE event, straight to a loopback stub (direct), through a bare
// httputil.ReverseProxy (bare) and through the router (routed), so routed minus
// direct ns/op is the router's cost per request on the
// TTFB path (read the body, extract the key, Acquire, forward, relay the headers
// and the first event) without an event stream to relay. Bodies: a 90-byte chat
// request with X-Session-ID, and a recorded 52 KB Claude Code /v1/messages body
// with its X-Claude-Code-Session-Id (the router still reads the model from it and
// checks it is JSON).
func BenchmarkProxyFirstEvent(b *testing.B) {
	event := `data: {"choices":[{"delta":{"content":"token"}}]}` + "\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, event)
	}))
	defer up.Close()
	srv := quietRouterServer(b, up.URL)
	defer srv.Close()
	// bare: net/http's own reverse proxy with the router's transport, flushing
	// and copy buffers but none of its logic: the floor of a proxy built on
	// net/http, so routed minus bare is what the router's own work costs.
	upURL, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
		Transport:     NewTransport(0, 0),
		FlushInterval: -1,
		BufferPool:    copyBuffers,
	})
	defer bare.Close()
	cc := loadFixture(b, "claude-code-2.1.328-turn2.json")
	bodies := []struct {
		name, path, header, key string
		body                    []byte
	}{
		{"chat", "/v1/chat/completions", wire.HeaderSessionID, "bench-session", []byte(chatBody("m"))},
		{"claude-code", "/v1/messages?beta=true", wire.HeaderClaudeSession, cc.Headers[wire.HeaderClaudeSession], cc.Body},
	}
	for _, bd := range bodies {
		for _, side := range []struct{ name, url string }{{"direct", up.URL}, {"bare", bare.URL}, {"routed", srv.URL}} {
			b.Run(bd.name+"/"+side.name, func(b *testing.B) {
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
				defer client.CloseIdleConnections()
				b.SetBytes(int64(len(bd.body)))
				b.ReportAllocs()
				for b.Loop() {
					req, _ := http.NewRequest("POST", side.url+bd.path, bytes.NewReader(bd.body))
					req.Header.Set(bd.header, bd.key)
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("status %d", resp.StatusCode)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}

// BenchmarkMetricsPerRequest: the Prometheus updates one proxied request makes
// (decision and upstream-TTFB histograms, requests and responses counters, each
// looked up by its label values).
func BenchmarkMetricsPerRequest(b *testing.B) {
	m := NewMetrics(func() []*Pool { return nil })
	b.ReportAllocs()
	for b.Loop() {
		m.observeDecision(time.Microsecond)
		m.observeTTFB("qwen3-4b", "r0", time.Millisecond)
		m.countRequest("qwen3-4b", "r0", router.ReasonSticky)
		m.countResponse("qwen3-4b", http.StatusOK)
	}
}

// quietRouterServer serves a router (affinity on, max_num_seqs 32, logging
// discarded) in front of the one upstream at url.
func quietRouterServer(b *testing.B, url string) *httptest.Server {
	b.Helper()
	rt, err := NewFromURLs([]string{url}, true, 32, nil)
	if err != nil {
		b.Fatal(err)
	}
	rt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return httptest.NewServer(rt.Handler())
}
