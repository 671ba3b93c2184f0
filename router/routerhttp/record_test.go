package routerhttp

import (
	"bytes"
	"strings"
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
	sys := strings.Repeat("shared system prompt ", 200) // 4,200 bytes: two full pieces
	turn1 := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + strings.Repeat("a", 3000) + `"}]}`
	turn2 := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + strings.Repeat("a", 3000) +
		`"},{"role":"assistant","content":"ok"},{"role":"user","content":"` + strings.Repeat("b", 3000) + `"}]}`
	other := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + strings.Repeat("c", 3000) + `"}]}`
	a := rec.Begin(10*time.Second, []byte(turn1), "secret-session-1")
	b := rec.Begin(11*time.Second, []byte(other), "secret-session-2")
	c := rec.Begin(12*time.Second, []byte(turn2), "secret-session-1")
	d := rec.Begin(13*time.Second, []byte(other), "")
	// Out of order: nothing is written before a ends, c waits for b.
	rec.End(c, true, 2300, 7)
	rec.End(d, false, 0, 0) // failed: not written
	if rec.Flush(); buf.Len() != 0 {
		t.Fatalf("wrote before the first arrival ended: %q", buf.String())
	}
	rec.End(a, true, 1800, 5)
	rec.End(b, true, 1800, 6)
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
	if len(got) != 3 || rec.Written != 3 || rec.Dropped != 1 {
		t.Fatalf("got %d lines (written %d, dropped %d), want 3 and 1 dropped", len(got), rec.Written, rec.Dropped)
	}
	r1, r2, r3 := got[0], got[2], got[1]
	if r1.Timestamp != 0 || r3.Timestamp != time.Second || r2.Timestamp != 2*time.Second {
		t.Errorf("timestamps %v %v %v, want 0s 1s 2s since the first arrival", r1.Timestamp, r3.Timestamp, r2.Timestamp)
	}
	if len(r1.HashIDs) != 4 || len(r2.HashIDs) != 5 || r1.OutputLength != 5 { // ceil(1800/512), ceil(2300/512)
		t.Errorf("ids %d and %d, output %d", len(r1.HashIDs), len(r2.HashIDs), r1.OutputLength)
	}
	// The next turn repeats the first turn's full pieces; the other conversation
	// shares the system prompt's two pieces only.
	for i := range 3 {
		if r2.HashIDs[i] != r1.HashIDs[i] {
			t.Errorf("turn 2 id %d differs from turn 1's", i)
		}
	}
	if r3.HashIDs[0] != r1.HashIDs[0] || r3.HashIDs[1] != r1.HashIDs[1] || r3.HashIDs[2] == r1.HashIDs[2] {
		t.Errorf("other conversation ids %v vs %v: want the two system pieces shared, then different", r3.HashIDs[:3], r1.HashIDs[:3])
	}
	if r1.SessionID == "" || r1.SessionID != r2.SessionID || r1.SessionID == r3.SessionID {
		t.Errorf("session ids %q %q %q", r1.SessionID, r2.SessionID, r3.SessionID)
	}
	// Another file gets another salt.
	var buf2 bytes.Buffer
	rec2, _ := NewRecorder(&buf2)
	x := rec2.Begin(0, []byte(turn1), "secret-session-1")
	rec2.End(x, true, 1800, 5)
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

func TestCanonicalMessagesResponses(t *testing.T) {
	a := canonicalMessages([]byte(`{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]}]}`))
	b := canonicalMessages([]byte(`{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]},` +
		`{"role":"assistant","content":[{"type":"output_text","text":"hi"}]},{"role":"user","content":"more"}]}`))
	if a != "instructions\nbe brief\nuser\nhello\n\n" || !strings.HasPrefix(b, a) {
		t.Errorf("canonical %q / %q: want the next turn to extend the first", a, b)
	}
	if got := canonicalMessages([]byte(`{"input":"just text"}`)); got != "user\njust text\n" {
		t.Errorf("string input: %q", got)
	}
}
