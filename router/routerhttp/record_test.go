package routerhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen/trace"
)

func TestRecorder(t *testing.T) {
	var buf bytes.Buffer
	rec, err := NewRecorder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	sys := strings.Repeat("shared system prompt ", 200) // 4,200 bytes, ~600 estimated tokens
	turn1 := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + strings.Repeat("a", 3000) + `"}]}`
	turn2 := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + strings.Repeat("a", 3000) +
		`"},{"role":"assistant","content":"ok"},{"role":"user","content":"` + strings.Repeat("b", 3000) + `"}]}`
	other := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + strings.Repeat("c", 3000) + `"}]}`
	// x arrives first and stays in flight while the others end: nothing is
	// written before it ends. Turn 2 begins after turn 1 ended, as a
	// conversation's turns do.
	x := rec.Begin(10*time.Second, []byte(other), "secret-session-3")
	a := rec.Begin(10*time.Second, []byte(turn1), "secret-session-1")
	b := rec.Begin(11*time.Second, []byte(other), "secret-session-2")
	rec.End(a, true, 1800, 5)
	c := rec.Begin(12*time.Second, []byte(turn2), "secret-session-1")
	d := rec.Begin(13*time.Second, []byte(other), "")
	rec.End(c, true, 2300, 7)
	rec.End(d, false, 0, 0) // failed: not written
	rec.End(b, true, 1800, 6)
	if buf.Len() != 0 {
		t.Fatalf("wrote before the first arrival ended: %q", buf.String())
	}
	rec.End(x, true, 1800, 6)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "secret") || strings.Contains(buf.String(), "shared system") {
		t.Fatalf("key or text in the recording: %s", buf.String())
	}
	var got []trace.Request
	if err := trace.Each(trace.NewReader(&buf, "rec", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || rec.Written != 4 || rec.Dropped != 1 {
		t.Fatalf("got %d lines (written %d, dropped %d), want 4 and 1 dropped", len(got), rec.Written, rec.Dropped)
	}
	r1, r2, r3 := got[1], got[3], got[2]
	if got[0].Timestamp != 0 || r1.Timestamp != 0 || r3.Timestamp != time.Second || r2.Timestamp != 2*time.Second {
		t.Errorf("timestamps %v %v %v, want 0s 1s 2s since the first arrival", r1.Timestamp, r3.Timestamp, r2.Timestamp)
	}
	if len(r1.HashIDs) != 4 || len(r2.HashIDs) != 5 || r1.OutputLength != 5 { // ceil(1800/512), ceil(2300/512)
		t.Errorf("ids %d and %d, output %d", len(r1.HashIDs), len(r2.HashIDs), r1.OutputLength)
	}
	// The next turn repeats the first turn's full blocks, floor(1800 / 512) =
	// 3 of them (its usage, not the estimate, says how many); the other
	// conversation shares the blocks that end before its first message's
	// text: tokens started before it (refTokens, the estimate's rule written
	// independently of its code) plus the one starting there, over 512.
	if n := sharedPrefix(r1.HashIDs, r2.HashIDs); n != 1800/512 {
		t.Errorf("turn 2 shares %d ids with turn 1, want %d", n, 1800/512)
	}
	if n, want := sharedPrefix(r1.HashIDs, r3.HashIDs), (refTokens("system\n"+sys+"\nuser")+1)/512; n != want || want == 0 {
		t.Errorf("the other conversation shares %d ids with the first, want %d (the system prompt's full blocks)", n, want)
	}
	if r1.SessionID == "" || r1.SessionID != r2.SessionID || r1.SessionID == r3.SessionID {
		t.Errorf("session ids %q %q %q", r1.SessionID, r2.SessionID, r3.SessionID)
	}
	// Another file gets another salt.
	var buf2 bytes.Buffer
	rec2, _ := NewRecorder(&buf2)
	z := rec2.Begin(0, []byte(turn1), "secret-session-1")
	rec2.End(z, true, 1800, 5)
	rec2.Close()
	y, err := trace.NewReader(&buf2, "rec2", 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	if y.SessionID == r1.SessionID || y.HashIDs[0] == r1.HashIDs[0] {
		t.Errorf("two files share ids or session ids: %+v / %+v", y, r1)
	}
}

func TestAdminRecordSwitch(t *testing.T) {
	rt, srv := newAdmin(t, "", "m")
	if code, body := adminDo(t, srv, "GET", "/admin/record", "", ""); code != 404 || !strings.Contains(body, "without --record") {
		t.Fatalf("without a recorder: %d %s", code, body)
	}
	rec, _ := NewRecorder(&bytes.Buffer{})
	rt.SetRecorder(rec)
	if code, body := adminDo(t, srv, "PUT", "/admin/record", "", `{"enabled":false}`); code != 200 || !strings.Contains(body, `"enabled": false`) || rt.Proxy().recorder.Load() != nil {
		t.Fatalf("pause: %d %s", code, body)
	}
	if code, body := adminDo(t, srv, "PUT", "/admin/record", "", `{"enabled":true}`); code != 200 || !strings.Contains(body, `"enabled": true`) || rt.Proxy().recorder.Load() != rec {
		t.Fatalf("resume: %d %s", code, body)
	}
	if code, _ := adminDo(t, srv, "PUT", "/admin/record", "", `{"on":true}`); code != 400 {
		t.Fatalf("bad body: %d", code)
	}
}

// sharedPrefix is how many leading ids a and b share.
func sharedPrefix(a, b []int64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// refRun splits text into the runs the recorder's token estimate counts
// (recordhash.go): ASCII letters, single digits, other ASCII symbols,
// non-ASCII bytes, white space.
var refRun = regexp.MustCompile(`[A-Za-z]+|[0-9]|[ \t\n\r]+|[[:^ascii:]]+|[^A-Za-z0-9 \t\n\r[:^ascii:]]+`)

// refTokens is the recorder's token estimate written from its rule, not its
// code: a token per 6 letters, per digit, per 2 symbols, per 4 non-ASCII
// bytes, per run of white space other than a single space before a word (a
// run at the very end counts nothing).
func refTokens(text string) int {
	n := 0
	runs := refRun.FindAllStringIndex(text, -1)
	for i, r := range runs {
		run := text[r[0]:r[1]]
		switch c := run[0]; {
		case c >= 0x80:
			n += (len(run) + 3) / 4
		case c >= '0' && c <= '9':
			n++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if i < len(runs)-1 && run != " " {
				n++
			}
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			n += (len(run) + 5) / 6
		default:
			n += (len(run) + 1) / 2
		}
	}
	return n
}

// The table-driven estimate counts what its rule says, on prose, code, JSON
// and the recorded Claude Code body.
func TestTokenEstimateMatchesItsRule(t *testing.T) {
	texts := []string{"", "a", " a", "  a", "a ", "hello,  world!\n\tfoo(bar) 12345 ++-- é日本語 x",
		strings.Repeat("abcdefghij ", 70), "{\"type\":\"object\",\"properties\":{}}  \n\n  end"}
	for _, name := range []string{"record.go", "recordhash.go", "testdata/claude-code-2.1.328-turn1.json"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	for _, text := range texts {
		s := newPromptHasher(nil, nil)
		s.write([]byte(text))
		got := s.count
		s.release()
		if want := refTokens(text); got != want {
			t.Errorf("estimate of %.40q (%d bytes): %d tokens, its rule says %d", text, len(text), got, want)
		}
	}
}

// claudeTurns rebuilds the recorded Claude Code 2.1.328 request (real system
// blocks, tools, messages) as turn 1, then the turns after it as Claude Code
// sends them: every earlier message again, the system message now a string,
// the cache_control breakpoint moved to the newest block, an assistant reply
// with text and a tool_use, a user message with the tool_result and text, and
// thinking in a later reply.
func claudeTurns(t *testing.T) [][]byte {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(loadFixture(t, "claude-code-2.1.328-turn1.json").Body, &top); err != nil {
		t.Fatal(err)
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		t.Fatal(err)
	}
	var sysMsg struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(msgs[1], &sysMsg); err != nil {
		t.Fatal(err)
	}
	body := func(ms ...json.RawMessage) []byte {
		top["messages"], _ = json.Marshal(ms)
		b, _ := json.Marshal(top)
		return b
	}
	asString, _ := json.Marshal(map[string]any{"role": "system", "content": sysMsg.Content[0].Text})
	reply := json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"Let me look at the files."},` +
		`{"type":"tool_use","id":"toolu_01","name":"Bash","input":{"command":"ls -la","description":"List files"}}]}`)
	result := json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"total 8\ndrwxr-xr-x 2 u u 4096 main.go\n"},` +
		`{"type":"text","text":"now run the tests","cache_control":{"type":"ephemeral"}}]}`)
	resultPlain := json.RawMessage(strings.Replace(string(result), `,"cache_control":{"type":"ephemeral"}`, "", 1))
	thinking := json.RawMessage(`{"role":"assistant","content":[{"type":"thinking","thinking":"The tests need go test.","signature":"c2lnbmF0dXJl"},` +
		`{"type":"tool_use","id":"toolu_02","name":"Bash","input":{"command":"go test ./..."}}]}`)
	result2 := json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_02","content":[{"type":"text","text":"ok  \tpkg\t0.01s"}],"cache_control":{"type":"ephemeral"}}]}`)
	return [][]byte{
		body(msgs...),
		body(msgs[0], asString, reply, result),
		body(msgs[0], asString, reply, resultPlain, thinking, result2),
	}
}

