package virtual

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/sim"
)

// TestNetworkSensitivity runs the virtual reference benchmark (stages 4 and 8 of
// loadgen.DefaultScenario, 3 minutes each, seeds 1-3, 4 replicas of
// a4000-qwen3-4b) with the network and the API server (docs/simulator.md section
// 9) varied one at a time around the reference's values, and logs the means over
// the seeds as a Markdown table (the sensitivity band in docs/simulator.md). It
// runs only with -args -sensitivity:
//
//	go test ./internal/run/virtual -run TestNetworkSensitivity -v -args -sensitivity
func TestNetworkSensitivity(t *testing.T) {
	if !*sensitivity {
		t.Skip("run with -args -sensitivity")
	}
	type variant struct {
		name  string
		scale float64 // front-end costs x scale
		mod   func(*loadgen.Scenario)
	}
	rtt := func(d time.Duration, jitterPct int) func(*loadgen.Scenario) {
		return func(sc *loadgen.Scenario) {
			sc.RTT = d
			j := d * time.Duration(jitterPct) / 100
			sc.RTTSpread = loadgen.DurationRange{}
			if j > 0 {
				sc.RTTSpread = loadgen.DurationRange{Min: d - j, Max: d + j}
			}
		}
	}
	var variants []variant
	variants = append(variants, variant{"lock-step (no network, no API server)", 0, func(sc *loadgen.Scenario) {
		rtt(0, 0)(sc)
		sc.APIServers = 0
	}})
	variants = append(variants, variant{"reference (50 ms ±5, 4 API servers)", 1, func(*loadgen.Scenario) {}})
	for _, ms := range []int{0, 5, 10, 25, 100, 150, 200} {
		variants = append(variants, variant{fmt.Sprintf("rtt %d ms ±10%%", ms), 1, rtt(time.Duration(ms)*time.Millisecond, 10)})
	}
	variants = append(variants,
		variant{"rtt 50 ms, no jitter", 1, rtt(50*time.Millisecond, 0)},
		variant{"rtt 0, API server only (4)", 1, rtt(0, 0)},
		variant{"1 API server", 1, func(sc *loadgen.Scenario) { sc.APIServers = 1 }},
		variant{"front-end costs x0", 0, func(*loadgen.Scenario) {}},
		variant{"front-end costs x3", 3, func(*loadgen.Scenario) {}},
		variant{"1 API server, front-end costs x3", 3, func(sc *loadgen.Scenario) { sc.APIServers = 1 }},
	)
	seeds := []uint64{1, 2, 3}
	var sb strings.Builder
	sb.WriteString("\n| setting | sessions | TTFB p50 off -> on (s) | TTFB p95 off -> on (s) | prefix hits % off -> on | replicas busy off -> on | out tok/min off -> on | stayed % off |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, v := range variants {
		mean := map[string]map[int]*report.Summary{"off": {}, "on": {}}
		for _, seed := range seeds {
			sc := loadgen.DefaultScenario()
			sc.Seed = seed
			sc.Stages = []int{4, 8}
			v.mod(sc)
			p := sim.ProfileA4000Qwen3_4B
			c := p.Frontend
			c.ChatTemplate = time.Duration(float64(c.ChatTemplate) * v.scale)
			c.TokenizePerToken = time.Duration(float64(c.TokenizePerToken) * v.scale)
			c.EngineCoreHop = time.Duration(float64(c.EngineCoreHop) * v.scale)
			c.DetokenizePerToken = time.Duration(float64(c.DetokenizePerToken) * v.scale)
			p.Frontend = c
			dir := t.TempDir()
			out, err := loadgen.CreateResults(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Run(context.Background(), Config{
				Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: p}, Out: out, RunID: "network-sensitivity",
			}); err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			sums, err := report.SummarizeDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sums {
				m := mean[s.Variant][s.Sessions]
				if m == nil {
					m = &report.Summary{}
					mean[s.Variant][s.Sessions] = m
				}
				k := float64(len(seeds))
				m.TurnsOK += s.TurnsOK
				m.TTFBP50S += s.TTFBP50S / k
				m.TTFBP95S += s.TTFBP95S / k
				m.PrefixHitsPct += s.PrefixHitsPct / k
				m.ReplicasBusy += s.ReplicasBusy / k
				m.OutputTokensPerMin += s.OutputTokensPerMin / k
				m.StayedPct += s.StayedPct / k
			}
		}
		for _, n := range []int{4, 8} {
			off, on := mean["off"][n], mean["on"][n]
			if off == nil || on == nil || off.TurnsOK == 0 || on.TurnsOK == 0 {
				t.Fatalf("%s, %d sessions: no turn completed", v.name, n)
			}
			fmt.Fprintf(&sb, "| %s | %d | %.2f -> %.2f | %.2f -> %.2f | %.1f -> %.1f | %.2f -> %.2f | %.0f -> %.0f | %.0f |\n",
				v.name, n, off.TTFBP50S, on.TTFBP50S, off.TTFBP95S, on.TTFBP95S,
				off.PrefixHitsPct, on.PrefixHitsPct, off.ReplicasBusy, on.ReplicasBusy,
				off.OutputTokensPerMin, on.OutputTokensPerMin, off.StayedPct)
		}
	}
	t.Log(sb.String())
}
