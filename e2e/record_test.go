package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen/trace"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// recordedTurn is one request's usage as the client read it.
type recordedTurn struct {
	prompt, cached int
	reply          json.RawMessage // the reply's content blocks (Anthropic) or output items (Responses)
}

// postTurn sends body to the router and reads the usage from the JSON reply.
func postTurn(t *testing.T, url, path, header, key string, body []byte) recordedTurn {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
	}
	var r struct {
		Content json.RawMessage `json:"content"`
		Output  json.RawMessage `json:"output"`
		Usage   struct {
			InputTokens  int `json:"input_tokens"`
			CacheRead    int `json:"cache_read_input_tokens"`
			InputDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if path == wire.PathResponses {
		return recordedTurn{prompt: r.Usage.InputTokens, cached: r.Usage.InputDetails.CachedTokens, reply: r.Output}
	}
	// Anthropic: input_tokens counts the uncached part (sim/simhttp/anthropic.go).
	return recordedTurn{prompt: r.Usage.InputTokens + r.Usage.CacheRead, cached: r.Usage.CacheRead, reply: r.Content}
}

// Two turns of the real Claude Code request (the recorded 2.1.328 body: its
// system blocks, 12 tool schemas, messages) and of a Codex-shaped Responses
// conversation, through a recording router to the simulator: the recorded
// turn 2 shares turn 1's full blocks, floor(turn 1's prompt / 512) ids by
// the simulator's own count, so a replay finds as many tokens cached as the
// simulator did live, within 5 % (the floor and turn 1's cached output).
func TestRecordingKeepsTheLiveCacheShare(t *testing.T) {
	f := startFleet(t, simhttp.Config{Replicas: 1, Speed: 20, ReplyTokens: 24}, 32)
	model := f.sim.Config().Model
	var buf bytes.Buffer
	rec, err := routerhttp.NewRecorder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	f.rt.SetRecorder(rec)

	// Claude Code over /v1/messages.
	raw, err := os.ReadFile("../router/routerhttp/testdata/claude-code-2.1.328-turn1.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Body map[string]json.RawMessage }
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	top := fx.Body
	top["model"], _ = json.Marshal(model)
	top["stream"], top["max_tokens"] = json.RawMessage("false"), json.RawMessage("24")
	var msgs []json.RawMessage
	json.Unmarshal(top["messages"], &msgs)
	claudeBody := func(ms []json.RawMessage) []byte {
		top["messages"], _ = json.Marshal(ms)
		b, _ := json.Marshal(top)
		return b
	}
	const path, session = "/v1/messages", "3b1f2f4e-7c1a-4c55-9a43-0d6b1f3e9a10"
	c1 := postTurn(t, f.url, path, wire.HeaderClaudeSession, session, claudeBody(msgs))
	reply, _ := json.Marshal(map[string]any{"role": "assistant", "content": c1.reply})
	next := json.RawMessage(`{"role":"user","content":[{"type":"text","text":"now run the tests","cache_control":{"type":"ephemeral"}}]}`)
	c2 := postTurn(t, f.url, path, wire.HeaderClaudeSession, session, claudeBody(append(msgs, reply, next)))

	// Codex over /v1/responses.
	long := strings.Repeat("You are a coding agent running in the Codex CLI. Keep going until the task is done. ", 120)
	tools := `[{"type":"function","name":"shell","description":"` + strings.Repeat("Runs a shell command and returns its output. ", 40) +
		`","strict":false,"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]}}]`
	items := []string{
		`{"type":"message","role":"developer","content":[{"type":"input_text","text":"` + long + `"}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"list the files"}]}`,
	}
	codexBody := func(items []string) []byte {
		return []byte(fmt.Sprintf(`{"model":%q,"instructions":%q,"input":[%s],"tools":%s,"max_output_tokens":24,"store":false,"prompt_cache_key":"thread-1"}`,
			model, long, strings.Join(items, ","), tools))
	}
	x1 := postTurn(t, f.url, wire.PathResponses, "session-id", "thread-1", codexBody(items))
	var out []json.RawMessage
	json.Unmarshal(x1.reply, &out)
	for _, o := range out {
		items = append(items, string(o))
	}
	items = append(items, `{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"call_1"}`,
		`{"type":"function_call_output","call_id":"call_1","output":"main.go\n"}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"run it"}]}`)
	x2 := postTurn(t, f.url, wire.PathResponses, "session-id", "thread-1", codexBody(items))

	f.log.all() // the handlers (and the recorder's End) have returned
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	var got []trace.Request
	if err := trace.Each(trace.NewReader(&buf, "recording", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d lines recorded, want 4", len(got))
	}
	for _, c := range []struct {
		name   string
		t1, t2 recordedTurn
		l1, l2 trace.Request
	}{{"claude code", c1, c2, got[0], got[1]}, {"codex", x1, x2, got[2], got[3]}} {
		shared := 0
		for shared < len(c.l1.HashIDs) && shared < len(c.l2.HashIDs) && c.l1.HashIDs[shared] == c.l2.HashIDs[shared] {
			shared++
		}
		replay := shared * trace.DefaultBlockSize
		t.Logf("%s: turn 1 %d prompt tokens, turn 2 %d with %d cached live; recorded turn 2 shares %d of %d ids: %d tokens",
			c.name, c.t1.prompt, c.t2.prompt, c.t2.cached, shared, len(c.l2.HashIDs), replay)
		if c.l1.InputLength != c.t1.prompt || c.l2.InputLength != c.t2.prompt {
			t.Errorf("%s: recorded prompts %d, %d; the client read %d, %d", c.name, c.l1.InputLength, c.l2.InputLength, c.t1.prompt, c.t2.prompt)
		}
		if shared != c.t1.prompt/trace.DefaultBlockSize {
			t.Errorf("%s: turn 2 shares %d ids with turn 1, want its %d full blocks", c.name, shared, c.t1.prompt/trace.DefaultBlockSize)
		}
		if d := replay - c.t2.cached; d > c.t2.cached/20 || -d > c.t2.cached/20 || c.t2.cached == 0 {
			t.Errorf("%s: the recording shares %d tokens of turn 2, the simulator cached %d live: more than 5 %% apart", c.name, replay, c.t2.cached)
		}
	}
}
