package loadgen

import (
	"testing"
)

// BenchmarkNextTurn measures generating a reference first turn (6k words) plus a
// later turn (400 words).
func BenchmarkNextTurn(b *testing.B) {
	w := NewWorkload(DefaultScenario())
	b.ReportAllocs()
	i := int64(0)
	for b.Loop() {
		s := w.Session(i)
		i++
		s.NextTurn(0)
		s.AddReply("ok")
		s.NextTurn(0)
	}
}
