package virtual

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/sim"
)

var sensitivity = flag.Bool("sensitivity", false, "run TestSensitivity: the reference benchmark with each uncertain profile parameter at a low and a high value (docs/simulator.md)")

// TestSensitivity runs the virtual reference benchmark (loadgen.DefaultScenario on 4
// replicas of the a4000-qwen3-4b profile) once as the profile stands and once with
// each uncertain parameter (MFU, bandwidth efficiency, step overhead, activation
// reserve) at a low and a high plausible value, and logs the 4- and 8-session rows
// as a Markdown table (the table in docs/simulator.md). It takes about 30 s, so it
// runs only with -args -sensitivity:
//
//	go test ./internal/run/virtual -run TestSensitivity -v -args -sensitivity
func TestSensitivity(t *testing.T) {
	if !*sensitivity {
		t.Skip("run with -args -sensitivity")
	}
	base := sim.ProfileA4000Qwen3_4B
	type variant struct {
		name string
		mod  func(*sim.Profile)
	}
	variants := []variant{{"as profiled", func(*sim.Profile) {}}}
	for _, v := range []struct {
		param   string
		lo, hi  float64
		set     func(*sim.Profile, float64)
		fmtUnit func(float64) string
	}{
		{"MFU", 0.30, 0.60, func(p *sim.Profile, v float64) { p.MFU = v }, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"BandwidthEff", 0.65, 0.90, func(p *sim.Profile, v float64) { p.BandwidthEff = v }, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"StepOverhead", 1, 8, func(p *sim.Profile, v float64) { p.StepOverhead = time.Duration(v * float64(time.Millisecond)) }, func(v float64) string { return fmt.Sprintf("%.0f ms", v) }},
		{"ActivationBytes", 0.75, 3, func(p *sim.Profile, v float64) { p.ActivationBytes = v * (1 << 30) }, func(v float64) string { return fmt.Sprintf("%.2f GiB", v) }},
	} {
		for _, x := range []float64{v.lo, v.hi} {
			set, x := v.set, x
			variants = append(variants, variant{v.param + " " + v.fmtUnit(x), func(p *sim.Profile) { set(p, x) }})
		}
	}
	var sb strings.Builder
	sb.WriteString("\n| profile | blocks | sessions | TTFB p50 off -> on (s) | TTFB p95 off -> on (s) | out tok/min off -> on | prefix hits % off -> on | sessions/h off -> on |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, v := range variants {
		p := base
		v.mod(&p)
		dir := t.TempDir()
		out, err := loadgen.CreateResults(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Run(context.Background(), Config{
			Scenario: loadgen.DefaultScenario(), Replicas: 4,
			Engine: sim.EngineConfig{Profile: p}, Out: out, RunID: "sensitivity",
		}); err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		sums, err := report.SummarizeDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		row := map[string]map[int]report.Summary{}
		for _, s := range sums {
			if row[s.Variant] == nil {
				row[s.Variant] = map[int]report.Summary{}
			}
			row[s.Variant][s.Sessions] = s
		}
		for _, n := range []int{4, 8} {
			off, on := row["off"][n], row["on"][n]
			if off.TurnsOK == 0 || on.TurnsOK == 0 {
				t.Errorf("%s, %d sessions: no turn completed (off %d, on %d)", v.name, n, off.TurnsOK, on.TurnsOK)
			}
			fmt.Fprintf(&sb, "| %s | %d | %d | %.2f -> %.2f | %.2f -> %.2f | %.0f -> %.0f | %.1f -> %.1f | %.0f -> %.0f |\n",
				v.name, p.NumGPUBlocks(sim.DefaultBlockSize), n,
				off.TTFBP50S, on.TTFBP50S, off.TTFBP95S, on.TTFBP95S,
				off.OutputTokensPerMin, on.OutputTokensPerMin, off.PrefixHitsPct, on.PrefixHitsPct,
				off.SessionsPerH, on.SessionsPerH)
		}
	}
	t.Log(sb.String())
}
