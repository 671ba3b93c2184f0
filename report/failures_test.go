package report

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

// Failed turns group by status and text with numbers as N; the section lists
// the most frequent first.
func TestFailureReasons(t *testing.T) {
	rs := []*loadgen.Result{
		{Status: 400, Err: `http 400: {"error":"prompt of 35121 tokens exceeds max_model_len 32768"}`},
		{Status: 400, Err: `http 400: {"error":"prompt of 40007 tokens exceeds max_model_len 32768"}`},
		{Status: 0, Err: "sending request: connection refused"},
		{Status: 502},
	}
	s := Summary{Variant: "on", Sessions: 4, FailedBy: map[string]int{}}
	for _, r := range rs {
		s.FailedBy[failureReason(r)]++
	}
	want := `status 400: http N: {"error":"prompt of N tokens exceeds max_model_len N"}`
	if s.FailedBy[want] != 2 || s.FailedBy["no response: sending request: connection refused"] != 1 || s.FailedBy["status 502: no error text"] != 1 {
		t.Fatalf("reasons %v", s.FailedBy)
	}
	var b strings.Builder
	mdFailuresSection(&b, stageKeys{}, []Summary{s})
	out := b.String()
	if !strings.Contains(out, "## Failed turns by reason") || strings.Index(out, "max_model_len") > strings.Index(out, "connection refused") {
		t.Errorf("section:\n%s", out)
	}
	if long := failureReason(&loadgen.Result{Status: 500, Err: strings.Repeat("x", 500)}); len([]rune(long)) > maxReasonRunes+20 {
		t.Errorf("a 500-rune error gave a %d-rune reason", len([]rune(long)))
	}
	b.Reset()
	mdFailuresSection(&b, stageKeys{}, []Summary{{Variant: "on"}})
	if b.Len() != 0 {
		t.Errorf("a section without failures: %q", b.String())
	}
}
