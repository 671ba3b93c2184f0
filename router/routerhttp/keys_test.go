package routerhttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lmwarden/warden/internal/wire"
)

// fixture is a recorded request (testdata/claude-code-*.json).
type fixture struct {
	RequestLine string            `json:"request_line"`
	Headers     map[string]string `json:"headers"`
	Body        json.RawMessage   `json:"body"`
}

func loadFixture(t testing.TB, name string) fixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("decoding %s: %v", name, err)
	}
	return f
}

func (f fixture) header() http.Header {
	h := http.Header{}
	for k, v := range f.Headers {
		h.Set(k, v)
	}
	return h
}

func TestExtractKeyFromRecordedClaudeCode(t *testing.T) {
	const session = "80ea92c9-5a20-47b6-aadb-7135b8a1996e"
	for _, name := range []string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json"} {
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, name)
			info, err := ExtractKey(f.header(), f.Body, KeyConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if info.SessionKey != session || info.Source != KeyClaudeHeader || info.Model != "qwen3-4b" {
				t.Fatalf("got %+v", info)
			}
			// Without the header, the body's metadata.user_id gives the same id.
			h := f.header()
			h.Del(wire.HeaderClaudeSession)
			info, err = ExtractKey(h, f.Body, KeyConfig{})
			if err != nil || info.SessionKey != session || info.Source != KeyMetadataJSON {
				t.Fatalf("from metadata: %+v %v", info, err)
			}
		})
	}
	t.Run("legacy claude-code-request-1.json", func(t *testing.T) {
		raw, err := os.ReadFile("testdata/claude-code-request-1.json")
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		info, err := ExtractKey(http.Header{}, f.Body, KeyConfig{})
		if err != nil || info.SessionKey != "00000000-0000-4000-8000-000000000000" || info.Source != KeyMetadataLegacy {
			t.Fatalf("got %+v %v", info, err)
		}
	})
}

