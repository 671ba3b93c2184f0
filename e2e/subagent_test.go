package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
)

// headerClaudeParentAgent names a subagent's parent agent; the test records it
// when present (2.1.197 sent none on a subagent of the main conversation:
// docs/router.md section 4). The router does not read it, so internal/wire has
// no constant for it.
const headerClaudeParentAgent = "X-Claude-Code-Parent-Agent-Id"

// The texts the stub answers with, followed through the CLI: the subagent's
// reply must come back to the parent as its tool result, the parent's last
// reply is what `claude -p` prints.
const (
	subagentReply = "subagent-reply-7f3a"
	parentReply   = "parent-reply-91c2"
)

// Kinds of request the stub tells apart.
const (
	kindLaunch   = "launch"   // the parent's first call: answered with the subagent tool call
	kindSubagent = "subagent" // X-Claude-Code-Agent-Id set
	kindResult   = "result"   // the parent's call carrying the tool result
	kindOther    = "other"    // anything else (side requests): plain text
)

// stubCall is one request as an upstream replica received it.
type stubCall struct {
	Replica     string // the stub replica that served it
	Kind        string
	Session     string   // X-Claude-Code-Session-Id
	Agent       string   // X-Claude-Code-Agent-Id
	ParentAgent string   // X-Claude-Code-Parent-Agent-Id
	Headers     []string // the header names (no values: one holds the API key), sorted
	System0     string   // the first system block, cut at 100 bytes
	Tools       int
	// ResultHasReply: a result call whose tool_result holds subagentReply.
	ResultHasReply bool
	// ResultText is that tool_result's content as sent (JSON), for the log.
	ResultText string
}

// subagentScript is the model behind every stub replica: it answers the
// parent's first call with a tool_use of the CLI's subagent tool, once per
// test, and everything else with text and end_turn. It logs every call.
type subagentScript struct {
	mu        sync.Mutex
	launched  bool
	toolName  string // the tool the launch named
	toolUseID string
	calls     []stubCall
}

// messagesTool is the part of an Anthropic Messages tool definition read here.
type messagesTool struct {
	Name        string `json:"name"`
	InputSchema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	} `json:"input_schema"`
}

// subagentTool returns the name of the tool whose input schema has the
// subagent tool's parameters, "" when none: found by its schema, not its name,
// which changes between versions (2.1.197 calls it "Agent").
func subagentTool(tools []messagesTool) string {
	for _, tl := range tools {
		p := tl.InputSchema.Properties
		if p["subagent_type"] != nil && p["prompt"] != nil && p["description"] != nil {
			return tl.Name
		}
	}
	return ""
}

