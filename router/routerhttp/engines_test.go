package routerhttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// switchable is a llama.cpp stand-in whose --metrics can be turned off and on
// while it runs: with metrics off GET /metrics is the recorded 501 of
// llama-server without --metrics (a second stand-in started so), everything
// else the metrics-on one.
type switchable struct {
	on, off http.Handler
	metrics atomic.Bool
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" && !s.metrics.Load() {
		s.off.ServeHTTP(w, r)
		return
	}
	s.on.ServeHTTP(w, r)
}

func newEngineStub(t *testing.T, cfg enginestub.Config) http.Handler {
	t.Helper()
	h, err := enginestub.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// startEngineRouter starts a Router (affinity on, scrapes every 20 ms) for
// replicas given as "name=URL" with the engines kinds, logging to log;
// maxNumSeqs > 0 is the model's max_num_seqs (llama.cpp: its -np slots).
func startEngineRouter(t *testing.T, specs []string, kinds []engines.Kind, maxNumSeqs int, log io.Writer) *Router {
	t.Helper()
	cfg, err := ConfigForURLs(specs, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ScrapeInterval, cfg.HealthInterval = 20*time.Millisecond, 20*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	for i := range cfg.Models {
		if maxNumSeqs > 0 {
			cfg.Models[i].MaxNumSeqs = maxNumSeqs
		}
		for j := range cfg.Models[i].Replicas {
			cfg.Models[i].Replicas[j].Engine = string(kinds[j])
		}
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return rt
}

// waitStatus polls rt.Status until ok holds for replica name (5 s at most).
func waitStatus(t *testing.T, rt *Router, name, what string, ok func(ReplicaReport) bool) ReplicaReport {
	t.Helper()
	var last ReplicaReport
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, m := range rt.Status().Models {
			for _, r := range m.Replicas {
				if r.Name == name {
					last = r
					if ok(r) {
						return r
					}
				}
			}
		}
	}
	t.Fatalf("replica %s never %s; last status %+v", name, what, last)
	return last
}

// TestRouterOtherEngines: a Router in front of a llama.cpp and an SGLang
// stand-in scrapes each with its adapter: /status shows the engine, llama.cpp's
// slots, the KV capacity from GET /props (slots x n_ctx) and from SGLang's
// max_total_num_tokens, and the figures each lacks with why. A llama.cpp
// /metrics that goes away (the recorded 501 of llama-server without
// --metrics) gives scrape_error and one warning line for as long as it stays
// away, recovery one info line, and the card shows the reasons.
func TestRouterOtherEngines(t *testing.T) {
	llama := &switchable{
		on:  newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, ContextLen: 8192}),
		off: newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Slots: 4, ContextLen: 8192}),
	}
	llama.metrics.Store(true)
	ls := httptest.NewServer(llama)
	t.Cleanup(ls.Close)
	ss := httptest.NewServer(newEngineStub(t, enginestub.Config{Kind: engines.KindSGLang, Metrics: true, Slots: 8, ContextLen: 4096, KVTokens: 20000}))
	t.Cleanup(ss.Close)
	var log syncBuffer
	rt := startEngineRouter(t, []string{"llama=" + ls.URL, "sgl=" + ss.URL}, []engines.Kind{engines.KindLlamaCpp, engines.KindSGLang}, 0, &log)

	lr := waitStatus(t, rt, "llama", "reported 4 slots and 32768 KV tokens", func(r ReplicaReport) bool {
		return r.Slots == 4 && r.KVCapacityTokens == 4*8192 && r.ScrapeAgeS >= 0
	})
	sr := waitStatus(t, rt, "sgl", "reported max_total_num_tokens 20000", func(r ReplicaReport) bool {
		return r.KVCapacityTokens == 20000
	})
	t.Logf("llama: engine %s slots %d kv %d missing %q; sgl: engine %s kv %d missing %q", lr.Engine, lr.Slots, lr.KVCapacityTokens, lr.Missing, sr.Engine, sr.KVCapacityTokens, sr.Missing)
	if lr.Engine != "llamacpp" || sr.Engine != "sglang" || lr.ScrapeError != "" || sr.ScrapeError != "" {
		t.Errorf("engines %q, %q, scrape errors %q, %q; want llamacpp, sglang, none", lr.Engine, sr.Engine, lr.ScrapeError, sr.ScrapeError)
	}
	if !lacks(lr.Missing, engines.FigPrefixHits) || !lacks(lr.Missing, engines.FigPrefixQueries) {
		t.Errorf("llama.cpp missing_figures %q: want the prefix counters with why", lr.Missing)
	}
	for _, m := range lr.Missing {
		if _, why, _ := strings.Cut(m, ": "); why == "" {
			t.Errorf("missing figure %q without a reason", m)
		}
	}
	if lacks(sr.Missing, engines.FigPrefixHits) || lacks(sr.Missing, engines.FigRunning) {
		t.Errorf("SGLang missing_figures %q: it has running and prefix hits", sr.Missing)
	}
	if n, auto := rt.Pools()[0].Balancer.OverflowThreshold(); !auto || n != 256/4 {
		// A mixed model is not slot-based: vLLM's rule, max_num_seqs/4.
		t.Errorf("mixed model threshold %d (auto %v), want 64 = 256/4", n, auto)
	}

	const warn = "replica metrics cannot be read"
	count := func(s string) int { return strings.Count(log.String(), s) }
	llama.metrics.Store(false)
	lr = waitStatus(t, rt, "llama", "gave a scrape error", func(r ReplicaReport) bool { return r.ScrapeError != "" })
	time.Sleep(200 * time.Millisecond) // about ten more failing scrapes
	if want := "metrics off: GET /metrics answered 501 (llama-server needs --metrics)"; lr.ScrapeError != want {
		t.Errorf("scrape_error %q, want %q", lr.ScrapeError, want)
	}
	if n := count(warn); n != 1 {
		t.Errorf("%d warning lines over about ten failing scrapes, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("the failure is not logged at warning level:\n%s", log.String())
	}
	var card bytes.Buffer
	if err := RenderCard(&card, rt.Card(), 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"metrics off: GET /metrics answered 501 (llama-server needs --metrics)", "not reported: prefix_queries", "llamacpp, 4 slots", "sglang"} {
		if !strings.Contains(card.String(), want) {
			t.Errorf("card lacks %q", want)
		}
	}

	llama.metrics.Store(true)
	waitStatus(t, rt, "llama", "recovered", func(r ReplicaReport) bool { return r.ScrapeError == "" })
	time.Sleep(200 * time.Millisecond)
	if n, r := count(warn), count("replica metrics readable again"); n != 1 || r != 1 {
		t.Errorf("after recovery: %d warning and %d recovery lines, want 1 and 1:\n%s", n, r, log.String())
	}
}

