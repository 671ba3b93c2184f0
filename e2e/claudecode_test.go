package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// claudePackage is the npm package of the Claude Code CLI.
const claudePackage = "@anthropic-ai/claude-code"

// claudeModel is the served model name the simulator answers to and the CLI is
// told with --model.
const claudeModel = "warden-sim-model"

// claudeOutputTokens caps the CLI's max_tokens. Claude Code asks for 32,000 output
// tokens by default; a vLLM server (or the simulator) with max_model_len 32,768
// rejects that with 400 once the prompt passes ~770 tokens, and Claude Code's
// first prompt is ~20,000 tokens. CLAUDE_CODE_MAX_OUTPUT_TOKENS is the CLI's own
// setting for this (docs/router.md says the same for real deployments).
const claudeOutputTokens = "4096"

// claudeCode is the Claude Code CLI as the e2e tests install and find it.
var claudeCode = npmCLI{what: "Claude Code", pkg: claudePackage, bin: "claude", envVar: "WARDEN_CLAUDE", dir: "claude-code",
	env: func(string) []string {
		return []string{"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	}}

// claudeCLI returns a working Claude Code binary (npmCLI.find).
func claudeCLI(t *testing.T) (bin, version string) { return claudeCode.find(t) }

// runClaude runs the CLI once in dir with HOME=home against baseURL, bounded to
// 90 s, and returns what it printed.
func runClaude(t *testing.T, bin, home, dir, baseURL string, args ...string) string {
	t.Helper()
	// A minimal environment: nothing of the caller's (no real API keys or
	// Claude Code settings) reaches the CLI.
	return runCLI(t, "claude", bin, dir, 90*time.Second, []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"TERM=dumb",
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=any",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_MAX_OUTPUT_TOKENS=" + claudeOutputTokens,
	}, args...)
}

// runCLI runs bin once in dir with exactly env, no standard input, bounded to
// limit, and returns its stdout; a timeout or a non-zero exit fails the test
// with the output's last lines. name labels the log lines.
func runCLI(t *testing.T, name, bin, dir string, limit time.Duration, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, env, nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %v, %d bytes out", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.Len())
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("%s %s: timed out after %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), limit, lastLines(stdout.String(), 5), lastLines(stderr.String(), 10))
	}
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, lastLines(stdout.String(), 5), lastLines(stderr.String(), 10))
	}
	return stdout.String()
}

// TestClaudeCodeThroughRouter runs the real Claude Code CLI through the router to
// two simulated replicas: two turns of one session (`-p`, then `-p --continue`),
// then one turn of a second session (another HOME), and checks from what the
// router saw that every request of the first session went to one replica, placed
// once and sticky after, and that the second session is a different one, placed
// on its own.
func TestClaudeCodeThroughRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Claude Code test in -short mode")
	}
	bin, version := claudeCLI(t)
	t.Logf("Claude Code %s at %s", version, bin)
	f := startFleet(t, simhttp.Config{Replicas: 2, Speed: 10, Model: claudeModel}, 32)
	f.waitScraped(t)

	home1, work1 := t.TempDir(), t.TempDir()
	out1 := runClaude(t, bin, home1, work1, f.url, "-p", "say hi", "--model", claudeModel)
	n1 := len(f.log.all())
	out2 := runClaude(t, bin, home1, work1, f.url, "-p", "again", "--continue", "--model", claudeModel)
	n2 := len(f.log.all())
	home2, work2 := t.TempDir(), t.TempDir()
	out3 := runClaude(t, bin, home2, work2, f.url, "-p", "say hi", "--model", claudeModel)
	for i, out := range []string{out1, out2, out3} {
		if strings.TrimSpace(out) == "" {
			t.Errorf("run %d printed nothing", i+1)
		}
	}

	reqs := f.log.all()
	for i, r := range reqs {
		run := 3
		switch {
		case i < n1:
			run = 1
		case i < n2:
			run = 2
		}
		t.Logf("run %d request %d: %s", run, i+1, r)
	}
	if n1 == 0 || n2 == n1 || len(reqs) == n2 {
		t.Fatalf("want requests from each run; got %d, %d, %d", n1, n2-n1, len(reqs)-n2)
	}
	for _, r := range reqs {
		if r.Status != 200 {
			t.Errorf("request %s: status %d", r.Path, r.Status)
		}
	}

	// Session A: what runs 1 and 2 sent; it must be one session on one replica.
	sessA := reqs[0].Session
	if sessA == "" {
		t.Fatalf("Claude Code sent no session id: %s", reqs[0])
	}
	replicaA := reqs[0].Replica
	placedA := 0
	for _, r := range reqs[:n2] {
		if r.Session != sessA {
			t.Errorf("runs 1-2 sent session %q and %q: --continue should keep the session", sessA, r.Session)
			continue
		}
		if r.Replica != replicaA {
			t.Errorf("session A request %s went to %s (%s), want its home %s", r.Path, r.Replica, r.Decision, replicaA)
		}
		switch r.Decision {
		case router.ReasonPlaced.String():
			placedA++
		case router.ReasonSticky.String():
		default:
			t.Errorf("session A request %s: decision %s, want placed or sticky", r.Path, r.Decision)
		}
	}
	if placedA != 1 {
		t.Errorf("session A placed %d times, want once", placedA)
	}
	// Session B: run 3, a new HOME, so a new session, placed on its own.
	sessB := reqs[n2].Session
	if sessB == "" || sessB == sessA {
		t.Fatalf("run 3 sent session %q; want a new session (A is %q)", sessB, sessA)
	}
	if reqs[n2].Decision != router.ReasonPlaced.String() {
		t.Errorf("session B's first request: decision %s, want placed", reqs[n2].Decision)
	}
	for _, r := range reqs[n2:] {
		if r.Session != sessB || r.Replica != reqs[n2].Replica {
			t.Errorf("run 3 request %s: session %q on %s; want session B on %s", r.Path, r.Session, r.Replica, reqs[n2].Replica)
		}
	}
	t.Logf("session A on %s for %d requests; session B on %s", replicaA, n2, reqs[n2].Replica)

	// The router's own counters agree with what the log saw.
	st := f.rt.Status().Models[0]
	var served, homed uint64
	for _, r := range st.Replicas {
		served += r.ServedTotal
		homed += uint64(r.Sessions)
		t.Logf("router status %s: served %d %v, sessions homed %d", r.Name, r.ServedTotal, r.ServedBy, r.Sessions)
	}
	if served != uint64(len(reqs)) {
		t.Errorf("router counted %d requests, the log %d", served, len(reqs))
	}
	if st.Sessions != 2 || homed != 2 {
		t.Errorf("router has %d sessions (%d homed), want 2", st.Sessions, homed)
	}

	// What affinity is for: session A's second turn found its prefix cached on its
	// replica (the simulator's prefix cache, read from its /metrics).
	for _, r := range st.Replicas {
		if r.Name != replicaA {
			continue
		}
		resp, err := http.Get(r.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		snap, err := scrape.Parse(resp.Body)
		resp.Body.Close()
		if err != nil || len(snap.Engines) == 0 {
			t.Fatalf("scraping %s: %v", r.Name, err)
		}
		e := snap.Engines[0]
		t.Logf("%s prefix cache: %.0f of %.0f prompt tokens read from cache", r.Name, e.PrefixHits, e.PrefixQueries)
		if e.PrefixHits <= 0 {
			t.Errorf("%s: no prefix-cache hits after session A's second turn", r.Name)
		}
	}
}