// handler serves replica name: /health, /v1/models and POST /v1/messages
// (streamed as Anthropic SSE, or one JSON message when stream is false).
func (s *subagentScript) handler(name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.PathHealth, func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"stub"}]}`, claudeModel)
	})
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var b struct {
			Stream   bool            `json:"stream"`
			System   json.RawMessage `json:"system"` // a string or text blocks
			Tools    []messagesTool  `json:"tools"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c := stubCall{Replica: name, Session: r.Header.Get(wire.HeaderClaudeSession),
			Agent: r.Header.Get(wire.HeaderClaudeAgent), ParentAgent: r.Header.Get(headerClaudeParentAgent), Tools: len(b.Tools)}
		for h := range r.Header {
			c.Headers = append(c.Headers, h)
		}
		slices.Sort(c.Headers)
		var system []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(b.System, &system) == nil && len(system) > 0 {
			c.System0 = system[0].Text[:min(len(system[0].Text), 100)]
		}
		// The last message's tool_result blocks (content is a string or blocks).
		var results []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if n := len(b.Messages); n > 0 {
			_ = json.Unmarshal(b.Messages[n-1].Content, &results)
		}
		tool := subagentTool(b.Tools)

		s.mu.Lock()
		switch {
		case c.Agent != "":
			c.Kind = kindSubagent
		case !s.launched && tool != "" && len(results) == 0:
			c.Kind = kindLaunch
			s.launched, s.toolName, s.toolUseID = true, tool, "toolu_warden_e2e_1"
		default:
			c.Kind = kindOther
			for _, res := range results {
				if res.Type == "tool_result" && s.launched && res.ToolUseID == s.toolUseID {
					c.Kind, c.ResultText = kindResult, string(res.Content)
					c.ResultHasReply = bytes.Contains(res.Content, []byte(subagentReply))
				}
			}
		}
		toolName, toolUseID := s.toolName, s.toolUseID
		s.calls = append(s.calls, c)
		s.mu.Unlock()

		// The answer: one content block and its stop reason.
		block := map[string]any{"type": "text", "text": ""}
		delta := map[string]any{"type": "text_delta", "text": "ok"}
		final := map[string]any{"type": "text", "text": "ok"}
		stop := "end_turn"
		switch c.Kind {
		case kindLaunch:
			// The subagent tool's input (the parameters subagentTool looks for;
			// "general-purpose" is a built-in agent type).
			input := map[string]string{"description": "Say hello", "prompt": "Reply with one word.", "subagent_type": "general-purpose"}
			in, _ := json.Marshal(input)
			block = map[string]any{"type": "tool_use", "id": toolUseID, "name": toolName, "input": map[string]any{}}
			delta = map[string]any{"type": "input_json_delta", "partial_json": string(in)}
			final = map[string]any{"type": "tool_use", "id": toolUseID, "name": toolName, "input": input}
			stop = "tool_use"
		case kindSubagent:
			delta["text"], final["text"] = subagentReply, subagentReply
		case kindResult:
			delta["text"], final["text"] = parentReply, parentReply
		}
		// Input tokens at 4 body bytes a token (the router's assumed ratio).
		usage := map[string]int{"input_tokens": len(body) / 4, "output_tokens": 5}
		msg := map[string]any{"id": "msg_warden_e2e", "type": "message", "role": "assistant", "model": claudeModel,
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}
		if !b.Stream {
			msg["content"], msg["stop_reason"] = []any{final}, stop
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(msg)
			return
		}
		// The event sequence of Anthropic's streaming docs (text or tool_use
		// block, then message_delta with the stop reason): the shape of
		// ../shared/fixtures/anthropic-stream*.txt.
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriter(w)
		event := func(name string, data any) {
			js, _ := json.Marshal(data)
			fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", name, js)
		}
		event("message_start", map[string]any{"type": "message_start", "message": msg})
		event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
		event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": delta})
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 5}})
		event("message_stop", map[string]any{"type": "message_stop"})
		_ = bw.Flush()
	})
	return mux
}

// subagentRun is what one `claude -p` that launched a subagent left behind.
type subagentRun struct {
	out    string                   // what the CLI printed
	calls  []stubCall               // as the stubs received them, in arrival order
	reqs   []routed                 // as the router answered them
	access []routerhttp.AccessEntry // the router's access log, its routed requests
	status routerhttp.ModelStatus   // the router's status afterwards
	script *subagentScript          // the tool the launch named
}

