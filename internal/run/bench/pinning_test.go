package bench

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// A DP server that ignores X-Data-Parallel-Rank stops `bench --replicas URL
// --dp-ranks N` in the pre-flight, before any stage, with an error that says
// so and names the flag that runs anyway; one that honours it passes with a
// line saying so.
func TestBenchPreflightChecksPinning(t *testing.T) {
	t.Parallel()
	for _, ignore := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 1, DataParallelSize: 4, Speed: 20, ReplyTokens: 4, IgnoreRankHeader: ignore})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if ignore {
			sc := loadgen.DefaultScenario()
			sc.Stages, sc.StageDuration, sc.Variants = []int{1}, 10*time.Second, []string{"on"}
			var progress bytes.Buffer
			_, err = Run(ctx, Options{Scenario: sc, Replicas: cl.URLs(), DPRanks: 4, OutDir: t.TempDir(), Progress: &progress})
			if err == nil || !strings.Contains(err.Error(), "is not honoured") || !strings.Contains(err.Error(), "--skip-pinning-check") {
				t.Errorf("server ignoring the header: err %v", err)
			}
			if strings.Contains(progress.String(), "stage") {
				t.Errorf("a stage ran before the pre-flight refused:\n%s", progress.String())
			}
		} else {
			var progress bytes.Buffer
			rcfgs := []routerhttp.ReplicaConfig{{URL: cl.URLs()[0], DPRanks: 4}}
			notes, err := checkPinning(ctx, &progress, rcfgs, "", false, &http.Client{})
			if err != nil || !strings.Contains(progress.String(), "pins ranks") || len(notes) != 1 || !strings.Contains(notes[0], "honored") {
				t.Errorf("server honouring the header: err %v, progress %q, notes %q", err, progress.String(), notes)
			}
			// Skipped: nothing sent, a warning and a manifest note say so.
			progress.Reset()
			notes, err = checkPinning(ctx, &progress, rcfgs, "", true, &http.Client{})
			if err != nil || !strings.Contains(progress.String(), "not checked") || len(notes) != 1 || !strings.Contains(notes[0], "--skip-pinning-check") {
				t.Errorf("skipped: err %v, progress %q, notes %q", err, progress.String(), notes)
			}
		}
		cl.Close()
		cancel()
	}
}
