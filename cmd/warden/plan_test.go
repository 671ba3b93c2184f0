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
		// Session trees (shape agent).
		{"trees over max_model_len", []string{"--scenario", agentScenario(t, "token_scale: 0.25")}, ExitError, "agent.token_scale 0.25 maps agent.context_window 200000 to 50000 tokens, over the fleet's max_model_len 32768"},
		{"trees with a chain field", []string{"--scenario", agentScenario(t, "token_scale: 0.125", "turns: 4")}, ExitError, "turns: applies to shape chain only"},
		{"trees verified over HTTP", []string{"--scenario", agentScenario(t, "token_scale: 0.125"), "--verify"}, ExitError, "--verify: not for scenario \"plan-trees\" of shape agent"},
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

// agentScenario writes a small scenario of shape agent (synthesized session
// trees, 2-minute stages, gaps capped at 10 s) with agentLine under agent:
// and the top-level lines extra, and returns its path.
func agentScenario(t *testing.T, agentLine string, extra ...string) string {
	t.Helper()
	y := "name: plan-trees\nseed: 1\napi: openai-chat\nsession_header: claude-code\nshape: agent\nagent:\n  " + agentLine +
		"\n  max_gap: 10s\nstages: [2]\nstage_duration: 2m\nvariants: [\"on\"]\nrequest_timeout: 10m\nfailure_backoff: 1s\n" + strings.Join(extra, "\n") + "\n"
	p := filepath.Join(t.TempDir(), "trees.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A plan over session trees (shape agent) answers in live trees: the
// definition line, the trees' columns, no KV-fit figure, and points.csv
// with the session times; refused before it ran at all.
func TestPlanAgentSessions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "plan")
	stdout, err := run(t, "plan", "--scenario", agentScenario(t, "token_scale: 0.125"), "--replicas", "2", "--seeds", "2",
		"--warmup", "30s", "--slo", "ttfb_p95=5s", "--policies", "working-set", "--max-sessions", "8", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	for _, want := range []string{"scenario plan-trees", "sessions: live session trees", "point's run of 2m30s", "knee sessions", "trees done/h", "session p50 s", "session p95 s",
		"recommended: working-set at", "live trees", "KV-fit rule of thumb: n/a for session trees"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "sessions/h") {
		t.Errorf("a sessions/h column for trees:\n%s", stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, "points.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := strings.Cut(string(b), "\n"); !strings.Contains(h, ",trees_done_per_h,session_p50_s,session_p95_s,trees_done,trees_cut,") {
		t.Errorf("points.csv header %q", h)
	}
}