// runSubagent starts two stub replicas and a router over them from a YAML
// config (split_subagents as given) with an access log, runs `claude -p` once
// through it and returns what every side saw.
func runSubagent(t *testing.T, bin string, split bool) subagentRun {
	t.Helper()
	script := &subagentScript{}
	names := []string{"r0", "r1"}
	var yaml strings.Builder
	// No /metrics on the stubs: scraping off, placement uses the router's own
	// counts (in flight, live working set). The tie-break seed (the parent's
	// placement on two idle replicas) changes per run, so the parent lands on
	// either replica over runs; it is logged to repeat a run.
	seed := uint64(time.Now().UnixNano())
	t.Logf("router tie-break seed %d", seed)
	fmt.Fprintf(&yaml, "admin_listen: \"-\"\nscrape_interval: -1s\nseed: %d\nsplit_subagents: %v\nmodels:\n  - name: %s\n    replicas:\n", seed, split, claudeModel)
	for _, n := range names {
		srv := httptest.NewServer(script.handler(n))
		t.Cleanup(srv.Close)
		fmt.Fprintf(&yaml, "      - name: %s\n        url: %s\n", n, srv.URL)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "router.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// What `warden route --config FILE --access-log FILE` builds.
	cfg, err := routerhttp.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SplitSubagents != split {
		t.Fatalf("config split_subagents = %v, want %v", cfg.SplitSubagents, split)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := routerhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "access.jsonl")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	access := routerhttp.NewAccessLog(logFile)
	rt.Proxy().SetAccessLog(access)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); rt.Run(ctx) }()
	log := &requestLog{}
	srv := httptest.NewServer(log.wrap(rt.Handler()))
	t.Cleanup(func() { srv.Close(); cancel(); <-runDone })

	home, work := t.TempDir(), t.TempDir()
	out := runClaude(t, bin, home, work, srv.URL, "-p", "Use a general-purpose subagent to say hello.", "--model", claudeModel)
	run := subagentRun{out: out, reqs: log.all(), status: rt.Status().Models[0], script: script}
	if err := access.Err(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var e routerhttp.AccessEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("access log line %d: %v: %s", i+1, err, line)
		}
		if e.Decision == "rejected" {
			// The router answered it itself (the CLI probes "/", which it does
			// not proxy): no routed call, logged only.
			t.Logf("access log line %d: rejected %s %d: %s", i+1, e.Path, e.Status, e.Error)
			continue
		}
		run.access = append(run.access, e)
	}
	script.mu.Lock()
	run.calls = slices.Clone(script.calls)
	script.mu.Unlock()
	for i, c := range run.calls {
		t.Logf("upstream call %d on %s: %s session=%s agent=%q parent-agent=%q tools=%d system[0]=%q",
			i+1, c.Replica, c.Kind, c.Session, c.Agent, c.ParentAgent, c.Tools, c.System0)
	}
	for i, r := range run.reqs {
		t.Logf("router request %d: %s", i+1, r)
	}
	for i, e := range run.access {
		t.Logf("access log %d: session=%s agent=%s replica=%s decision=%s status=%d path=%s error=%q", i+1, e.Session, e.Agent, e.Replica, e.Decision, e.Status, e.Path, e.Error)
	}
	for _, r := range run.status.Replicas {
		t.Logf("router status %s: served %d %v, sessions homed %d, live tokens %d", r.Name, r.ServedTotal, r.ServedBy, r.Sessions, r.LiveTokens)
	}
	return run
}

