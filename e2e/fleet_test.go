package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// fleet is a simulated vLLM cluster with the router in front, all on loopback.
type fleet struct {
	sim *simhttp.Cluster
	rt  *routerhttp.Router
	url string // the router's main listener (API, /metrics, /status/card)
	log *requestLog
}

// startFleet starts simCfg's cluster and a router over it (affinity on,
// maxNumSeqs per replica, the cluster's scaled clock so scrape intervals are
// simulated time), and stops both when the test ends.
func startFleet(t *testing.T, simCfg simhttp.Config, maxNumSeqs int) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := simhttp.Start(ctx, simCfg)
	if err != nil {
		cancel()
		t.Fatalf("starting simulator: %v", err)
	}
	cfg, err := routerhttp.ConfigForURLs(cl.URLs(), true)
	if err != nil {
		cancel()
		cl.Close()
		t.Fatal(err)
	}
	cfg.Models[0].MaxNumSeqs = maxNumSeqs
	cfg.Clock = cl.Clock()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := routerhttp.New(cfg)
	if err != nil {
		cancel()
		cl.Close()
		t.Fatal(err)
	}
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		rt.Run(ctx)
	}()
	f := &fleet{sim: cl, rt: rt, log: &requestLog{}}
	srv := httptest.NewServer(f.log.wrap(rt.Handler()))
	f.url = srv.URL
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-runDone
		cl.Close()
	})
	return f
}

// routed is one API request as the router saw it.
type routed struct {
	Path      string
	Session   string // X-Claude-Code-Session-Id, else metadata.user_id's session, else Codex's session-id, else X-Session-ID
	Agent     string // X-Claude-Code-Agent-Id
	BodyBytes int
	Model     string
	MaxTokens int
	Stream    bool
	Messages  int
	Status    int
	Replica   string // X-Warden-Replica
	Decision  string // X-Warden-Decision
	// KeepAlives: keep-alive events (Anthropic ping events, SSE comments) the
	// router wrote before the model's first event (admission keep-alive).
	KeepAlives int
}

func (r routed) String() string {
	sess := r.Session
	if len(sess) > 8 {
		sess = sess[:8] + "…"
	}
	return fmt.Sprintf("%s session=%s agent=%q model=%s max_tokens=%d stream=%v messages=%d body=%dB -> %d %s (%s) keep-alives %d",
		r.Path, sess, r.Agent, r.Model, r.MaxTokens, r.Stream, r.Messages, r.BodyBytes, r.Status, r.Replica, r.Decision, r.KeepAlives)
}

// requestLog records every POST the router answers.
type requestLog struct {
	mu     sync.Mutex
	reqs   []routed
	active int // handlers running: a client can hold its whole reply before the handler returns
}

// all returns the requests logged so far, waiting (up to 10 s of wall time) for
// handlers still running to record theirs: a client that has read a whole
// non-streamed reply can return before the router's handler does.
func (l *requestLog) all() []routed {
	waitFor(10*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.active == 0
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]routed(nil), l.reqs...)
}

func (l *requestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		l.mu.Lock()
		l.active++
		l.mu.Unlock()
		rec := routed{Path: r.URL.Path, BodyBytes: len(body), Agent: r.Header.Get(wire.HeaderClaudeAgent)}
		var b struct {
			Model     string            `json:"model"`
			MaxTokens int               `json:"max_tokens"`
			Stream    bool              `json:"stream"`
			Messages  []json.RawMessage `json:"messages"`
			Metadata  struct {
				UserID string `json:"user_id"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(body, &b)
		rec.Model, rec.MaxTokens, rec.Stream, rec.Messages = b.Model, b.MaxTokens, b.Stream, len(b.Messages)
		rec.Session = r.Header.Get(wire.HeaderClaudeSession)
		if rec.Session == "" && strings.HasPrefix(b.Metadata.UserID, "{") {
			var uid struct {
				SessionID string `json:"session_id"`
			}
			if json.Unmarshal([]byte(b.Metadata.UserID), &uid) == nil {
				rec.Session = uid.SessionID
			}
		}
		if rec.Session == "" {
			rec.Session = r.Header.Get(wire.HeaderCodexSession)
		}
		if rec.Session == "" {
			rec.Session = r.Header.Get(wire.HeaderSessionID)
		}
		sw := &statusWriter{ResponseWriter: w}
		// Deferred: a handler that panics (the reverse proxy's
		// http.ErrAbortHandler on a failed copy) is still logged and no longer
		// counted as running, so all() does not wait for it.
		defer func() {
			rec.Status = sw.status
			rec.Replica = sw.Header().Get(wire.HeaderReplica)
			rec.Decision = sw.Header().Get(wire.HeaderDecision)
			rec.KeepAlives = sw.keepAlives
			l.mu.Lock()
			l.reqs = append(l.reqs, rec)
			l.active--
			l.mu.Unlock()
		}()
		h.ServeHTTP(sw, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status     int
	keepAlives int  // keep-alive events written before the model's first event
	started    bool // an event that is not a keep-alive was written
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.started {
		// The router writes each keep-alive event on its own (hold.go).
		switch s := string(b); s {
		case "event: ping\ndata: {\"type\": \"ping\"}\n\n", ": keep-alive\n\n":
			w.keepAlives++
		default:
			w.started = true
		}
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (the reverse proxy's flushes) reach the
// connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// waitFor polls cond every 50 ms until it holds or limit (wall time) passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// waitScraped waits (10 s at most) until the router has a fresh /metrics
// scrape of every replica, so its first placement sees real loads.
func (f *fleet) waitScraped(t *testing.T) {
	t.Helper()
	if !waitFor(10*time.Second, func() bool {
		for _, r := range f.rt.Status().Models[0].Replicas {
			if !r.ScrapeFresh {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the router never scraped every replica")
	}
}
