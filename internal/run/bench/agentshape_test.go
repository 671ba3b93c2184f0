package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Shape agent over HTTP: synthesized trees through the embedded router to
// simulator replicas behind header-recording proxies; every subagent call
// carries its agent id beside its session's id, and the calls in turns.jsonl
// (plus those in flight at the end) are the requests the replicas got, none
// failed.
func TestAgentShapeHTTP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 2, Profile: DefaultProfile, Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log := &headerLog{}
	urls := recordingProxies(t, cl.URLs(), log)
	sc, err := loadgen.ParseScenario([]byte(`
shape: agent
seed: 2
stages: [3]
stage_duration: 15s
variants: ["on"]
agent:
  token_scale: 0.125
  max_gap: 200ms
  fan_out: 0.3
`), "agent-http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Name = "agent-http"
	o := Options{Replicas: urls, Scenario: sc, OutDir: filepath.Join(t.TempDir(), "run"), RunID: "agent-http"}
	var progress strings.Builder
	o.Progress = &progress
	if _, err := Run(ctx, o); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	m, results, _, err := loadgen.ReadResults(o.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	sub := 0
	for _, r := range results {
		if !r.OK() {
			t.Errorf("call %+v failed: %d %s", r.Trace.Agent, r.Status, r.Err)
		}
		if r.Trace.Agent.Agent != "" {
			sub++
		}
	}
	agentReqs := 0
	for _, h := range log.seen {
		if h.Get(wire.HeaderClaudeSession) == "" {
			t.Errorf("a request without a session id: %v", h)
		}
		if h.Get(wire.HeaderClaudeAgent) != "" {
			agentReqs++
		}
	}
	// Calls in flight when the variant ended have no record, and may not have
	// reached a replica yet.
	st := m.Variants[0].Stages
	open := st[len(st)-1].InFlight
	if sub == 0 || agentReqs < sub || agentReqs > sub+open || len(log.seen) < len(results) || len(log.seen) > len(results)+open {
		t.Errorf("turns.jsonl: %d calls, %d of subagents, %d in flight at the end; the replicas got %d requests, %d with an agent id",
			len(results), sub, open, len(log.seen), agentReqs)
	}
	if rep := m.AgentTraces[0]; rep.Format != loadgen.FormatSynthesized || rep.Sent != len(results)+open || m.TraceCalibration == nil {
		t.Errorf("replay %+v, calibration %+v with %d results", rep, m.TraceCalibration, len(results))
	}
}

// recordingProxies puts a reverse proxy before each of urls that records the
// headers of every chat request in log; it returns the proxies' URLs.
func recordingProxies(t *testing.T, urls []string, log *headerLog) []string {
	t.Helper()
	var out []string
	for _, u := range urls {
		target, _ := url.Parse(u)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == wire.PathChatCompletions {
				log.mu.Lock()
				log.seen = append(log.seen, r.Header.Clone())
				log.mu.Unlock()
			}
			// The body read whole first: streamed through, a few calls
			// (2 to 6 of ~490 in TestAgentShapeHTTP, and one of trace_0277's
			// under the package's parallel load) failed at their start with
			// "use of closed network connection" in this proxy, none
			// without the proxy.
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		out = append(out, srv.URL)
	}
	return out
}
