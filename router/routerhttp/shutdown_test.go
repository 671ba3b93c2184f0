package routerhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/redisstate"
	"github.com/lmwarden/warden/sim/simhttp"
)

// lockedBuffer is a log sink the router's goroutines write to while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// served is a router serving on a real loopback listener (Router.Serve) in
// front of simulated vLLM servers, until stop.
type served struct {
	rt   *Router
	url  string
	addr string
	log  *lockedBuffer
	stop context.CancelFunc
	done chan error
}

// serveSim starts n simulated vLLM servers (sim/simhttp at speed 1, model "m",
// simCfg applied to each) and a router serving them on a loopback listener,
// its config changed by mod. Its text log is kept.
func serveSim(t *testing.T, n int, simCfg func(*simhttp.Config), mod func(*Config)) *served {
	t.Helper()
	return serveOn(t, startSims(t, n, simCfg), mod)
}

// startSims starts n simulated vLLM servers (speed 1, model "m", simCfg
// applied) and returns their replica specs r0=URL, r1=URL, ...
func startSims(t *testing.T, n int, simCfg func(*simhttp.Config)) []string {
	t.Helper()
	var specs []string
	for i := range n {
		cfg := simhttp.DefaultConfig()
		cfg.Replicas, cfg.Speed, cfg.Model = 1, 1, "m"
		if simCfg != nil {
			simCfg(&cfg)
		}
		srv, err := simhttp.NewServer(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		t.Cleanup(func() { ts.Close(); srv.Close() })
		specs = append(specs, fmt.Sprintf("r%d=%s", i, ts.URL))
	}
	return specs
}

// serveOn starts a router in front of the replica specs on a loopback
// listener, its config changed by mod.
func serveOn(t *testing.T, specs []string, mod func(*Config)) *served {
	t.Helper()
	cfg, err := ConfigForURLs(specs, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Models[0].MaxNumSeqs = 32
	logs := &lockedBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if mod != nil {
		mod(&cfg)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{rt: rt, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), log: logs, stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- rt.Serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return")
		}
	})
	return s
}

// wait returns Serve's error once it has returned.
func (s *served) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("Serve did not return within %v\n%s", within, s.log.String())
		return nil
	}
}

// get answers GET path on a new connection: its status and body.
func (s *served) get(path string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get(s.url + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// streamResult is one request's answer as the client read it.
type streamResult struct {
	status  int
	header  http.Header
	body    string
	err     error
	started time.Time
	ended   time.Time
}

// send posts body to path with session key key on a connection of its own,
// reads the whole answer, and delivers it on the channel returned. headers
// receives the status once the response headers arrived (nil: not wanted).
func (s *served) send(path, key, body string, headers chan<- int) <-chan streamResult {
	out := make(chan streamResult, 1)
	go func() {
		r := streamResult{started: time.Now()}
		defer func() { r.ended = time.Now(); out <- r }()
		req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
		if err != nil {
			r.err = err
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(wire.HeaderSessionID, key)
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Do(req)
		if headers != nil {
			st := 0
			if resp != nil {
				st = resp.StatusCode
			}
			headers <- st
		}
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		r.status, r.header = resp.StatusCode, resp.Header
		b, err := io.ReadAll(resp.Body)
		r.body, r.err = string(b), err
	}()
	return out
}

// chatStream is a streamed chat request of maxTokens tokens (the simulator
// writes exactly that many when it is at most its reply length).
func chatStream(maxTokens int, text string) string {
	return fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, text)
}

func messagesStream(maxTokens int, text string) string {
	return fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, text)
}

// waitLog waits until the router's log contains want.
func (s *served) waitLog(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(guard); !strings.Contains(s.log.String(), want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, s.log.String())
		}
	}
}

// waitInFlight waits until n requests are being forwarded.
func (s *served) waitInFlight(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(guard); s.rt.Proxy().InFlight() < n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, want %d", s.rt.Proxy().InFlight(), n)
		}
	}
}

// stoppedLine is the router's last log line, "router stopped ...".
func (s *served) stoppedLine(t *testing.T) string {
	t.Helper()
	for _, l := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(l, "router stopped") {
			return l
		}
	}
	t.Fatalf("no \"router stopped\" line in the log:\n%s", s.log.String())
	return ""
}

