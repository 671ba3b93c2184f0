package routerhttp

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
)

// Two turns of one conversation and a subagent's call through the router to
// simulated vLLM servers: one access-log line each, naming the replica, the
// decision, the usage (turn 2 reads its prefix from the cache) and hashes of
// the session key and agent id, never the key, the id or the text.
func TestAccessLogOneLinePerRequest(t *testing.T) {
	f, _ := simFront(t, 2)
	var out syncBuffer
	l := NewAccessLog(&out)
	f.rt.Proxy().SetAccessLog(l)

	const session, agent = "secret-session-0123456789", "secret-agent-42"
	sys := strings.Repeat("You are a coding agent. ", 150)
	turn1 := `{"model":"m","max_tokens":8,"stream":true,"system":"` + sys + `","messages":[{"role":"user","content":"first question"}]}`
	turn2 := `{"model":"m","max_tokens":8,"stream":true,"system":"` + sys + `","messages":[{"role":"user","content":"first question"},{"role":"assistant","content":"an answer"},{"role":"user","content":"second question"}]}`
	hdr := map[string]string{wire.HeaderClaudeSession: session}
	for _, body := range []string{turn1, turn2} {
		if resp, b := f.post(t, wire.PathMessages, hdr, body); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	sub := map[string]string{wire.HeaderClaudeSession: session, wire.HeaderClaudeAgent: agent}
	if resp, b := f.post(t, wire.PathMessages, sub, turn1); resp.StatusCode != 200 {
		t.Fatalf("subagent: status %d: %s", resp.StatusCode, b)
	}

	text := out.String()
	t.Logf("access log:\n%s", text)
	if strings.Contains(text, "secret") || strings.Contains(text, "coding agent") || strings.Contains(text, "question") {
		t.Fatalf("a key, an id or prompt text in the access log:\n%s", text)
	}
	var lines []AccessEntry
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var e AccessEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 3 || l.Written != 3 || l.Err() != nil {
		t.Fatalf("%d lines (written %d, err %v), want 3:\n%s", len(lines), l.Written, l.Err(), text)
	}
	for i, e := range lines {
		if e.Session != KeyHash(session) || len(e.Session) != 16 || e.Status != 200 || e.Replica == "" || e.Decision == "" ||
			e.PromptTokens <= 0 || e.OutputTokens <= 0 || e.TTFBMs < 0 || e.DurationMs < e.TTFBMs || e.Attempts != 1 || e.Path != wire.PathMessages {
			t.Errorf("line %d: %+v", i+1, e)
		}
	}
	if lines[1].Replica != lines[0].Replica || lines[1].CachedTokens <= 0 || lines[1].CachedTokens >= lines[1].PromptTokens {
		t.Errorf("turn 2 on %s with %d of %d tokens cached; turn 1 on %s: want the same replica and a cached prefix",
			lines[1].Replica, lines[1].CachedTokens, lines[1].PromptTokens, lines[0].Replica)
	}
	if lines[0].Agent != "" || lines[2].Agent != KeyHash(agent) {
		t.Errorf("agent hashes %q, %q: want none, then KeyHash(agent) %q", lines[0].Agent, lines[2].Agent, KeyHash(agent))
	}
}

// A request the router answers itself gets a line too: invalid JSON (400) and
// an unknown model (404), with decision "rejected", no replica and the error
// the client got; nothing of the body.
func TestAccessLogRejectedRequests(t *testing.T) {
	_, stubs := simFront(t, 1)
	f := newFront(t, true, func(c *Config) { c.Models[0].Name = "m" }, stubs...)
	var out syncBuffer
	l := NewAccessLog(&out)
	f.rt.Proxy().SetAccessLog(l)
	hdr := map[string]string{wire.HeaderClaudeSession: "secret-session"}
	if resp, _ := f.post(t, wire.PathMessages, hdr, `{"model":"m","messages":[secret`); resp.StatusCode != 400 {
		t.Fatalf("invalid JSON: status %d", resp.StatusCode)
	}
	if resp, _ := f.post(t, wire.PathMessages, hdr, `{"model":"no-such-model","max_tokens":4,"messages":[{"role":"user","content":"secret"}]}`); resp.StatusCode != 404 {
		t.Fatalf("unknown model: status %d", resp.StatusCode)
	}
	var lines []AccessEntry
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var e AccessEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 2 || strings.Contains(out.String(), "secret") {
		t.Fatalf("want 2 lines without the body or key:\n%s", out.String())
	}
	for i, want := range []struct {
		status      int
		model, text string
	}{{400, "", "invalid JSON"}, {404, "no-such-model", "no-such-model"}} {
		e := lines[i]
		if e.Status != want.status || e.Decision != "rejected" || e.Replica != "" || e.Model != want.model ||
			!strings.Contains(e.Error, want.text) || e.Path != wire.PathMessages || e.TTFBMs != -1 {
			t.Errorf("line %d: %+v, want status %d, model %q, an error naming %q", i+1, e, want.status, want.model, want.text)
		}
	}
	if lines[1].Session != KeyHash("secret-session") {
		t.Errorf("unknown model: session %q, want the key's hash", lines[1].Session)
	}
}

// KeyHash is the first 16 hex digits of SHA-256, as the log's doc says an
// operator computes it (printf %s id | sha256sum | cut -c1-16).
func TestKeyHash(t *testing.T) {
	// sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad (FIPS 180-2, appendix B.1)
	if got := KeyHash("abc"); got != "ba7816bf8f01cfea" {
		t.Errorf("KeyHash(abc) = %s", got)
	}
	if KeyHash("") != "" {
		t.Error("KeyHash of no key is not empty")
	}
}
