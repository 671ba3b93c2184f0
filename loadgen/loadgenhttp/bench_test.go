package loadgenhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/loadgen"
)

// cannedStream is a vLLM-shaped answer of n one-word tokens with usage and [DONE].
func cannedStream(n int) string {
	parts := []string{roleChunk}
	for i := range n {
		w := "tok"
		if i > 0 {
			w = " tok"
		}
		parts = append(parts, content(w))
	}
	parts = append(parts, finishChunk, usageChunk, "[DONE]")
	return sseOpenAI(parts...)
}

// BenchmarkOpenAITurn measures the harness's own cost of one turn over loopback:
// encoding a reference-sized prompt (3.5k + 6k words), the HTTP round trip, and
// reading a 256-token stream. The server writes a canned stream at once.
func BenchmarkOpenAITurn(b *testing.B) {
	body := cannedStream(256)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	sc := loadgen.DefaultScenario()
	sc.Model = "m"
	c := NewClient(sc, srv.URL, srv.Client(), nil)
	tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
	clock := simclock.NewScaled(1)
	b.ReportAllocs()
	for b.Loop() {
		r, _ := c.Do(context.Background(), tr, clock)
		if !r.OK() {
			b.Fatal(r.Err)
		}
	}
}

// BenchmarkParseOpenAIStream measures reading a 256-token stream (SSE + JSON).
func BenchmarkParseOpenAIStream(b *testing.B) {
	body := cannedStream(256)
	clock := simclock.NewScaled(1)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := loadgen.Result{}
		parseOpenAIStream(strings.NewReader(body), clock, &r)
		if r.Err != "" {
			b.Fatal(r.Err)
		}
	}
}
