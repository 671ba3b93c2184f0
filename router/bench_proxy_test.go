package router

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	rt, err := NewFromURLs([]string{up.URL}, true, 32, nil)
	if err != nil {
		b.Fatal(err)
	}
	rt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	body := chatBody("m")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(HeaderClaudeSession, "bench-session")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