// TestRouterLlamaCppSlotsKeepSessionsHome is the acceptance check at the
// router: 4 sessions of 6 turns, all at once, through a Router with affinity
// on in front of four 4-slot llama.cpp stand-ins (a slot-based model: auto
// overflow threshold slots - 1 = 3) stay home on every turn (X-Warden-Replica
// the same for all of a session's turns) with 0 overflows.
func TestRouterLlamaCppSlotsKeepSessionsHome(t *testing.T) {
	var specs []string
	var kinds []engines.Kind
	for i := range 4 {
		s := httptest.NewServer(newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, TokenDelay: 2 * time.Millisecond}))
		t.Cleanup(s.Close)
		specs = append(specs, fmt.Sprintf("r%d=%s", i, s.URL))
		kinds = append(kinds, engines.KindLlamaCpp)
	}
	// No max_num_seqs given: the router learns it from GET /props total_slots
	// (4 = -np), as warden bench does.
	rt := startEngineRouter(t, specs, kinds, 0, io.Discard)
	for i := range 4 {
		waitStatus(t, rt, fmt.Sprintf("r%d", i), "reported its slots", func(r ReplicaReport) bool { return r.Slots == 4 })
	}
	front := httptest.NewServer(rt.Handler())
	t.Cleanup(front.Close)
	b := rt.Pools()[0].Balancer
	if n, auto := b.OverflowThreshold(); n != 3 || !auto {
		t.Errorf("threshold %d (auto %v), want 3 = slots - 1, auto", n, auto)
	}

	const sessions, turns = 4, 6
	served := make([][]string, sessions)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			history := fmt.Sprintf(`{"role":"system","content":"You are a coding agent."},{"role":"user","content":"session %d: %s"}`, s, strings.Repeat("context ", 200))
			for turn := range turns {
				body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":8,"messages":[%s]}`, enginestub.DefaultModel, history)
				req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(wire.HeaderSessionID, fmt.Sprintf("session-%d", s))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("session %d turn %d: status %d", s, turn, resp.StatusCode)
					return
				}
				served[s] = append(served[s], resp.Header.Get(wire.HeaderReplica))
				history += fmt.Sprintf(`,{"role":"assistant","content":"ok %d"},{"role":"user","content":"turn %d"}`, turn, turn+1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	stayed, total := 0, 0
	for s, reps := range served {
		for _, r := range reps[1:] {
			total++
			if r == reps[0] {
				stayed++
			}
		}
		t.Logf("session %d: %v", s, reps)
	}
	var overflow uint64
	for _, r := range b.Status() {
		overflow += r.ServedBy["overflow"]
	}
	t.Logf("stayed %d of %d later turns (%.0f %%), overflows %d", stayed, total, 100*float64(stayed)/float64(total), overflow)
	if stayed != total || overflow != 0 {
		t.Errorf("stayed %d of %d, %d overflows; want 100 %%, 0", stayed, total, overflow)
	}
}