// Consecutive turns of a recorded Claude Code conversation share the block ids
// of everything the earlier turn's prompt held: exactly its full blocks,
// floor(its prompt tokens / 512), whatever the estimate's error (its usage
// says 20,000 tokens where the estimate says ~10k, then 11k where it says
// more). Another conversation with the same system prompt and tools (another
// session id, another first message) shares their blocks.
func TestRecorderClaudeCodeTurnsShareTheirPrefix(t *testing.T) {
	turns := claudeTurns(t)
	for _, tokens := range [][3]int{{20000, 20287, 20950}, {9000, 9700, 10400}} {
		var buf bytes.Buffer
		rec, _ := NewRecorder(&buf)
		for i, body := range turns {
			r := rec.begin(time.Duration(i)*time.Second, body, "claude-session", "", apiAnthropic)
			rec.End(r, true, tokens[i], 50)
		}
		other := bytes.Replace(turns[0], []byte(`"text":"`), []byte(`"text":"another project `), 1)
		r := rec.begin(4*time.Second, other, "another-session", "", apiAnthropic)
		rec.End(r, true, tokens[0], 50)
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
		var got []trace.Request
		if err := trace.Each(trace.NewReader(&buf, "rec", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("%d lines, want 4", len(got))
		}
		for i := 1; i < 3; i++ {
			if n, want := sharedPrefix(got[i-1].HashIDs, got[i].HashIDs), tokens[i-1]/512; n != want {
				t.Errorf("usage %v: turn %d shares %d of turn %d's %d ids, want its %d full blocks", tokens, i+1, n, i, len(got[i-1].HashIDs), want)
			}
		}
		// The billing header block differs per conversation and is skipped;
		// the tools and system prompt are ~10k estimated tokens.
		// (When the usage is below the estimate, the ids are cut before the
		// first message, where the conversations differ.)
		if n := sharedPrefix(got[0].HashIDs, got[3].HashIDs); n < 15 || tokens[0] > 11000 && n >= tokens[0]/512 {
			t.Errorf("usage %v: another conversation shares %d ids with the first, want the system prompt's and tools' (15 or more, fewer than %d)", tokens, n, tokens[0]/512)
		}
	}
}

// codexTurns are Responses API requests shaped as the Codex CLI 0.171.0 sends
// them (e2e/testdata/codex-0.171.0-request.txt): instructions, developer and
// user input items, function tools; the next turn adds a reasoning item with
// encrypted content, a function_call, its output and the reply.
func codexTurns() [][]byte {
	long := strings.Repeat("You are a coding agent running in the Codex CLI. Keep going until the task is done. ", 60)
	params := `{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"},"description":"The command to execute"},"workdir":{"type":"string"}},"required":["command"]}`
	tools := `[{"type":"function","name":"shell","description":"Runs a shell command and returns its output.","strict":false,"parameters":` + params + `},` +
		`{"type":"function","name":"apply_patch","description":"` + strings.Repeat("Use apply_patch to edit files. ", 40) + `","strict":false,"parameters":{"type":"object","properties":{"input":{"type":"string"}}}}]`
	items := []string{
		`{"type":"message","id":"msg_1","role":"developer","content":[{"type":"input_text","text":"` + long + `"}]}`,
		`{"type":"message","id":"msg_2","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/tmp/w</cwd>\n</environment_context>"}]}`,
		`{"type":"message","id":"msg_3","role":"user","content":[{"type":"input_text","text":"list the files"}]}`,
	}
	body := func(items []string) []byte {
		return []byte(`{"model":"m","instructions":"` + long + `","input":[` + strings.Join(items, ",") + `],"tools":` + tools +
			`,"tool_choice":"auto","stream":true,"store":false,"prompt_cache_key":"thread-1"}`)
	}
	t1 := body(items)
	items = append(items,
		`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"I will run ls."}],"content":null,"encrypted_content":"gAAAAABo`+strings.Repeat("x", 400)+`"}`,
		`{"type":"function_call","id":"fc_1","name":"shell","arguments":"{\"command\":[\"ls\",\"-la\"]}","call_id":"call_1"}`,
		`{"type":"function_call_output","call_id":"call_1","output":"total 8\nmain.go\n"}`,
		`{"type":"message","id":"msg_4","role":"assistant","content":[{"type":"output_text","text":"There is one file, main.go.","annotations":[]}]}`,
		`{"type":"message","id":"msg_5","role":"user","content":[{"type":"input_text","text":"run it"}]}`)
	return [][]byte{t1, body(items)}
}

// The same for Codex's Responses requests.
func TestRecorderCodexTurnsShareTheirPrefix(t *testing.T) {
	turns := codexTurns()
	var buf bytes.Buffer
	rec, _ := NewRecorder(&buf)
	tokens := []int{7500, 7720}
	for i, body := range turns {
		r := rec.begin(time.Duration(i)*time.Second, body, "thread-1", "", apiResponses)
		rec.End(r, true, tokens[i], 30)
	}
	rec.Close()
	var got []trace.Request
	if err := trace.Each(trace.NewReader(&buf, "rec", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if n := sharedPrefix(got[0].HashIDs, got[1].HashIDs); n != tokens[0]/512 {
		t.Errorf("turn 2 shares %d of turn 1's %d ids, want its %d full blocks", n, len(got[0].HashIDs), tokens[0]/512)
	}
}

// A turn that changes an earlier message (a tool result cleared) shares the
// blocks before the change only; a turn that extends it shares them all.
func TestRecorderSharesUpToAChange(t *testing.T) {
	turns := claudeTurns(t)
	var buf bytes.Buffer
	rec, _ := NewRecorder(&buf)
	changed := bytes.Replace(turns[2], []byte(`drwxr-xr-x 2 u u 4096 main.go`), []byte(`[cleared]`), 1)
	if bytes.Equal(changed, turns[2]) {
		t.Fatal("no tool result to clear")
	}
	for i, body := range [][]byte{turns[0], turns[1], changed} {
		r := rec.begin(time.Duration(i)*time.Second, body, "s", "", apiAnthropic)
		rec.End(r, true, []int{20000, 21500, 22300}[i], 50)
	}
	rec.Close()
	var got []trace.Request
	if err := trace.Each(trace.NewReader(&buf, "rec", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	// The cleared result is in turn 2's last message, after turn 1's prompt.
	if n := sharedPrefix(got[1].HashIDs, got[2].HashIDs); n != 20000/512 {
		t.Errorf("the changed turn shares %d ids with turn 2: want turn 1's %d, not turn 2's %d", n, 20000/512, 21500/512)
	}
}

// Subagents (X-Claude-Code-Agent-Id) send the parent's session id with their
// own prompts: each agent's turns chain with its own, and a subagent's turns
// do not push the parent's prompts out of the history.
func TestRecorderSubagentsKeepTheirOwnChain(t *testing.T) {
	turns := claudeTurns(t)
	var buf bytes.Buffer
	rec, _ := NewRecorder(&buf)
	at := time.Duration(0)
	send := func(body []byte, agent string, tokens int) {
		at += time.Second
		rec.End(rec.begin(at, body, "s", agent, apiAnthropic), true, tokens, 10)
	}
	send(turns[0], "", 20000)
	for i := range historyPrompts + 2 {
		sub := []byte(fmt.Sprintf(`{"model":"m","system":"you are subagent %d","messages":[{"role":"user","content":"%s"}]}`, i, strings.Repeat("word ", 3000)))
		send(sub, fmt.Sprintf("agent-%d", i%2), 3000)
	}
	send(turns[1], "", 20287)
	rec.Close()
	var got []trace.Request
	if err := trace.Each(trace.NewReader(&buf, "rec", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1]
	if n := sharedPrefix(got[0].HashIDs, last.HashIDs); n != 20000/512 {
		t.Errorf("the parent's turn 2 shares %d ids with its turn 1 after %d subagent turns, want %d", n, historyPrompts+2, 20000/512)
	}
}

// countingWriter records each Write.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

// Each line reaches the writer as its request ends (no buffer to flush), and
// a request in flight holds back later lines for RecordMaxHold at most; its
// line, once it ends, gets the last written timestamp, so the file stays
// sorted.
func TestRecorderWritesLinesAsRequestsEnd(t *testing.T) {
	var w countingWriter
	rec, _ := NewRecorder(&w)
	wall := time.Unix(1e9, 0)
	rec.wall = func() time.Time { return wall }
	body := []byte(`{"messages":[{"role":"user","content":"hello"}]}`)
	a := rec.Begin(0, body, "a")
	rec.End(a, true, 100, 5)
	if w.writes != 1 || strings.Count(w.String(), "\n") != 1 {
		t.Fatalf("after one request: %d writes, %q", w.writes, w.String())
	}
	long := rec.Begin(time.Second, body, "b") // stays in flight
	c := rec.Begin(2*time.Second, body, "c")
	rec.End(c, true, 100, 5)
	if w.writes != 1 {
		t.Fatalf("a line written past a request in flight before RecordMaxHold: %q", w.String())
	}
	wall = wall.Add(RecordMaxHold + time.Second)
	rec.tick()
	if w.writes != 2 || strings.Count(w.String(), "\n") != 2 {
		t.Fatalf("RecordMaxHold after: %d writes, %q", w.writes, w.String())
	}
	rec.End(long, true, 100, 5)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	var got []trace.Request
	if err := trace.Each(trace.NewReader(&w.Buffer, "rec", 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].Timestamp != 2*time.Second || rec.Shifted != 1 || rec.Written != 3 {
		t.Errorf("lines %+v, shifted %d, written %d: want the late line third at 2s", got, rec.Shifted, rec.Written)
	}
}

// Concurrent requests (8 conversations of 40 turns, ending in any order):
// every line is written once, and the file is sorted.
func TestRecorderConcurrent(t *testing.T) {
	var buf syncBuffer
	rec, _ := NewRecorder(&buf)
	var wg sync.WaitGroup
	var clock atomic.Int64
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			history := `{"role":"system","content":"` + strings.Repeat("shared ", 400) + `"}`
			for turn := range 40 {
				history += fmt.Sprintf(`,{"role":"user","content":"conv %d turn %d %s"}`, c, turn, strings.Repeat("x", 100*turn))
				body := []byte(`{"messages":[` + history + `]}`)
				r := rec.Begin(time.Duration(clock.Add(int64(time.Millisecond))), body, fmt.Sprint("conv-", c))
				time.Sleep(time.Duration(turn%3) * time.Millisecond)
				rec.End(r, turn%7 != 3, 600+30*turn, 5)
			}
		}()
	}
	wg.Wait()
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := trace.Each(trace.NewReader(strings.NewReader(buf.String()), "rec", 0), func(trace.Request) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := 8 * (40 - 6); n != want || rec.Written != want || rec.Dropped != 8*6 {
		t.Errorf("%d lines (written %d, dropped %d), want %d and %d dropped", n, rec.Written, rec.Dropped, want, 8*6)
	}
}
