package simhttp

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim"
)

// TestSameConversationBothAPIs: one conversation with a tool round trip, written once
// as an OpenAI chat request and once as an Anthropic request, renders to the same
// template messages (hence the same tokens).
func TestSameConversationBothAPIs(t *testing.T) {
	openAI := `{"model":"m","messages":[
		{"role":"system","content":"you help"},
		{"role":"user","content":"read main.go"},
		{"role":"assistant","content":"reading it","tool_calls":[{"id":"c1","type":"function","function":{"name":"Read","arguments":"{\"path\":\"main.go\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"package main"},
		{"role":"user","content":[{"type":"text","text":"thanks"},{"type":"text","text":"now fix it"}]}],
		"tools":[{"type":"function","function":{"name":"Read","description":"read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]}`
	anthropic := `{"model":"m","max_tokens":10,
		"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1; cch=abc;"},{"type":"text","text":"you ","cache_control":{"type":"ephemeral"}}],
		"messages":[
		{"role":"user","content":"read main.go"},
		{"role":"system","content":[{"type":"text","text":"help"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"reading it"},{"type":"tool_use","id":"c1","name":"Read","input":{"path": "main.go"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"package main"}]},{"type":"text","text":"thanks"},{"type":"text","text":"now fix it"}]}],
		"tools":[{"name":"Read","description":"read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}]}`

	cr, e := decodeChat([]byte(openAI))
	if e != nil {
		t.Fatal(e)
	}
	fromOpenAI, e := cr.chatMessages()
	if e != nil {
		t.Fatal(e)
	}
	mr, e := decodeMessages([]byte(anthropic))
	if e != nil {
		t.Fatal(e)
	}
	fromAnthropic, e := mr.chatMessages()
	if e != nil {
		t.Fatal(e)
	}
	if !slices.Equal(fromOpenAI, fromAnthropic) {
		t.Fatalf("renderings differ:\nopenai    %q\nanthropic %q", fromOpenAI, fromAnthropic)
	}
	if !slices.Equal(sim.RenderChat(nil, fromOpenAI, true), sim.RenderChat(nil, fromAnthropic, true)) {
		t.Fatal("token renderings differ")
	}
	// Shape checks on the shared rendering.
	roles := make([]string, len(fromOpenAI))
	for i, m := range fromOpenAI {
		roles[i] = m.Role
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,tool,user" {
		t.Errorf("roles %s", got)
	}
	if !strings.HasPrefix(fromOpenAI[0].Content, "you help\n\n# Tools") || !strings.Contains(fromOpenAI[0].Content, `{"name":"Read","description":"read a file"`) {
		t.Errorf("system with tools %q", fromOpenAI[0].Content)
	}
	if !strings.Contains(fromOpenAI[2].Content, `"arguments": {"path":"main.go"}`) {
		t.Errorf("assistant tool call %q", fromOpenAI[2].Content)
	}
	if fromOpenAI[4].Content != "thanks\nnow fix it" {
		t.Errorf("user parts %q", fromOpenAI[4].Content)
	}
}

func TestAnthropicConversionRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want []sim.ChatMessage
		err  string
	}{
		{
			name: "system string and ctx role",
			body: `{"model":"m","system":"s","messages":[{"role":"ctx","content":"a"},{"role":"msg","content":"b"}]}`,
			want: []sim.ChatMessage{{Role: "system", Content: "s"}, {Role: "user", Content: "a"}, {Role: "user", Content: "b"}},
		},
		{
			// vLLM drops a user message left with no text (only tool results).
			name: "tool result only",
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"out"}]}]}`,
			want: []sim.ChatMessage{{Role: "tool", Content: "out"}},
		},
		{
			name: "assistant tool_use without text",
			body: `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":null}]}]}`,
			want: []sim.ChatMessage{{Role: "assistant", Content: "\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {}}\n</tool_call>"}},
		},
		{
			name: "only billing header in system",
			body: `{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: a"}],"messages":[{"role":"user","content":"q"}]}`,
			want: []sim.ChatMessage{{Role: "user", Content: "q"}},
		},
		{
			name: "bad role",
			body: `{"model":"m","messages":[{"role":"robot","content":"q"}]}`,
			err:  "role must be user, assistant or system",
		},
		{
			name: "content not a list",
			body: `{"model":"m","messages":[{"role":"user","content":5}]}`,
			err:  "must be a string or a list of content blocks",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, e := decodeMessages([]byte(tc.body))
			if e != nil {
				t.Fatal(e)
			}
			got, e := r.chatMessages()
			if tc.err != "" {
				if e == nil || !strings.Contains(e.message, tc.err) {
					t.Fatalf("error %v, want %q", e, tc.err)
				}
				return
			}
			if e != nil {
				t.Fatal(e)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestClaudeCodeFixtureRendering: the recorded Claude Code request puts a role "system"
// message inside messages; it joins the system prompt (vLLM) and is not a turn.
func TestClaudeCodeFixtureRendering(t *testing.T) {
	raw, err := os.ReadFile("testdata/claude-code-2.1.328-turn2.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	r, e := decodeMessages(rec.Body)
	if e != nil {
		t.Fatal(e)
	}
	msgs, e := r.chatMessages()
	if e != nil {
		t.Fatal(e)
	}
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	// recorded: user, system, assistant, user; the system message moves into msgs[0].
	if got := strings.Join(roles, ","); got != "system,user,assistant,user" {
		t.Errorf("roles %s", got)
	}
	if !strings.Contains(msgs[0].Content, "# Tools") || strings.Count(msgs[0].Content, `{"name":`) != len(r.Tools) {
		t.Errorf("system prompt lacks the %d tools", len(r.Tools))
	}
}

func TestCompletionPromptForms(t *testing.T) {
	for _, tc := range []struct {
		prompt string
		n      int
		err    bool
	}{
		{`"a b c"`, 3, false},
		{`["a b"]`, 2, false},
		{`[5, 6, 7]`, 3, false},
		{`["a", "b"]`, 0, true},
		{`[-1]`, 0, true},
		{`{}`, 0, true},
	} {
		t.Run(tc.prompt, func(t *testing.T) {
			r, e := decodeCompletion([]byte(`{"prompt":` + tc.prompt + `}`))
			if e != nil {
				t.Fatal(e)
			}
			toks, e := r.promptTokens()
			if (e != nil) != tc.err {
				t.Fatalf("error %v, want error %v", e, tc.err)
			}
			if !tc.err && len(toks) != tc.n {
				t.Errorf("%d tokens, want %d", len(toks), tc.n)
			}
		})
	}
}
