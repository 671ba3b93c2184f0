package virtual

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/sim"
)

// TestStepSpreadSensitivity runs the virtual reference benchmark over seeds
// 1-10 with the step-time spread at the sourced values (0, SGLang's 0.013,
// vLLM's 0.10 and the 0.46 that includes other requests' prefills;
// docs/simulator.md section 10) and the KV capacity from the lumped reserve
// or from vLLM's start-up terms, and logs how often the 4-session "off"
// stage stays in lock-step (prefix hits >= 70 %, midway between the
// lock-step's ~80 % and the scatter's ~60 %) as a Markdown table. About 80
// runs, so only with -args -sensitivity:
//
//	go test ./internal/run/virtual -run TestStepSpreadSensitivity -v -args -sensitivity
func TestStepSpreadSensitivity(t *testing.T) {
	if !*sensitivity {
		t.Skip("run with -args -sensitivity")
	}
	var sb strings.Builder
	sb.WriteString("\n| memory | sigma | off/4 lock-step (of 10) | off/4 hits % mean (min-max) | off/4 TTFB p50 s median (max) | off/8 hits % mean | on/16 TTFB p50 s mean | on/16 hits % mean |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, mem := range []sim.Profile{sim.ProfileA4000Qwen3_4BLockstep, sim.ProfileA4000Qwen3_4B} {
		for _, sigma := range []float64{0, 0.013, sim.VLLMStepTimeSigma, 0.46} {
			p := mem
			p.StepTimeSigma = sigma
			var hits4, p50s4 []float64
			var hits8, p50on16, hitsOn16 float64
			lock := 0
			for seed := uint64(1); seed <= 10; seed++ {
				sc := loadgen.DefaultScenario()
				sc.Seed = seed
				dir := t.TempDir()
				out, err := loadgen.CreateResults(dir)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Run(context.Background(), Config{Scenario: sc, Replicas: 4,
					Engine: sim.EngineConfig{Profile: p}, Out: out, RunID: "spread"}); err != nil {
					t.Fatalf("%s sigma %v seed %d: %v", mem.Name, sigma, seed, err)
				}
				sums, err := report.SummarizeDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range sums {
					switch {
					case s.Variant == "off" && s.Sessions == 4:
						hits4 = append(hits4, s.PrefixHitsPct)
						p50s4 = append(p50s4, s.TTFBP50S)
						if s.PrefixHitsPct >= 70 {
							lock++
						}
					case s.Variant == "off" && s.Sessions == 8:
						hits8 += s.PrefixHitsPct / 10
					case s.Variant == "on" && s.Sessions == 16:
						p50on16 += s.TTFBP50S / 10
						hitsOn16 += s.PrefixHitsPct / 10
					}
				}
			}
			if len(hits4) != 10 {
				t.Fatalf("%s sigma %v: %d off/4 rows, want 10", mem.Name, sigma, len(hits4))
			}
			var mean float64
			for _, h := range hits4 {
				mean += h / 10
			}
			slices.Sort(p50s4)
			fmt.Fprintf(&sb, "| %s (%d blocks) | %.3g | %d | %.1f (%.1f-%.1f) | %.2f (%.2f) | %.1f | %.2f | %.1f |\n",
				mem.Name, mem.NumGPUBlocks(sim.DefaultBlockSize), sigma, lock, mean, slices.Min(hits4), slices.Max(hits4),
				(p50s4[4]+p50s4[5])/2, p50s4[9], hits8, p50on16, hitsOn16)
		}
	}
	t.Log(sb.String())
}
