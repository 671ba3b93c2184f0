package routerhttp

import (
	"io"
	"testing"
	"time"
)

// BenchmarkRecorderClaudeCode: what recording one request costs the router
// (Begin and End, hashing the prompt) on the recorded 52 KB Claude Code
// /v1/messages body, the line written to io.Discard.
func BenchmarkRecorderClaudeCode(b *testing.B) {
	cc := loadFixture(b, "claude-code-2.1.328-turn2.json")
	rec, err := NewRecorder(io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(cc.Body)))
	b.ReportAllocs()
	var now time.Duration
	for b.Loop() {
		now += time.Millisecond
		r := rec.Begin(now, cc.Body, "bench-session")
		rec.End(r, true, 20287, 100)
	}
}
