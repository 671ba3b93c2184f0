package loadgenhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// stubServer is a fake vLLM DP server with two engines behind one URL (replicas
// r0 and r1), speaking both APIs. It checks on every turn that the conversation
// extends the session's previous turn plus the reply it streamed (prefix
// stability as the server sees it) and keeps per-engine counters for /metrics.
type stubServer struct {
	t *testing.T

	mu          sync.Mutex
	last        map[string][]loadgen.Message // session key -> messages of its last turn + reply
	violations  []string
	turns       int
	resets      int
	keys        map[string]bool
	prompt, gen [2]float64
	queries     [2]float64
	hits        [2]float64
	running     [2]int
	// hang, if set, makes a turn hang until the client goes away.
	hang func(key string, turn int) bool
	// metrics, if set, replaces the /metrics body.
	metrics string
}

func newStub(t *testing.T) (*stubServer, *httptest.Server) {
	s := &stubServer{t: t, last: map[string][]loadgen.Message{}, keys: map[string]bool{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func engineOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % 2)
}

func (s *stubServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		io.WriteString(w, `{"object":"list","data":[{"id":"stub-model","object":"model"}]}`)
	case "/reset_prefix_cache":
		s.mu.Lock()
		s.resets++
		s.mu.Unlock()
	case "/metrics":
		s.writeMetrics(w)
	case "/v1/chat/completions":
		s.chat(w, r, false)
	case "/v1/messages":
		s.chat(w, r, true)
	default:
		http.NotFound(w, r)
	}
}

func (s *stubServer) writeMetrics(w http.ResponseWriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metrics != "" {
		io.WriteString(w, s.metrics)
		return
	}
	series := []struct {
		name, typ string
		val       func(e int) float64
	}{
		{vllmmetrics.NumRequestsRunning, "gauge", func(e int) float64 { return float64(s.running[e]) }},
		{vllmmetrics.NumRequestsWaiting, "gauge", func(int) float64 { return 0 }},
		{vllmmetrics.KVCacheUsagePerc, "gauge", func(e int) float64 { return float64(s.running[e]) / 32 }},
		{vllmmetrics.PrefixCacheQueries, "counter", func(e int) float64 { return s.queries[e] }},
		{vllmmetrics.PrefixCacheHits, "counter", func(e int) float64 { return s.hits[e] }},
		{vllmmetrics.PromptTokens, "counter", func(e int) float64 { return s.prompt[e] }},
		{vllmmetrics.GenerationTokens, "counter", func(e int) float64 { return s.gen[e] }},
		{vllmmetrics.NumPreemptions, "counter", func(int) float64 { return 0 }},
	}
	for _, se := range series {
		base := strings.TrimSuffix(se.name, "_total")
		fmt.Fprintf(w, "# HELP %s stub\n# TYPE %s %s\n", base, base, se.typ)
		for e := range 2 {
			fmt.Fprintf(w, "%s{engine=\"%d\",model_name=\"stub-model\"} %g\n", se.name, e, se.val(e))
		}
	}
}

