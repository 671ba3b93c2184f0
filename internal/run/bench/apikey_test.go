package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Against servers started with --api-key (the simulator's APIKey answers 401 on
// /v1 without the bearer key, as vLLM does): without the key the pre-flight
// stops with a message naming --api-key; with it, a DP server passes the
// pinning check and both variants' turns succeed through the router.
func TestBenchWithAPIKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 1, DataParallelSize: 2, Speed: 20, ReplyTokens: 16, APIKey: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sc := loadgen.DefaultScenario()
	sc.Stages, sc.StageDuration = []int{2}, 4*time.Second // wall time: real servers run at speed 1
	sc.SystemPromptTokens, sc.FirstTurnTokens, sc.TurnTokens, sc.MaxOutputTokens = 100, 200, 50, 16

	_, err = Run(ctx, Options{Scenario: sc, Replicas: cl.URLs(), DPRanks: 2, OutDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "http 401") || !strings.Contains(err.Error(), "--api-key") {
		t.Fatalf("without the key: %v", err)
	}

	dir := filepath.Join(t.TempDir(), "run")
	var progress bytes.Buffer
	if _, err := Run(ctx, Options{Scenario: sc, Replicas: cl.URLs(), DPRanks: 2, OutDir: dir, APIKey: "s3cret", Progress: &progress}); err != nil {
		t.Fatalf("with the key: %v\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "pins ranks") {
		t.Errorf("the pinning check did not pass with the key:\n%s", progress.String())
	}
	sums, err := report.SummarizeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.TurnsOK == 0 || s.TurnsFailed != 0 {
			t.Errorf("%s: %d turns ok, %d failed", s.Variant, s.TurnsOK, s.TurnsFailed)
		}
	}
}
