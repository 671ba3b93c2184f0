package virtual

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim"
)

// BenchmarkAgentReplayMemory replays the Claude Code traces recycled for a
// simulated duration at a number of live session trees, and reports the peak
// live heap (after a GC, sampled every 200 calls) in MB: bounded by the live
// trees, it should not grow with the duration (compare the 1h, 4h and 8h rows
// of one run as ratios).
//
//	go test ./internal/run/virtual -run '^$' -bench AgentReplayMemory -benchtime 1x
func BenchmarkAgentReplayMemory(b *testing.B) {
	dir := filepath.Dir(sharedtrace.Path(b, "claude-code/trace_0277.json"))
	for _, c := range []struct {
		name string
		live int
		dur  time.Duration
	}{{"live8-1h", 8, time.Hour}, {"live8-4h", 8, 4 * time.Hour}, {"live8-8h", 8, 8 * time.Hour}, {"live32-1h", 32, time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				sc := loadgen.DefaultScenario()
				sc.Variants = []string{"on"}
				sc.Trace = &loadgen.TraceSpec{File: dir, Path: dir, Format: loadgen.FormatClaudeCode, TokenScale: 0.125,
					MaxGap: time.Minute, Live: c.live, Recycle: true, Duration: c.dur}
				var peak uint64
				calls := 0
				var ms runtime.MemStats
				sample := func() {
					runtime.GC()
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapAlloc)
				}
				_, err := Run(context.Background(), Config{
					Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: sim.ProfileA4000Qwen3_4B},
					OnResult: func(loadgen.Result) {
						if calls++; calls%200 == 0 {
							sample()
						}
					},
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
				b.ReportMetric(float64(calls), "calls")
			}
		})
	}
}