func (s *stubServer) chat(w http.ResponseWriter, r *http.Request, anthropic bool) {
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("X-Claude-Code-Session-Id")
	var msgs []loadgen.Message
	for _, m := range body.Messages {
		if m.Role == "system" {
			continue
		}
		var text string
		if anthropic {
			var blocks []anthropicBlock
			json.Unmarshal(m.Content, &blocks)
			for _, b := range blocks {
				text += b.Text
			}
		} else {
			json.Unmarshal(m.Content, &text)
		}
		msgs = append(msgs, loadgen.Message{Role: m.Role, Content: text})
	}
	turn := len(msgs) / 2
	e := engineOf(key)
	reply := fmt.Sprintf("reply %d of %s", turn, key[:8])
	words := strings.Fields(reply)
	promptWords := 0
	for _, m := range msgs {
		promptWords += len(strings.Fields(m.Content))
	}

	s.mu.Lock()
	s.turns++
	s.keys[key] = true
	prev, seen := s.last[key]
	switch {
	case key == "":
		s.violations = append(s.violations, "request without session header")
	case !seen && len(msgs) != 1:
		s.violations = append(s.violations, fmt.Sprintf("%s: first request has %d messages", key, len(msgs)))
	case seen && (len(msgs) != len(prev)+1 || !slices.Equal(msgs[:len(prev)], prev)):
		s.violations = append(s.violations, fmt.Sprintf("%s: turn %d does not extend the previous turn + reply", key, turn))
	}
	s.last[key] = append(slices.Clone(msgs), loadgen.Message{Role: "assistant", Content: reply})
	s.prompt[e] += float64(promptWords)
	s.queries[e] += float64(promptWords)
	if seen {
		s.hits[e] += float64(promptWords - len(strings.Fields(msgs[len(msgs)-1].Content)))
	}
	s.gen[e] += float64(len(words))
	s.running[e]++
	hang := s.hang != nil && s.hang(key, turn)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running[e]--
		s.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set(wire.HeaderReplica, fmt.Sprintf("r%d", e))
	fl := w.(http.Flusher)
	if hang {
		fl.Flush()
		<-r.Context().Done()
		return
	}
	if anthropic {
		io.WriteString(w, sseNamed("message_start", fmt.Sprintf(`{"type":"message_start","message":{"usage":{"input_tokens":%d,"output_tokens":0}}}`, promptWords)))
		for i, wd := range words {
			if i > 0 {
				wd = " " + wd
			}
			b, _ := json.Marshal(wd)
			io.WriteString(w, sseNamed("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(b)+`}}`))
			fl.Flush()
		}
		io.WriteString(w, sseNamed("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":%d,"output_tokens":%d}}`, promptWords, len(words)),
			"message_stop", `{"type":"message_stop"}`))
		return
	}
	io.WriteString(w, sseOpenAI(roleChunk))
	fl.Flush()
	for i, wd := range words {
		if i > 0 {
			wd = " " + wd
		}
		io.WriteString(w, sseOpenAI(content(wd)))
		fl.Flush()
	}
	io.WriteString(w, sseOpenAI(finishChunk, fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, promptWords, len(words)), "[DONE]"))
}

func runScenario() *loadgen.Scenario {
	sc := loadgen.TinyScenario()
	sc.Stages = []int{2, 4}
	sc.StageDuration = 4 * time.Second
	sc.ThinkTime = 200 * time.Millisecond
	sc.RequestTimeout = time.Minute
	return sc
}

func stubReplicas(url string) []ReplicaMetrics {
	return []ReplicaMetrics{
		{Name: "r0", URL: url + "/metrics", Engine: "0"},
		{Name: "r1", URL: url + "/metrics", Engine: "1"},
	}
}

func TestRunAgainstStubServer(t *testing.T) {
	for _, api := range []string{loadgen.APIOpenAIChat, loadgen.APIAnthropicMessages} {
		t.Run(api, func(t *testing.T) {
			stub, srv := newStub(t)
			sc := runScenario()
			sc.API = api
			dir := filepath.Join(t.TempDir(), "run")
			var affinity []bool
			var progress strings.Builder
			m, err := Run(context.Background(), RunConfig{
				Scenario:    sc,
				BaseURL:     srv.URL,
				Clock:       simclock.NewScaled(50),
				Replicas:    stubReplicas(srv.URL),
				ResetURLs:   []string{srv.URL},
				SetAffinity: func(_ context.Context, on bool) error { affinity = append(affinity, on); return nil },
				ResultsDir:  dir,
				Progress:    &progress,
				RunID:       "test-run",
				Policy:      "sticky",
			})
			if err != nil {
				t.Fatal(err)
			}
			if m.Interrupted || len(m.Variants) != 2 || !m.Variants[0].Complete || !m.Variants[1].Complete {
				t.Fatalf("manifest: interrupted %v, %d variants", m.Interrupted, len(m.Variants))
			}
			if !slices.Equal(affinity, []bool{false, true}) || stub.resets != 2 {
				t.Errorf("affinity calls %v, resets %d", affinity, stub.resets)
			}
			if m.Scenario.Model != "stub-model" || m.Speed != 50 || !slices.Equal(m.Replicas, []string{"r0", "r1"}) {
				t.Errorf("manifest model %q speed %v replicas %v", m.Scenario.Model, m.Speed, m.Replicas)
			}
			stub.mu.Lock()
			if len(stub.violations) > 0 {
				t.Errorf("server saw %d prefix violations, first: %s", len(stub.violations), stub.violations[0])
			}
			stub.mu.Unlock()

			rm, turns, series, err := loadgen.ReadResults(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rm.RunID != "test-run" || len(rm.Variants) != 2 {
				t.Errorf("manifest read back: %q, %d variants", rm.RunID, len(rm.Variants))
			}
			if err := rm.Check(); err != nil {
				t.Error(err)
			}
			// Every written turn completed; per variant, the manifest's Completed
			// and the turns attributed by Done agree (same stage rule).
			byVariant := map[string][]loadgen.Result{}
			for _, r := range turns {
				if !r.OK() {
					t.Errorf("turn failed: %s", r.Err)
				}
				if r.Replica != fmt.Sprintf("r%d", engineOf(r.SessionKey)) {
					t.Errorf("replica %q for key %s", r.Replica, r.SessionKey)
				}
				// Events read in one Read share its instant, so FirstToken may equal
				// FirstEvent (the role-only chunk is kept apart in stream_test.go).
				if r.Sent < r.Intended || r.FirstEvent == 0 || r.FirstToken < r.FirstEvent || r.LastToken < r.FirstToken ||
					r.Done < r.LastToken || r.OutputTokens != 4 {
					t.Errorf("instants/tokens: intended %v sent %v first event %v first token %v last %v done %v out %d",
						r.Intended, r.Sent, r.FirstEvent, r.FirstToken, r.LastToken, r.Done, r.OutputTokens)
				}
				byVariant[r.Variant] = append(byVariant[r.Variant], r)
			}
			for _, v := range rm.Variants {
				for i, w := range v.Stages {
					n := 0
					for _, r := range byVariant[v.Name] {
						if r.Done >= w.Start && r.Done < w.End {
							n++
						}
					}
					if n != w.Completed || n == 0 {
						t.Errorf("variant %s stage %d: manifest completed %d, turns.jsonl has %d", v.Name, i, w.Completed, n)
					}
				}
			}
			// Each variant presents its sessions under keys of its own.
			offKeys := map[string]bool{}
			for _, r := range byVariant["off"] {
				offKeys[r.SessionKey] = true
			}
			for _, r := range byVariant["on"] {
				if offKeys[r.SessionKey] {
					t.Fatalf("key %s used in both variants", r.SessionKey)
				}
			}
			// Series: a sample per replica at or before each variant's start, then
			// roughly one per simulated second.
			for _, v := range rm.Variants {
				var before, total int
				for _, s := range series {
					if s.Variant == v.Name {
						total++
						if s.T <= v.Stages[0].Start {
							before++
						}
					}
				}
				if before < 2 || total < 6 {
					t.Errorf("variant %s: %d samples at or before start, %d in all", v.Name, before, total)
				}
			}
			for _, name := range []string{loadgen.TurnsFile, loadgen.SeriesFile, loadgen.ManifestFile} {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Error(err)
				}
			}
			leftovers, _ := filepath.Glob(filepath.Join(dir, "*.partial"))
			if len(leftovers) > 0 {
				t.Errorf("partial files left: %v", leftovers)
			}
			if !strings.Contains(progress.String(), "[off] stage 2/2 (4 sessions) done") {
				t.Errorf("progress lacks the stage line:\n%s", progress.String())
			}
			// A stage's "done" line counts that stage's turns and finished
			// sessions only (as summary.md does), not the variant's so far.
			for _, v := range rm.Variants {
				for i, w := range v.Stages {
					done := 0
					for _, r := range byVariant[v.Name] {
						if r.LastTurn && r.Done >= w.Start && r.Done < w.End {
							done++
						}
					}
					want := fmt.Sprintf("[%s] stage %d/%d (%d sessions) done  t=", v.Name, i+1, len(v.Stages), w.Sessions)
					line := ""
					for _, l := range strings.Split(progress.String(), "\n") {
						if strings.HasPrefix(l, want) {
							line = l
						}
					}
					if !strings.Contains(line, fmt.Sprintf("turns ok %d failed 0", w.Completed)) || !strings.Contains(line, fmt.Sprintf("sessions done %d ", done)) {
						t.Errorf("variant %s stage %d: progress %q, want turns ok %d and sessions done %d", v.Name, i, line, w.Completed, done)
					}
				}
			}
		})
	}
}

// docs/bench.md failure case 5 through the runner: turns that never end are canceled at the end of
// the variant and counted in flight; the accounting still adds up.
func TestRunCountsHungTurnsInFlight(t *testing.T) {
	stub, srv := newStub(t)
	stub.hang = func(key string, turn int) bool { return turn == 1 && engineOf(key) == 0 }
	sc := runScenario()
	sc.Variants = []string{"on"}
	dir := t.TempDir()
	m, err := Run(context.Background(), RunConfig{
		Scenario: sc, BaseURL: srv.URL, Clock: simclock.NewScaled(50),
		Replicas: stubReplicas(srv.URL), ResultsDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	last := m.Variants[0].Stages[len(m.Variants[0].Stages)-1]
	if last.InFlight == 0 {
		t.Fatalf("no turn in flight at the end: %+v", last)
	}
	if err := m.Check(); err != nil {
		t.Error(err)
	}
	_, turns, _, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range turns {
		if r.Turn == 1 && engineOf(r.SessionKey) == 0 {
			t.Errorf("hung turn written as %+v", r)
		}
	}
}

// Ctrl-C: the run stops, writes what completed and marks the manifest interrupted.
func TestRunInterruptWritesCompletedStages(t *testing.T) {
	_, srv := newStub(t)
	sc := runScenario()
	sc.StageDuration = time.Minute // long: the interrupt comes first
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	n := 0
	m, err := Run(ctx, RunConfig{
		Scenario: sc, BaseURL: srv.URL, Clock: simclock.NewScaled(50),
		Replicas: stubReplicas(srv.URL), ResultsDir: dir,
		OnResult: func(loadgen.Result) {
			if n++; n == 20 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if m == nil || !m.Interrupted || len(m.Variants) != 1 || m.Variants[0].Complete {
		t.Fatalf("manifest %+v", m)
	}
	if err := m.Check(); err != nil {
		t.Error(err)
	}
	rm, turns, _, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rm.Interrupted || len(turns) < 20 {
		t.Errorf("read back: interrupted %v, %d turns", rm.Interrupted, len(turns))
	}
	st := rm.Variants[0].Stages[len(rm.Variants[0].Stages)-1]
	if st.Complete || st.End-st.Start >= time.Minute {
		t.Errorf("cut stage %+v", st)
	}
}

// docs/bench.md failure case 4: a required series missing fails the run at the first scrape,
// naming the series, before any load is sent.
func TestMissingSeriesFailsRun(t *testing.T) {
	stub, srv := newStub(t)
	// The real vLLM 0.10.0 excerpt lacks the running/waiting gauges, among others.
	stub.metrics = readFixture(t, "vllm-metrics-v1-0.10.0-engine0-excerpt.txt")
	_, err := Run(context.Background(), RunConfig{
		Scenario: runScenario(), BaseURL: srv.URL, Clock: simclock.NewScaled(50),
		Replicas: []ReplicaMetrics{{Name: "r0", URL: srv.URL + "/metrics", Engine: "0"}},
	})
	if !errors.Is(err, vllmmetrics.ErrMissingSeries) || !strings.Contains(err.Error(), vllmmetrics.NumRequestsRunning) {
		t.Fatalf("err %v: want ErrMissingSeries naming %s", err, vllmmetrics.NumRequestsRunning)
	}
	if stub.turns != 0 {
		t.Errorf("%d turns sent before the metrics check", stub.turns)
	}
}

func TestRunAbortsOnConsecutiveFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "model not found", http.StatusNotFound)
	}))
	defer srv.Close()
	sc := runScenario()
	sc.Model = "nope"
	sc.FailureBackoff = 10 * time.Millisecond
	// Long stages: the streak, not the stages' end, must end the run, also when a
	// loaded machine delays the turns (at 50x, 4 s stages were 80 ms of wall time).
	sc.StageDuration = 10 * time.Minute
	m, err := Run(context.Background(), RunConfig{
		Scenario: sc, BaseURL: srv.URL, Clock: simclock.NewScaled(50), MaxConsecutiveFailures: 10,
	})
	if !errors.Is(err, ErrTooManyFailures) || !strings.Contains(err.Error(), "model not found") {
		t.Fatalf("err %v", err)
	}
	if m == nil || len(m.Variants) != 1 {
		t.Fatalf("manifest %+v", m)
	}
	if err := m.Check(); err != nil {
		t.Error(err)
	}
}
