package bench

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

func virtualRun(t *testing.T, dir string, mutate func(*Options)) string {
	t.Helper()
	sc, err := loadgen.LoadScenario("../../../scenarios/smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Scenario: sc, Virtual: true, OutDir: dir, RunID: filepath.Base(dir)}
	if mutate != nil {
		mutate(&o)
	}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("bench.Run: %v", err)
	}
	return dir
}

var gates = []string{"output_tokens_per_min:-5%", "ttfb_p95_s:+20%"}

func gateOptions(t *testing.T) report.CompareOptions {
	t.Helper()
	var o report.CompareOptions
	for _, g := range gates {
		th, err := report.ParseGate(g)
		if err != nil {
			t.Fatal(err)
		}
		o.FailOn = append(o.FailOn, th)
	}
	return o
}

// Two virtual runs of one seed are identical, so the gate must pass. A deliberately
// worse router setting (affinity "on" served by vLLM-style shortest-queue instead
// of working-set) and a smaller fleet (half the replicas) must both fail it.
func TestRegressionGateCatchesWorseSetting(t *testing.T) {
	t.Parallel()
	base := virtualRun(t, filepath.Join(t.TempDir(), "base"), nil)
	same := virtualRun(t, filepath.Join(t.TempDir(), "same"), nil)
	if _, err := report.Compare(base, same, io.Discard, gateOptions(t)); err != nil {
		t.Fatalf("same seed, same setting: Compare = %v, want nil", err)
	}
	worse := map[string]func(*Options){
		"policy shortest-queue": func(o *Options) { o.Policy = "shortest-queue" },
		"2 replicas":            func(o *Options) { o.SimReplicas = 2 },
	}
	for name, mutate := range worse {
		dir := virtualRun(t, filepath.Join(t.TempDir(), "worse"), mutate)
		_, err := report.Compare(base, dir, io.Discard, gateOptions(t))
		if !errors.Is(err, report.ErrThresholdExceeded) {
			t.Errorf("%s: Compare = %v, want ErrThresholdExceeded", name, err)
		}
	}
}
