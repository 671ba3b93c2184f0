package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim/simhttp"
)

// agentScale maps Claude Code's 200k-token window onto 25k, inside the
// reference fleet's 32,768-token max_model_len (docs/traces.md, "Agent
// sessions").
const agentScale = 0.125

// recount is what the session files hold, counted here from the raw JSON
// (not by loadgen/agent): calls and subagents, and the scaled token sums of
// the calls that fit maxModelLen.
type recount struct {
	calls, subagents, skipped int
	in, out                   int64
}

// recountDir walks every *.json of dir as generic JSON. Scaling by 1/8:
// whole 64-token blocks become 8 tokens, the tail and the output are divided
// by 8, rounded half up (output at least 1).
func recountDir(t *testing.T, dir string, maxModelLen int) recount {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var rc recount
	var walk func(reqs []any)
	walk = func(reqs []any) {
		for _, x := range reqs {
			r := x.(map[string]any)
			if r["type"] == "subagent" {
				rc.subagents++
				walk(r["requests"].([]any))
				continue
			}
			in, out := int64(r["in"].(float64)), int64(r["out"].(float64))
			sin := in/64*8 + (in%64+4)/8
			sout := max(1, (out+4)/8)
			if sin+sout > int64(maxModelLen) {
				rc.skipped++
				continue
			}
			rc.calls++
			rc.in += sin
			rc.out += sout
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		walk(doc["requests"].([]any))
	}
	return rc
}

func runAgentBench(t *testing.T, path string, o Options, spec loadgen.TraceSpec) (*loadgen.Manifest, []loadgen.Result) {
	t.Helper()
	sc := loadgen.DefaultScenario()
	sc.Name, sc.Variants = "agents", []string{"on"}
	spec.File, spec.Path, spec.Format = path, path, loadgen.FormatClaudeCode
	sc.Trace = &spec
	o.Scenario, o.OutDir, o.RunID = sc, filepath.Join(t.TempDir(), "agents"), "agents"
	var progress strings.Builder
	o.Progress = &progress
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	m, results, _, err := loadgen.ReadResults(o.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.AgentTraces) != 1 {
		t.Fatalf("manifest agent_traces %+v", m.AgentTraces)
	}
	return m, results
}

// All 69 sessions on the reference fleet in virtual time: every call is in
// turns.jsonl (or counted as skipped over max_model_len), and the calls,
// subagents and token sums equal a recount from the JSON files.
func TestAgentReplayAllSessionsVirtual(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: replays 69 sessions")
	}
	dir := filepath.Dir(sharedtrace.Path(t, "claude-code/trace_0277.json"))
	m, results := runAgentBench(t, dir, Options{Virtual: true, SimReplicas: 4, Profile: DefaultProfile},
		loadgen.TraceSpec{TokenScale: agentScale, MaxGap: time.Minute})
	rep := m.AgentTraces[0]
	want := recountDir(t, dir, rep.MaxModelLen)
	var got recount
	agents := map[[2]string]bool{}
	for _, r := range results {
		a := r.Trace.Agent
		if !r.OK() {
			t.Errorf("call %s/%s#%d failed: %d %s", a.File, a.Agent, a.Call, r.Status, r.Err)
		}
		got.calls++
		got.in += int64(r.Trace.InputLength)
		got.out += int64(r.Trace.OutputLength)
		if a.Agent != "" {
			agents[[2]string{a.File, a.Agent}] = true
		}
		if r.PromptTokens != r.Trace.InputLength || r.OutputTokens != r.Trace.OutputLength {
			t.Errorf("call %s/%s#%d: %d prompt / %d output tokens, want %d / %d", a.File, a.Agent, a.Call,
				r.PromptTokens, r.OutputTokens, r.Trace.InputLength, r.Trace.OutputLength)
		}
	}
	got.subagents, got.skipped = len(agents), rep.SkippedOverLength
	if got != want {
		t.Errorf("turns.jsonl %+v, recount from the files %+v", got, want)
	}
	if rep.Plays != 69 || rep.PlaysEnded != 69 || rep.NotSent != 0 || !m.Variants[0].Complete {
		t.Errorf("replay %+v, variant complete %v: want 69 plays ended, none unsent", rep, m.Variants[0].Complete)
	}
	t.Logf("%d calls, %d subagents, %d skipped over %d tokens; %d + %d tokens", got.calls, got.subagents, got.skipped, rep.MaxModelLen, got.in, got.out)
}