// check asserts what both configurations share: the CLI launched a subagent
// through the router, its requests carried the parent's session id and an
// agent id, the parent got its reply back, and the stubs, the router's
// responses and its access log agree on who served what. It returns the
// parent's session id, the subagent's agent id and the parent's replica.
func (run subagentRun) check(t *testing.T) (session, agent, parentHome string) {
	t.Helper()
	if run.script.toolName == "" {
		var tools []int
		for _, c := range run.calls {
			tools = append(tools, c.Tools)
		}
		t.Fatalf("no request offered a tool with subagent_type, prompt and description (tool counts %v): cannot launch a subagent", tools)
	}
	t.Logf("subagent tool: %q", run.script.toolName)
	byKind := map[string][]stubCall{}
	for _, c := range run.calls {
		byKind[c.Kind] = append(byKind[c.Kind], c)
	}
	if len(byKind[kindLaunch]) != 1 || len(byKind[kindSubagent]) == 0 || len(byKind[kindResult]) != 1 {
		t.Fatalf("want 1 launch, >= 1 subagent call (with %s) and 1 parent call with the tool result; got %d, %d, %d (and %d others)",
			wire.HeaderClaudeAgent, len(byKind[kindLaunch]), len(byKind[kindSubagent]), len(byKind[kindResult]), len(byKind[kindOther]))
	}
	launch, result := byKind[kindLaunch][0], byKind[kindResult][0]
	session, parentHome = launch.Session, launch.Replica
	if session == "" {
		t.Fatalf("the parent's first call has no %s", wire.HeaderClaudeSession)
	}
	if result.Session != session {
		t.Errorf("the parent's result call has session %q, its first %q", result.Session, session)
	}
	agent = byKind[kindSubagent][0].Agent
	t.Logf("the parent's first call sent headers %v", launch.Headers)
	t.Logf("the subagent's first call sent headers %v", byKind[kindSubagent][0].Headers)
	for _, c := range byKind[kindSubagent] {
		if c.Session != session {
			t.Errorf("subagent call has %s %q, the parent's is %q", wire.HeaderClaudeSession, c.Session, session)
		}
		if c.Agent != agent {
			t.Errorf("subagent calls carry agent ids %q and %q; want one subagent", agent, c.Agent)
		}
		if c.ParentAgent != "" {
			t.Logf("subagent call carries %s: %q", headerClaudeParentAgent, c.ParentAgent)
		}
	}
	for _, c := range run.calls {
		if c.Kind == kindOther {
			t.Logf("side call on %s (agent %q): answered with text", c.Replica, c.Agent)
		}
	}
	if !result.ResultHasReply {
		t.Errorf("the parent's tool_result does not hold the subagent's reply %q: %s", subagentReply, result.ResultText)
	}
	// Seen with 2.1.197: the tool result names the agent id ("agentId: <id>").
	t.Logf("the parent's tool_result names agent %q: %v", agent, strings.Contains(result.ResultText, agent))
	if !strings.Contains(run.out, parentReply) {
		t.Errorf("claude -p printed %q, want the parent's last reply %q", lastLines(run.out, 3), parentReply)
	}

	// The router's responses (X-Warden-Replica) and its access log say the
	// same replica served each request as the stubs saw: count by agent id
	// and replica.
	want := map[string]int{}
	for _, c := range run.calls {
		want[routerhttp.KeyHash(c.Agent)+" on "+c.Replica]++
	}
	gotResp, gotLog := map[string]int{}, map[string]int{}
	for _, r := range run.reqs {
		if r.Status != http.StatusOK {
			t.Errorf("router request %s: status %d", r.Path, r.Status)
		}
		gotResp[routerhttp.KeyHash(r.Agent)+" on "+r.Replica]++
	}
	for _, e := range run.access {
		gotLog[e.Agent+" on "+e.Replica]++
	}
	if fmt.Sprint(gotResp) != fmt.Sprint(want) || fmt.Sprint(gotLog) != fmt.Sprint(want) {
		t.Errorf("requests by agent hash and replica: stubs %v, router responses %v, access log %v", want, gotResp, gotLog)
	}
	return session, agent, parentHome
}

// parentAndSubagent splits the access log into the parent's lines (no agent)
// and the subagent's, checking every line names a request of this session.
func (run subagentRun) parentAndSubagent(t *testing.T, agent string) (parent, sub []routerhttp.AccessEntry) {
	t.Helper()
	for _, e := range run.access {
		switch e.Agent {
		case "":
			parent = append(parent, e)
		case routerhttp.KeyHash(agent):
			sub = append(sub, e)
		default:
			t.Errorf("access log line of an unknown agent %s", e.Agent)
		}
	}
	if len(parent) < 2 || len(sub) == 0 {
		t.Fatalf("access log: %d parent and %d subagent lines; want >= 2 and >= 1", len(parent), len(sub))
	}
	return parent, sub
}

