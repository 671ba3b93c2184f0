package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad input to plan: a clear message, the exit code, and no output directory.
func TestPlanBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown profile", []string{"--profile", "h100-80g"}, ExitError, `"h100-80g"`},
		{"bad slo", []string{"--slo", "ttfb_p99=3s"}, ExitError, `unknown term "ttfb_p99"`},
		{"unknown policy", []string{"--policies", "round-robin"}, ExitError, `policy "round-robin"`},
		{"verify with servers", []string{"--server", "http://127.0.0.1:1", "--verify"}, ExitError, "--verify"},
		{"no point meets", []string{"--slo", "ttfb_p95=1ms", "--policies", "working-set", "--max-sessions", "2", "--seeds", "1"}, ExitNoPlan, "no point meets the SLO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "plan")
			args := append([]string{"plan", "--scenario", "../../scenarios/smoke.yaml", "--replicas", "2", "--out", out}, tc.args...)
			_, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want one containing %q", err, tc.want)
			}
			code := ExitError
			var ee *exitError
			if errors.As(err, &ee) {
				code = ee.code
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
				t.Errorf("%s exists after a failed plan", out)
			}
		})
	}
}

// A plan that succeeds prints the fleet's sources and the answer and writes its files.
func TestPlanSmoke(t *testing.T) {
	out := filepath.Join(t.TempDir(), "plan")
	stdout, err := run(t, "plan", "--scenario", "../../scenarios/smoke.yaml", "--replicas", "2", "--seeds", "2",
		"--slo", "ttfb_p95=1s", "--policies", "working-set", "--max-sessions", "8", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	for _, want := range []string{"num_gpu_blocks", "memory arithmetic", "knee sessions", "TTFB p95 s", "TTFB p99 s", "recommended: working-set", "KV-fit rule of thumb"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// The SLO names no p50: no p50 column.
	if strings.Contains(stdout, "TTFB p50 s") {
		t.Errorf("p95 SLO, yet a p50 column:\n%s", stdout)
	}
	for _, f := range []string{"plan.csv", "points.csv", "plan.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