// sseComplete reports whether an OpenAI chat stream ended normally: its
// last data event is [DONE] and no event carries an error.
func sseComplete(body string) bool {
	return strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") && !strings.Contains(body, `"error"`)
}

// At SIGTERM /ready answers 503 at once (within 100 ms) while /health stays
// 200 and the listener still serves: a request sent during drain_delay is
// answered in full, with Connection: close (a keep-alive client comes back
// through its load balancer). When drain_delay is over the
// listener refuses connections, the stream that was in flight all along
// finishes within drain_timeout, and the log counts it finished.
func TestShutdownReadyFlipsBeforeListenerCloses(t *testing.T) {
	const delay = time.Second
	s := serveSim(t, 2, nil, func(c *Config) { c.DrainDelay, c.DrainTimeout = delay, 10*time.Second })
	if st, body, err := s.get(wire.PathReady); err != nil || st != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("/ready before shutdown: %d %q %v", st, body, err)
	}
	long := s.send(wire.PathChatCompletions, "long", chatStream(120, "a long answer please"), nil)
	s.waitInFlight(t, 1)

	t0 := time.Now()
	s.stop() // what SIGTERM does to warden route's context
	var flipped time.Duration
	for {
		st, body, err := s.get(wire.PathReady)
		if err != nil {
			t.Fatalf("/ready during drain_delay: %v", err)
		}
		if st == http.StatusServiceUnavailable {
			flipped = time.Since(t0)
			var v struct{ Status, Reason string }
			if json.Unmarshal([]byte(body), &v) != nil || v.Status != "draining" || v.Reason == "" {
				t.Errorf("/ready body while draining: %q", body)
			}
			break
		}
		if time.Since(t0) > time.Second {
			t.Fatalf("/ready still %d a second after the shutdown began", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("/ready answered 503 %v after the shutdown began", flipped)
	if flipped > 100*time.Millisecond {
		t.Errorf("/ready took %v to answer 503, want within 100 ms", flipped)
	}
	if st, _, err := s.get(wire.PathHealth); err != nil || st != 200 {
		t.Errorf("/health during drain_delay: %d %v, want 200 (liveness)", st, err)
	}
	// A keep-alive client (the default transport's behaviour).
	req, _ := http.NewRequest(http.MethodPost, s.url+wire.PathChatCompletions, strings.NewReader(chatStream(8, "sent during drain_delay")))
	req.Header.Set(wire.HeaderSessionID, "during")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatalf("request sent during drain_delay: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !sseComplete(string(body)) {
		t.Fatalf("request sent during drain_delay: %d %v %q", resp.StatusCode, err, body)
	}
	if since := time.Since(t0); since >= delay {
		t.Fatalf("the drain_delay request ended %v after the shutdown began, not within drain_delay %v", since, delay)
	}
	if !resp.Close {
		t.Errorf("response during drain_delay: Connection %q, want close", resp.Header.Get("Connection"))
	}
	// After drain_delay: no new connection, while the long stream goes on.
	time.Sleep(time.Until(t0.Add(delay + 300*time.Millisecond)))
	if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the listener still accepts %v after the shutdown began (drain_delay %v)", time.Since(t0), delay)
	}
	if s.rt.Proxy().InFlight() != 1 {
		t.Fatalf("the long stream is not in flight after drain_delay (%d in flight): make it longer", s.rt.Proxy().InFlight())
	}
	r := <-long
	if r.err != nil || r.status != 200 || !sseComplete(r.body) {
		t.Fatalf("stream in flight at shutdown: %d %v, body ends %q", r.status, r.err, tail(r.body))
	}
	if err := s.wait(t, 5*time.Second); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Logf("the long stream ended %v after the shutdown began", r.ended.Sub(t0))
	line := s.stoppedLine(t)
	if !strings.Contains(line, "finished=1 cut_at_drain_timeout=0 held_refused=0") {
		t.Errorf("log line: %s", line)
	}
	if st := s.rt.Proxy().DrainStats(); st != (DrainStats{Finished: 1}) {
		t.Errorf("drain stats %+v", st)
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

// Streams longer than drain_timeout are cut: each ends with its API's error
// event (OpenAI data {"error"} then [DONE], Anthropic event: error
// overloaded_error), the log line counts both as cut, Serve's error wraps
// ErrDrainCut, and the replica is not blamed (no "stream broke" warning, no
// failure counted against it).
func TestShutdownCutsStreamsPastDrainTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	s := serveSim(t, 1, nil, func(c *Config) { c.DrainTimeout = timeout })
	chat := s.send(wire.PathChatCompletions, "c", chatStream(250, "a very long answer"), nil)
	msgs := s.send(wire.PathMessages, "a", messagesStream(250, "a very long answer too"), nil)
	s.waitInFlight(t, 2)
	time.Sleep(200 * time.Millisecond) // both streams under way
	t0 := time.Now()
	s.stop()
	rc, ra := <-chat, <-msgs
	took := time.Since(t0)
	t.Logf("cut streams returned %v after the shutdown began (drain_timeout %v)", took, timeout)
	if took < timeout || took > timeout+2*time.Second {
		t.Errorf("streams ended %v after the shutdown began, want just after drain_timeout %v", took, timeout)
	}
	if rc.status != 200 || !strings.Contains(rc.body, `"service_unavailable"`) || !strings.Contains(rc.body, "drain_timeout") ||
		!strings.HasSuffix(strings.TrimSpace(rc.body), "data: [DONE]") {
		t.Errorf("OpenAI stream cut at drain_timeout: %d, ends %q", rc.status, tail(rc.body))
	}
	if ra.status != 200 || !strings.Contains(ra.body, "event: error\ndata: ") || !strings.Contains(ra.body, `"overloaded_error"`) {
		t.Errorf("Anthropic stream cut at drain_timeout: %d, ends %q", ra.status, tail(ra.body))
	}
	err := s.wait(t, 5*time.Second)
	if !errors.Is(err, ErrDrainCut) {
		t.Errorf("Serve: %v, want ErrDrainCut", err)
	}
	line := s.stoppedLine(t)
	t.Log(line)
	if !strings.Contains(line, "finished=0 cut_at_drain_timeout=2 held_refused=0") {
		t.Errorf("log line: %s", line)
	}
	if strings.Contains(s.log.String(), "stream broke") || strings.Contains(s.log.String(), "ejected") {
		t.Errorf("a cut stream was blamed on the replica:\n%s", s.log.String())
	}
	if rep := s.rt.Status().Models[0].Replicas[0]; !rep.Healthy {
		t.Errorf("replica after the cut: %+v", rep)
	}
}

// A request held by admission (fit, a replica whose KV cache holds one of the
// two conversations) gets, when the shutdown begins (drain_delay 0), an
// API-shaped 503 with Retry-After at once, while the admitted stream goes on
// and finishes: OpenAI service_unavailable, Anthropic overloaded_error; one
// whose response was committed while held (kept alive) gets the error event
// instead. The log counts them as refused.
func TestShutdownRefusesHeldRequests(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepAlive time.Duration // the gate's keepalive_after
	}{
		{"silent", -1},
		{"kept alive", time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serveSim(t, 1, func(c *simhttp.Config) {
				c.NumGPUBlocks = 200 // (200-1) x 16 = 3,184 tokens of KV cache
			}, func(c *Config) {
				c.ScrapeInterval = 100 * time.Millisecond
				c.Models[0].Admission = AdmissionYAML(router.AdmissionConfig{Mode: router.AdmissionFit, MaxHold: -1, KeepAliveAfter: tc.keepAlive})
			})
			for deadline := time.Now().Add(guard); s.rt.Status().Models[0].Replicas[0].KVCapacityTokens == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the router never learned the replica's KV capacity")
				}
			}
			capTokens := int(s.rt.Status().Models[0].Replicas[0].KVCapacityTokens)
			// Each first prompt is 60 % of the cache at the router's estimate
			// (router.BytesPerTokenEstimate bytes per token): one fits, two do not.
			text := func(w string) string {
				return strings.Repeat(w+" ", capTokens*6/10*router.BytesPerTokenEstimate/(len(w)+1))
			}
			first := s.send(wire.PathChatCompletions, "first", chatStream(100, text("first")), nil)
			s.waitInFlight(t, 1)
			chat := s.send(wire.PathChatCompletions, "second", chatStream(8, text("second")), nil)
			msgs := s.send(wire.PathMessages, "third", messagesStream(8, text("third")), nil)
			b := s.rt.Pools()[0].Balancer
			for deadline := time.Now().Add(guard); b.Admission().Queue != 2; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("queue %d, want the 2 new conversations held", b.Admission().Queue)
				}
			}
			if tc.keepAlive > 0 {
				time.Sleep(2 * router.HoldPoll) // past keepalive_after: both committed
			}
			t0 := time.Now()
			s.stop()
			rc, rm := <-chat, <-msgs
			took := time.Since(t0)
			t.Logf("held requests answered %v after the shutdown began", took)
			if took > 500*time.Millisecond {
				t.Errorf("held requests answered %v after the shutdown began, want at once", took)
			}
			if tc.keepAlive < 0 {
				for _, r := range []struct {
					res  streamResult
					want string
				}{{rc, `"type":"service_unavailable"`}, {rm, `"type":"overloaded_error"`}} {
					if r.res.status != http.StatusServiceUnavailable || r.res.header.Get("Retry-After") != "1" || !strings.Contains(r.res.body, r.want) {
						t.Errorf("held request at shutdown: %d Retry-After %q %q, want 503, Retry-After 1, %s", r.res.status, r.res.header.Get("Retry-After"), r.res.body, r.want)
					}
				}
			} else {
				if rc.status != 200 || rc.header.Get(wire.HeaderAdmission) != wire.AdmissionWaiting ||
					!strings.Contains(rc.body, ": keep-alive") || !strings.Contains(rc.body, `"service_unavailable"`) {
					t.Errorf("kept-alive OpenAI request at shutdown: %d %v %q", rc.status, rc.header, rc.body)
				}
				if rm.status != 200 || !strings.Contains(rm.body, "event: ping") || !strings.Contains(rm.body, "event: error") || !strings.Contains(rm.body, `"overloaded_error"`) {
					t.Errorf("kept-alive Anthropic request at shutdown: %d %q", rm.status, rm.body)
				}
			}
			if st := b.Admission(); st.Queue != 0 {
				t.Errorf("queue after the shutdown: %d", st.Queue)
			}
			r := <-first
			if r.err != nil || r.status != 200 || !sseComplete(r.body) {
				t.Fatalf("admitted stream at shutdown: %d %v, ends %q", r.status, r.err, tail(r.body))
			}
			if err := s.wait(t, 10*time.Second); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if line := s.stoppedLine(t); !strings.Contains(line, "finished=1 cut_at_drain_timeout=0 held_refused=2") {
				t.Errorf("log line: %s", line)
			}
			var out bytes.Buffer
			s.rt.Metrics().Handler().ServeHTTP(httptestRecorder(&out), httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if !strings.Contains(out.String(), MetricAdmissionOutcomes+`{model="*",outcome="shutdown"} 2`) {
				t.Errorf("metrics: no 2 shutdown outcomes:\n%s", grepLines(out.String(), MetricAdmissionOutcomes))
			}
		})
	}
}