func TestExtractKey(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name    string
		h       http.Header
		body    string
		cfg     KeyConfig
		want    RequestInfo
		wantErr bool
	}{
		{"claude header wins over metadata", hdr(wire.HeaderClaudeSession, "aaa"),
			`{"model":"m","metadata":{"user_id":"{\"session_id\":\"bbb\"}"}}`, KeyConfig{},
			RequestInfo{Model: "m", SessionKey: "aaa", Source: KeyClaudeHeader}, false},
		{"metadata json with parent_session_id", nil,
			`{"metadata":{"user_id":"{\"device_id\":\"00\",\"account_uuid\":\"\",\"session_id\":\"s-1\",\"parent_session_id\":\"p\"}"}}`, KeyConfig{},
			RequestInfo{Model: "", SessionKey: "s-1", Source: KeyMetadataJSON}, false},
		// The Codex CLI (codex-cli 0.171.0, e2e/testdata/codex-0.171.0-request.txt):
		// session-id and thread-id headers and prompt_cache_key, all the thread id.
		{"codex session-id", hdr(wire.HeaderCodexSession, "th-1", wire.HeaderCodexThread, "th-1", "X-Session-ID", "x"),
			`{"model":"m","prompt_cache_key":"th-1","store":false}`, KeyConfig{},
			RequestInfo{Model: "m", SessionKey: "th-1", Source: KeyCodexHeader, NoStore: true}, false},
		{"codex thread-id alone", hdr(wire.HeaderCodexThread, "th-2"), `{}`, KeyConfig{},
			RequestInfo{SessionKey: "th-2", Source: KeyCodexHeader}, false},
		// Older Codex: session_id (underscore) and conversation_id.
		{"codex legacy session_id", hdr("session_id", "old-1", "conversation_id", "old-1"), `{}`, KeyConfig{},
			RequestInfo{SessionKey: "old-1", Source: KeyCodexHeader}, false},
		{"prompt_cache_key wins over X-Session-ID", hdr("X-Session-ID", "x"),
			`{"prompt_cache_key":"pck","previous_response_id":"resp_1"}`, KeyConfig{},
			RequestInfo{SessionKey: "pck", Source: KeyPromptCacheKey, ResponseID: "resp_1"}, false},
		{"claude header wins over codex", hdr(wire.HeaderClaudeSession, "c", wire.HeaderCodexSession, "x"), `{}`, KeyConfig{},
			RequestInfo{SessionKey: "c", Source: KeyClaudeHeader}, false},
		{"metadata wins over X-Session-ID", hdr("X-Session-ID", "x"),
			`{"metadata":{"user_id":"{\"session_id\":\"s-1\"}"}}`, KeyConfig{},
			RequestInfo{Model: "", SessionKey: "s-1", Source: KeyMetadataJSON}, false},
		{"legacy with account", nil,
			`{"metadata":{"user_id":"user_abc123_account_11111111-2222-3333-4444-555555555555_session_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}}`, KeyConfig{},
			RequestInfo{Model: "", SessionKey: "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", Source: KeyMetadataLegacy}, false},
		// Other clients put a plain user id in metadata.user_id: not a session.
		{"plain metadata user_id ignored", hdr("x-session-id", "from-header"),
			`{"metadata":{"user_id":"alice"}}`, KeyConfig{},
			RequestInfo{Model: "", SessionKey: "from-header", Source: KeyHeader}, false},
		{"configured header", hdr("X-My-Conv", "c1"), `{}`, KeyConfig{Headers: []string{"X-My-Conv"}},
			RequestInfo{Model: "", SessionKey: "c1", Source: KeyHeader}, false},
		{"empty header list disables X-Session-ID", hdr("X-Session-ID", "x"), `{}`, KeyConfig{Headers: []string{}},
			RequestInfo{}, false},
		{"openai user only when configured", nil, `{"model":"m","user":"u1"}`, KeyConfig{},
			RequestInfo{Model: "m", SessionKey: "", Source: KeyNone}, false},
		{"openai user configured", nil, `{"model":"m","user":"u1"}`, KeyConfig{UseOpenAIUser: true},
			RequestInfo{Model: "m", SessionKey: "u1", Source: KeyOpenAIUser}, false},
		{"subagent keeps parent's session", hdr(wire.HeaderClaudeSession, "p", wire.HeaderClaudeAgent, "agent-7"), `{}`, KeyConfig{},
			RequestInfo{Model: "", SessionKey: "p", Source: KeyClaudeHeader, Agent: "agent-7"}, false},
		{"subagent split when configured", hdr(wire.HeaderClaudeSession, "p", wire.HeaderClaudeAgent, "agent-7"), `{}`, KeyConfig{SplitSubagents: true},
			RequestInfo{Model: "", SessionKey: "p/agent/agent-7", Source: KeyClaudeHeader, ParentKey: "p", Agent: "agent-7"}, false},
		{"subagent follows its parent", hdr(wire.HeaderClaudeSession, "p", wire.HeaderClaudeAgent, "agent-7"), `{}`, KeyConfig{FollowSubagents: true},
			RequestInfo{Model: "", SessionKey: "p/agent/agent-7", Source: KeyClaudeHeader, ParentKey: "p", FollowParent: true, Agent: "agent-7"}, false},
		{"parent under follow has no parent", hdr(wire.HeaderClaudeSession, "p"), `{}`, KeyConfig{FollowSubagents: true},
			RequestInfo{Model: "", SessionKey: "p", Source: KeyClaudeHeader}, false},
		{"blank header skipped", hdr(wire.HeaderClaudeSession, "  "), `{"metadata":{"user_id":"{\"session_id\":\"s\"}"}}`, KeyConfig{},
			RequestInfo{Model: "", SessionKey: "s", Source: KeyMetadataJSON}, false},
		{"wrong types ignored", nil, `{"model":5,"metadata":{"user_id":7},"user":[1]}`, KeyConfig{UseOpenAIUser: true},
			RequestInfo{}, false},
		{"empty body", hdr("X-Session-ID", "x"), ``, KeyConfig{}, RequestInfo{Model: "", SessionKey: "x", Source: KeyHeader}, false},
		{"not json", nil, `model=m`, KeyConfig{}, RequestInfo{}, true},
		{"json array", nil, `[{"model":"m"}]`, KeyConfig{}, RequestInfo{}, true},
		{"json null", nil, `null`, KeyConfig{}, RequestInfo{}, true},
		{"truncated object", nil, `{"model":"m"`, KeyConfig{}, RequestInfo{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			if h == nil {
				h = http.Header{}
			}
			got, err := ExtractKey(h, []byte(tc.body), tc.cfg)
			if tc.wantErr {
				if !errors.Is(err, ErrBadBody) {
					t.Fatalf("err = %v, want ErrBadBody", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExtractKeyCutsLongKeys(t *testing.T) {
	h := http.Header{}
	h.Set(wire.HeaderSessionID, strings.Repeat("é", 300))
	info, err := ExtractKey(h, nil, KeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.SessionKey) > MaxKeyLen || !utf8.ValidString(info.SessionKey) || info.SessionKey == "" {
		t.Fatalf("key of %d bytes, valid %v", len(info.SessionKey), utf8.ValidString(info.SessionKey))
	}
}

func TestRedact(t *testing.T) {
	tests := map[string]string{
		"":                                     "(none)",
		"short":                                "…(5)",
		"80ea92c9-5a20-47b6-aadb-7135b8a1996e": "80ea92…(36)",
	}
	for in, want := range tests {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkExtractKeyClaudeCodeBody(b *testing.B) {
	f := loadFixture(b, "claude-code-2.1.328-turn2.json")
	h := f.header()
	h.Del(wire.HeaderClaudeSession) // make it read metadata too
	b.SetBytes(int64(len(f.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ExtractKey(h, f.Body, KeyConfig{}); err != nil {
			b.Fatal(err)
		}
	}
}

// A malformed body's error says where encoding/json finds it invalid.
func TestBadBodyErrorSaysWhere(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"m",}`:        "invalid JSON at byte 14: invalid character '}'",
		`{"model":"m"`:          "invalid JSON",
		`{"messages":[1,2,,3]}`: "at byte 18",
	} {
		_, err := ExtractKey(http.Header{}, []byte(body), KeyConfig{})
		if !errors.Is(err, ErrBadBody) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrBadBody saying %q", body, err, want)
		}
	}
}

// The body is read once; RequestInfo says whether it streams and
// whether its messages carry an assistant message (hold.go re-parsed it with
// json.Unmarshal for both).
func TestExtractKeyReadsStreamAndContinuing(t *testing.T) {
	for _, tc := range []struct {
		name, body         string
		stream, continuing bool
	}{
		{"first turn", `{"model":"m","stream":true,"messages":[{"role":"system","content":"x"},{"role":"user","content":"hi"}]}`, true, false},
		{"later turn", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}`, false, true},
		{"stream false", `{"stream":false,"messages":[]}`, false, false},
		{"stream as a string", `{"stream":"true"}`, false, false},
		{"assistant only in text", `{"messages":[{"role":"user","content":"{\"role\": \"assistant\"} \"assistant\""}]}`, false, false},
		{"assistant in a nested object", `{"messages":[{"role":"user","content":[{"type":"text","meta":{"role":"assistant"}}]}]}`, false, false},
		{"assistant outside messages", `{"role":"assistant","system":[{"role":"assistant"}],"messages":[{"role":"user"}]}`, false, false},
		{"escaped name", `{"messages":[{"r\u006fle":"assistant"}]}`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractKey(http.Header{}, []byte(tc.body), KeyConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Stream != tc.stream || got.Continuing != tc.continuing {
				t.Errorf("stream %v continuing %v, want %v %v", got.Stream, got.Continuing, tc.stream, tc.continuing)
			}
		})
	}
}

// Recorded Claude Code requests: the main-loop calls carry tools, the side
// requests (title and topic classification, the quota probe) none, and a
// subagent's agent id is read with the key kept (router.Facts.Tools, Agent).
func TestExtractKeyReadsToolsAndAgent(t *testing.T) {
	bodies := map[string][]json.RawMessage{}
	for _, name := range []string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json", "claude-code-request-1.json", "claude-code-request-3.json"} {
		bodies[name] = append(bodies[name], loadFixture(t, name).Body)
	}
	raw, err := os.ReadFile("testdata/claude-code-request-2.json")
	if err != nil {
		t.Fatal(err)
	}
	var side struct {
		Requests []struct {
			Body json.RawMessage `json:"body"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(raw, &side); err != nil || len(side.Requests) == 0 {
		t.Fatalf("claude-code-request-2.json: %v", err)
	}
	for _, r := range side.Requests {
		bodies["claude-code-request-2.json"] = append(bodies["claude-code-request-2.json"], r.Body)
	}
	want := map[string]bool{"claude-code-2.1.328-turn1.json": true, "claude-code-2.1.328-turn2.json": true,
		"claude-code-request-1.json": true, "claude-code-request-2.json": false, "claude-code-request-3.json": false}
	for name, bs := range bodies {
		for i, b := range bs {
			info, err := ExtractKey(http.Header{}, b, KeyConfig{})
			if err != nil || info.Tools != want[name] {
				t.Errorf("%s request %d: tools %v, want %v (%v)", name, i, info.Tools, want[name], err)
			}
		}
	}
	h := http.Header{}
	h.Set(wire.HeaderClaudeSession, "s1")
	h.Set(wire.HeaderClaudeAgent, "agent-7")
	info, err := ExtractKey(h, []byte(`{"model":"m","tools":[ ]}`), KeyConfig{})
	if err != nil || info.SessionKey != "s1" || info.Agent != "agent-7" || info.ParentKey != "" || info.Tools {
		t.Fatalf("kept key: %+v %v", info, err)
	}
	info, err = ExtractKey(h, []byte(`{"model":"m"}`), KeyConfig{SplitSubagents: true})
	if err != nil || info.SessionKey != "s1/agent/agent-7" || info.ParentKey != "s1" || info.Agent != "agent-7" {
		t.Fatalf("split key: %+v %v", info, err)
	}
}