type span struct{ first, last time.Duration }

// trace_0277: the three Explore subagents spawned by the first parent call
// overlap in time, and the parent's second call is sent only after the last of
// them ended.
func TestAgentReplay0277SiblingsOverlap(t *testing.T) {
	t.Parallel()
	path := sharedtrace.Path(t, "claude-code/trace_0277.json")
	_, results := runAgentBench(t, path, Options{Virtual: true, SimReplicas: 4, Profile: DefaultProfile},
		loadgen.TraceSpec{TokenScale: agentScale})
	spans := map[string]*span{}
	var parent2 time.Duration
	for _, r := range results {
		a := r.Trace.Agent
		if a.Agent == "" {
			if a.Call == 1 {
				parent2 = r.Sent
			}
			continue
		}
		s := spans[a.Agent]
		if s == nil {
			s = &span{first: r.Sent, last: r.Done}
			spans[a.Agent] = s
		}
		s.first, s.last = min(s.first, r.Sent), max(s.last, r.Done)
	}
	sibs := []string{"agent_001", "agent_002", "agent_003"}
	var lastEnd time.Duration
	for i, a := range sibs {
		s := spans[a]
		if s == nil {
			t.Fatalf("no call of %s in turns.jsonl", a)
		}
		lastEnd = max(lastEnd, s.last)
		for _, b := range sibs[i+1:] {
			if o := spans[b]; o == nil || o.first >= s.last || s.first >= o.last {
				t.Errorf("%s %v and %s %v do not overlap", a, *s, b, o)
			}
		}
	}
	if parent2 < lastEnd {
		t.Errorf("the parent's second call was sent at %v, before the last sibling ended at %v", parent2, lastEnd)
	}
	if p := spans["agent_004"]; p == nil || p.first < parent2 {
		t.Errorf("the Plan subagent %v should run after the parent's second call (%v)", p, parent2)
	}
}

// headerLog records the Claude Code headers of every request a replica got.
type headerLog struct {
	mu   sync.Mutex
	seen []http.Header
}

// Over HTTP: trace_0277 through the embedded router to simulator replicas,
// each behind a reverse proxy that records the headers it got; every call of
// a subagent carries its agent id beside the parent's session id.
func TestAgentReplayHTTPAgentHeader(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world")
	}
	path := sharedtrace.Path(t, "claude-code/trace_0277.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 2, Profile: DefaultProfile, Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log := &headerLog{}
	urls := recordingProxies(t, cl.URLs(), log)
	m, results := runAgentBench(t, path, Options{Replicas: urls},
		loadgen.TraceSpec{TokenScale: agentScale, MaxGap: 200 * time.Millisecond})
	bySession := map[string]int{}
	agents := map[string]int{}
	for _, h := range log.seen {
		bySession[h.Get(wire.HeaderClaudeSession)]++
		if a := h.Get(wire.HeaderClaudeAgent); a != "" {
			agents[a]++
		}
	}
	subCalls := 0
	for _, r := range results {
		if !r.OK() {
			t.Errorf("call %+v failed: %d %s", r.Trace.Agent, r.Status, r.Err)
		}
		if r.Trace.Agent.Agent != "" {
			subCalls++
		}
	}
	var names []string
	n := 0
	for a, c := range agents {
		names = append(names, a)
		n += c
	}
	sort.Strings(names)
	if len(bySession) != 1 || strings.Join(names, ",") != "agent_001,agent_002,agent_003,agent_004" || n != subCalls || subCalls == 0 {
		t.Errorf("replicas saw sessions %v and agent ids %v (%d requests); turns.jsonl has %d subagent calls", bySession, agents, n, subCalls)
	}
	if rep := m.AgentTraces[0]; rep.Sent != len(results) || rep.Sent+rep.SkippedOverLength != rep.Calls {
		t.Errorf("replay %+v with %d results", rep, len(results))
	}
}