// httptestRecorder is a ResponseWriter writing its body to w.
func httptestRecorder(w *bytes.Buffer) http.ResponseWriter {
	rec := httptest.NewRecorder()
	rec.Body = w
	return rec
}

// /ready answers 503 "degraded", naming the model, while a model has no
// healthy replica (as /health does), and 200 "ready" again once one is back.
func TestReadyDegradedWithoutHealthyReplica(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"))
	get := func(path string) (int, string) {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		f.waitDone(t)
		return resp.StatusCode, string(b)
	}
	if st, body := get(wire.PathReady); st != 200 || !strings.Contains(body, `"status": "ready"`) {
		t.Fatalf("/ready: %d %s", st, body)
	}
	f.pool().Balancer.SetHealthy(0, false)
	st, body := get(wire.PathReady)
	var v struct {
		Status, Reason string
		Models         []modelHealth
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || st != 503 || v.Status != "degraded" || !strings.Contains(v.Reason, `"*"`) ||
		len(v.Models) != 1 || v.Models[0].Healthy != 0 || v.Models[0].Total != 1 {
		t.Errorf("/ready without a healthy replica: %d %s", st, body)
	}
	if st, body := get(wire.PathHealth); st != 503 || !strings.Contains(body, `"degraded"`) {
		t.Errorf("/health without a healthy replica: %d %s", st, body)
	}
	if st, body := get(wire.PathLive); st != 200 || !strings.Contains(body, `"alive"`) {
		t.Errorf("/livez without a healthy replica: %d %s (a liveness probe would restart the router)", st, body)
	}
	f.pool().Balancer.SetHealthy(0, true)
	if st, _ := get(wire.PathReady); st != 200 {
		t.Errorf("/ready with the replica back: %d", st)
	}
}

// With shared state, a router that shuts down keeps its part of it alive to
// the end and deletes nothing a live conversation needs: while its last
// stream drains (past the store's KeyTTL after the signal) another router
// still counts that stream on its replica, and after the exit the other
// router serves the conversation's next turn on the same replica (sticky:
// the home survived), with no in-flight count of the first router left.
func TestShutdownKeepsSharedState(t *testing.T) {
	redis := testredis.Start(t)
	specs := startSims(t, 2, nil)
	withState := func(c *Config) {
		c.State = redis.URL()
		c.Models[0].OverflowThreshold = 8
	}
	a := serveOn(t, specs, func(c *Config) { withState(c); c.DrainTimeout = 10 * time.Second })
	b := serveOn(t, specs, withState)
	first := <-a.send(wire.PathChatCompletions, "conv", chatStream(4, "turn one"), nil)
	if first.err != nil || first.status != 200 || first.header.Get(wire.HeaderDecision) != "placed" {
		t.Fatalf("first turn through a: %d %v %v", first.status, first.err, first.header)
	}
	home := first.header.Get(wire.HeaderReplica)
	long := a.send(wire.PathChatCompletions, "conv", chatStream(140, "turn two, a long answer"), nil)
	a.waitInFlight(t, 1)
	t0 := time.Now()
	a.stop()
	idx := map[string]int{"r0": 0, "r1": 1}[home]
	bState := b.rt.states[b.rt.Pools()[0]]
	// Past the KeyTTL after the signal, a's stream still counts in b's view.
	time.Sleep(redisstate.DefaultKeyTTL + 500*time.Millisecond)
	if a.rt.Proxy().InFlight() != 1 {
		t.Fatalf("a's stream ended %v after the signal, before the check: make it longer", time.Since(t0))
	}
	if n := bState.Remote(idx).InFlight; n != 1 {
		t.Errorf("%v after a's signal, b counts %d of a's requests on %s, want 1 (a's heartbeat stopped?)", time.Since(t0), n, home)
	}
	if r := <-long; r.err != nil || r.status != 200 || !sseComplete(r.body) {
		t.Fatalf("a's stream in flight at shutdown: %d %v %q", r.status, r.err, tail(r.body))
	}
	if err := a.wait(t, 5*time.Second); err != nil {
		t.Fatalf("a's Serve: %v", err)
	}
	next := <-b.send(wire.PathChatCompletions, "conv", chatStream(4, "turn three"), nil)
	if next.status != 200 || next.header.Get(wire.HeaderReplica) != home || next.header.Get(wire.HeaderDecision) != "sticky" {
		t.Errorf("next turn through b after a's exit: %d %s %s, want 200 on %s sticky", next.status,
			next.header.Get(wire.HeaderReplica), next.header.Get(wire.HeaderDecision), home)
	}
	if n := bState.Remote(idx).InFlight; n != 0 {
		t.Errorf("after a's exit b still counts %d of a's requests on %s", n, home)
	}
}

// drain_delay and drain_timeout: negative is an error at its line; absent,
// drain_timeout is DefaultDrainTimeout and drain_delay 0.
func TestDrainConfig(t *testing.T) {
	cfg, err := parseConfig([]byte("drain_delay: -1s\ndrain_timeout: -2s\nmodels:\n  - name: m\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "r.yaml:1: drain_delay: -1s is negative") || !strings.Contains(err.Error(), "r.yaml:2: drain_timeout: -2s is negative") {
		t.Errorf("negative drain settings: %v", err)
	}
	cfg, err = parseConfig([]byte("models:\n  - name: m\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.WithDefaults(); d.DrainDelay != 0 || d.DrainTimeout != DefaultDrainTimeout {
		t.Errorf("defaults: drain_delay %v drain_timeout %v", d.DrainDelay, d.DrainTimeout)
	}
}