// TestClaudeCodeSubagentThroughRouter runs the real Claude Code CLI through
// the router to two stub replicas whose model answers the parent's first call
// with the CLI's subagent tool (Task, or Agent in later versions), so the CLI
// runs a real subagent. It checks the headers the subagent's requests carry
// (the parent's X-Claude-Code-Session-Id plus X-Claude-Code-Agent-Id) and
// where the router put them: by default on the parent's replica under the
// parent's key; with split_subagents under their own key
// (session/agent/<id>), placed as a new conversation by the working-set rule.
func TestClaudeCodeSubagentThroughRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Claude Code test in -short mode")
	}
	bin, version := claudeCLI(t)
	t.Logf("Claude Code %s at %s", version, bin)

	t.Run("default", func(t *testing.T) {
		run := runSubagent(t, bin, false)
		session, agent, home := run.check(t)
		parent, sub := run.parentAndSubagent(t, agent)
		for _, e := range run.access {
			if e.Session != routerhttp.KeyHash(session) {
				t.Errorf("access log: session hash %s (agent %q), want the parent's %s", e.Session, e.Agent, routerhttp.KeyHash(session))
			}
			if e.Replica != home {
				t.Errorf("access log: agent %q served by %s (%s), want the parent's replica %s", e.Agent, e.Replica, e.Decision, home)
			}
		}
		if parent[0].Decision != router.ReasonPlaced.String() {
			t.Errorf("the parent's first request: decision %s, want placed", parent[0].Decision)
		}
		for _, e := range append(parent[1:], sub...) {
			if e.Decision != router.ReasonSticky.String() {
				t.Errorf("agent %q after the first request: decision %s, want sticky", e.Agent, e.Decision)
			}
		}
		if run.status.Sessions != 1 {
			t.Errorf("router has %d sessions, want 1: the subagent shares the parent's key", run.status.Sessions)
		}
		if !t.Failed() {
			t.Logf("default: parent and subagent %s (%d calls) on %s under one key", agent, len(sub), home)
		}
	})

	t.Run("split_subagents", func(t *testing.T) {
		run := runSubagent(t, bin, true)
		session, agent, home := run.check(t)
		parent, sub := run.parentAndSubagent(t, agent)
		parentKey := routerhttp.KeyHash(session)
		subKey := routerhttp.KeyHash(session + "/agent/" + agent) // keys.go ExtractKey
		for _, e := range parent {
			if e.Session != parentKey || e.Replica != home {
				t.Errorf("access log: parent line key %s on %s, want %s on %s", e.Session, e.Replica, parentKey, home)
			}
		}
		if parent[0].Decision != router.ReasonPlaced.String() {
			t.Errorf("the parent's first request: decision %s, want placed", parent[0].Decision)
		}
		for _, e := range parent[1:] {
			if e.Decision != router.ReasonSticky.String() {
				t.Errorf("the parent's later request: decision %s, want sticky", e.Decision)
			}
		}
		// A new key is placed on the least-loaded replica by
		// router.DefaultWorkingSetKeys: in flight, then live working set.
		// When the subagent's first request arrives the parent's call has
		// ended (at most still in flight on its home), and the parent's
		// conversation is live on its home, so the other replica wins.
		other := "r0"
		if home == "r0" {
			other = "r1"
		}
		for i, e := range sub {
			if e.Session != subKey {
				t.Errorf("access log: subagent key hash %s, want its own %s (the parent's is %s)", e.Session, subKey, parentKey)
			}
			want := router.ReasonSticky.String()
			if i == 0 {
				want = router.ReasonPlaced.String()
			}
			if e.Replica != other || e.Decision != want {
				t.Errorf("subagent request %d: %s (%s), want %s (%s)", i+1, e.Replica, e.Decision, other, want)
			}
		}
		if run.status.Sessions != 2 {
			t.Errorf("router has %d sessions, want 2: the parent's and the subagent's", run.status.Sessions)
		}
		if !t.Failed() {
			t.Logf("split_subagents: parent on %s, subagent %s (%d calls) placed on %s under its own key %s", home, agent, len(sub), other, subKey)
		}
	})
}