// restartable is a llama.cpp stand-in that can be "restarted" with other
// settings: while down every request gets 503, then the new stand-in answers.
type restartable struct {
	mu   sync.Mutex
	h    http.Handler
	down bool
}

func (s *restartable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h, down := s.h, s.down
	s.mu.Unlock()
	if down {
		http.Error(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// Regression: the router read a llama.cpp replica's GET /props once, so a server
// restarted with fewer slots and a smaller context kept the old slots, capacity
// and threshold in /status. Now /props is read again after the health check
// recovers (and every propsInterval).
func TestRouterRereadsLlamaCppPropsAfterRestart(t *testing.T) {
	srv := &restartable{h: newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, ContextLen: 8192})}
	s := httptest.NewServer(srv)
	t.Cleanup(s.Close)
	rt := startEngineRouter(t, []string{"r0=" + s.URL}, []engines.Kind{engines.KindLlamaCpp}, 0, io.Discard)
	waitStatus(t, rt, "r0", "reported 4 slots of 8192", func(r ReplicaReport) bool { return r.Slots == 4 && r.KVCapacityTokens == 4*8192 })
	b := rt.Pools()[0].Balancer
	if n, _ := b.OverflowThreshold(); n != 3 {
		t.Fatalf("threshold %d before the restart, want 3", n)
	}
	srv.mu.Lock()
	srv.down = true
	srv.mu.Unlock()
	waitStatus(t, rt, "r0", "went down", func(r ReplicaReport) bool { return !r.Healthy })
	srv.mu.Lock()
	srv.h, srv.down = newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 2, ContextLen: 4096}), false
	srv.mu.Unlock()
	waitStatus(t, rt, "r0", "reported the restarted server's 2 slots of 4096", func(r ReplicaReport) bool {
		return r.Healthy && r.Slots == 2 && r.KVCapacityTokens == 2*4096
	})
	if n, _ := b.OverflowThreshold(); n != 1 {
		t.Errorf("threshold %d after the restart with 2 slots, want 1 = slots - 1", n)
	}
}

// Regression: LearnSlots was "max_num_seqs == 256", so a model configured with an
// explicit max_num_seqs: 256 had it replaced by the slots /props reports. Now
// only a model that leaves it unset learns it.
func TestExplicitMaxNumSeqsIsNotLearned(t *testing.T) {
	s := httptest.NewServer(newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4}))
	t.Cleanup(s.Close)
	rt := startEngineRouter(t, []string{"r0=" + s.URL}, []engines.Kind{engines.KindLlamaCpp}, 256, io.Discard)
	waitStatus(t, rt, "r0", "reported its slots", func(r ReplicaReport) bool { return r.Slots == 4 })
	if n, _ := rt.Pools()[0].Balancer.OverflowThreshold(); n != router.SlotOverflowThreshold(256) {
		t.Errorf("threshold %d with max_num_seqs: 256 configured, want %d (the configured value, not the 4 slots learned)", n, router.SlotOverflowThreshold(256))
	}
}
