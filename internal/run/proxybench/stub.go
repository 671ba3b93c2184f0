package proxybench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// HeaderStream names one benchmark stream, so the stub can report how long it
// took from starting that stream to writing its first event (stub.wait). Every
// proxy measured forwards it unchanged.
const HeaderStream = "X-Bench-Stream"

// HeaderSession is the session header every proxy hashes (nginx, HAProxy) or
// keys its session table on (warden).
const HeaderSession = wire.HeaderSessionID

// chunk is one OpenAI chat.completion.chunk as vLLM streams it (one token of
// content per event); done ends the stream.
const (
	chunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1760000000,` +
		`"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	done = "data: [DONE]\n\n"
)

// vllmMetrics is what the stub serves on /metrics: a verbatim excerpt of a vLLM
// 0.10.0 /metrics body (copied from the project's recorded fixtures; its first
// line names the source), so warden's scraper sees a vLLM.
//
//go:embed vllm-metrics.txt
var vllmMetrics []byte

// stub is the paced SSE upstream: every listener (one per replica) serves the
// same handler. On /v1/chat/completions it drains the body, flushes the
// response headers at once (as vLLM's StreamingResponse does), then writes
// event k (k = 0..events-1) at (k+1) x interval after the handler started (one
// event per decode step, the first one step after the request; a late write
// does not delay the ones after it), then [DONE]. /health answers 200, /metrics
// the recorded vLLM body; other paths 404.
type stub struct {
	events   int
	interval time.Duration
	waits    sync.Map // HeaderStream value -> time.Duration (handler start -> first event written)
	servers  []*http.Server
	addrs    []string // host:port of each replica
}

// startStub listens on n loopback ports and serves the stub on each.
func startStub(n, events int, interval time.Duration) (*stub, error) {
	st := &stub{events: events, interval: interval}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			st.close()
			return nil, fmt.Errorf("stub upstream: %w", err)
		}
		srv := &http.Server{Handler: st, ReadHeaderTimeout: 10 * time.Second}
		st.servers = append(st.servers, srv)
		st.addrs = append(st.addrs, ln.Addr().String())
		go srv.Serve(ln)
	}
	return st, nil
}

func (st *stub) close() {
	for _, s := range st.servers {
		s.Close()
	}
}

// streamBytes is the length of one complete stream body.
func (st *stub) streamBytes() int { return st.events*len(chunk) + len(done) }

func (st *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	io.Copy(io.Discard, r.Body)
	switch r.URL.Path {
	case wire.PathChatCompletions:
	case wire.PathHealth:
		return
	case wire.PathMetrics:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(vllmMetrics)
		return
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f := w.(http.Flusher)
	f.Flush()
	timer := time.NewTimer(time.Until(start.Add(st.interval)))
	defer timer.Stop()
	for k := range st.events {
		select {
		case <-r.Context().Done():
			return
		case <-timer.C:
		}
		timer.Reset(time.Until(start.Add(time.Duration(k+2) * st.interval)))
		if k == 0 {
			if id := r.Header.Get(HeaderStream); id != "" {
				st.waits.Store(id, time.Since(start))
			}
		}
		io.WriteString(w, chunk)
		f.Flush()
	}
	io.WriteString(w, done)
}

// wait returns and forgets how long the stub took from starting stream id to
// writing its first event.
func (st *stub) wait(id string) (time.Duration, error) {
	v, ok := st.waits.LoadAndDelete(id)
	if !ok {
		return 0, fmt.Errorf("stub: stream %q not seen (did the proxy drop the %s header?)", id, HeaderStream)
	}
	return v.(time.Duration), nil
}

// waitHealthy polls GET url until it answers 200 or timeout passes.
func waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New("status " + strconv.Itoa(resp.StatusCode))
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("GET %s did not answer 200 within %s: %v", url, timeout, last)
}
