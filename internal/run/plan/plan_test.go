package plan

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// smokeConfig is a small question: the smoke workload on 2 replicas, 2 seeds
// per point, capped at 16 sessions.
func smokeConfig(t *testing.T) Config {
	t.Helper()
	sc, err := loadgen.LoadScenario("../../../scenarios/smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := FleetFromProfile("a4000-qwen3-4b", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	slo, err := ParseSLO("ttfb_p95=1s,goodput=0.9")
	if err != nil {
		t.Fatal(err)
	}
	return Config{Fleet: f, Scenario: sc, SLO: slo, Seeds: 2, Warmup: 5 * time.Second, MaxSessions: 16, Workers: 1}
}

// answer is what a plan prints, without wall times.
func answer(t *testing.T, r *Result) string {
	t.Helper()
	files, err := r.files()
	if err != nil {
		t.Fatal(err)
	}
	return string(files[FilePlan]) + string(files[FilePoints])
}

// The search's answer per policy: the knee meets the SLO, the first failing
// point above it fails and is the next session count (resolution 1). The same
// seed gives the same answer, byte for byte.
func TestSearchSessions(t *testing.T) {
	c := smokeConfig(t)
	var progress bytes.Buffer
	c.Progress = &progress
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	met := 0
	for _, pr := range r.Policies {
		if pr.Knee == nil {
			continue
		}
		met++
		if !pr.Knee.OK {
			t.Errorf("%s: knee at %d sessions does not meet the SLO", pr.Policy, pr.Knee.Sessions)
		}
		if pr.FirstFail != nil {
			if pr.FirstFail.OK || pr.FirstFail.Sessions != pr.Knee.Sessions+1 || !pr.Resolved {
				t.Errorf("%s: knee %d, first failing %d (ok %v, resolved %v): want the next count, failing", pr.Policy, pr.Knee.Sessions, pr.FirstFail.Sessions, pr.FirstFail.OK, pr.Resolved)
			}
		}
		for _, pt := range pr.Points {
			if len(pt.Samples) != c.Seeds {
				t.Errorf("%s at %d: %d samples, want %d", pr.Policy, pt.Sessions, len(pt.Samples), c.Seeds)
			}
		}
	}
	if met == 0 {
		t.Fatalf("no policy met the SLO: the test's question is too hard\n%s", progress.String())
	}
	if !strings.Contains(progress.String(), "sessions x    2 replicas") {
		t.Errorf("no progress line: %q", progress.String())
	}
	c.Progress = nil
	r2, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := answer(t, r), answer(t, r2); a != b {
		t.Errorf("two runs with the same seed differ:\n%s\n---\n%s", a, b)
	}
}

// An SLO no point meets is an error wrapping ErrNoPoint that names the closest
// point and its failed term.
func TestSearchNoPoint(t *testing.T) {
	c := smokeConfig(t)
	c.SLO, _ = ParseSLO("ttfb_p95=1ms")
	c.Policies = []Policy{mustPolicy(t, "working-set")}
	r, err := Run(context.Background(), c)
	if !errors.Is(err, ErrNoPoint) || r == nil || !strings.Contains(err.Error(), "ttfb_p95") || !strings.Contains(err.Error(), "at 1 sessions") {
		t.Fatalf("err %v; want ErrNoPoint naming the point at 1 session and ttfb_p95", err)
	}
	// It says which counts were tried (Start 2, then 1; not "1 to 16"), and
	// the 1 ms limit reads as such, not rounded to "0.00 s".
	if len(r.Policies[0].Points) != 2 || !strings.Contains(err.Error(), "at session counts 1 and 2 (every point tried)") ||
		!strings.Contains(err.Error(), "> 1 ms") || strings.Contains(err.Error(), "1 to") {
		t.Errorf("err %v; want it to name session counts 1 and 2 as tried and the limit 1 ms", err)
	}
}

// A policy the budget left unsearched reads "not searched (budget)" in the
// table and plan.csv, not "none" (which means no count met the SLO).
func TestBudgetUnsearchedPolicy(t *testing.T) {
	c := smokeConfig(t)
	c.Budget = time.Nanosecond
	c.Policies = []Policy{mustPolicy(t, "working-set"), mustPolicy(t, "shortest-queue")}
	r, _ := Run(context.Background(), c)
	if r == nil || len(r.Policies[1].Points) != 0 {
		t.Fatalf("result %+v; want the second policy without points", r)
	}
	_, rows := r.planRows()
	row := strings.Join(rows[1], "|")
	if !strings.Contains(row, "not searched (budget)") || strings.Contains(row, "none") {
		t.Errorf("row %q: want not searched (budget), no none", row)
	}
}

// The budget stops the search at the first point past it; the answer says so.
func TestSearchBudget(t *testing.T) {
	c := smokeConfig(t)
	c.Budget = time.Nanosecond
	c.Policies = []Policy{mustPolicy(t, "working-set")}
	r, err := Run(context.Background(), c)
	if r == nil || !r.Policies[0].Budget || r.Policies[0].Resolved || len(r.Policies[0].Points) > 1 {
		t.Fatalf("result %+v; want the budget flag, unresolved, at most one point", r)
	}
	// One point, met: an answer marked (budget). None met: ErrBudget, not ErrNoPoint.
	if r.Policies[0].Knee == nil && (!errors.Is(err, ErrBudget) || errors.Is(err, ErrNoPoint)) {
		t.Errorf("no knee within the budget: %v; want ErrBudget", err)
	}
	c.SLO, _ = ParseSLO("ttfb_p95=1ms")
	if _, err := Run(context.Background(), c); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "--budget") {
		t.Errorf("budget spent on a failing point: %v; want ErrBudget naming --budget", err)
	}
}

// The inverse question: the replicas needed meet the SLO, one fewer does not.
func TestSearchReplicas(t *testing.T) {
	c := smokeConfig(t)
	c.InverseSessions = 6
	c.Start = 1
	c.MaxReplicas = 8
	c.Policies = []Policy{mustPolicy(t, "working-set")}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	pr := r.Policies[0]
	if pr.Knee == nil || !pr.Knee.OK || pr.Knee.Sessions != 6 {
		t.Fatalf("knee %+v", pr.Knee)
	}
	if pr.Knee.Replicas > 1 && (pr.FirstFail == nil || pr.FirstFail.Replicas != pr.Knee.Replicas-1 || pr.FirstFail.OK) {
		t.Errorf("needs %d replicas, largest failing %+v: want one fewer, failing", pr.Knee.Replicas, pr.FirstFail)
	}
	if r.Fit.Replicas < 1 {
		t.Errorf("KV-fit replicas %d", r.Fit.Replicas)
	}
}

// Write puts the three files in place; the PNG is a PNG.
func TestWrite(t *testing.T) {
	c := smokeConfig(t)
	c.Policies = []Policy{mustPolicy(t, "shortest-queue"), mustPolicy(t, "admission-fit")}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := Write(dir, r)
	if err != nil || len(paths) != 3 {
		t.Fatalf("Write: %v, %v", paths, err)
	}
	png, _ := os.ReadFile(filepath.Join(dir, FileFigure))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("%s is not a PNG", FileFigure)
	}
	csv, _ := os.ReadFile(filepath.Join(dir, FilePlan))
	if lines := strings.Count(string(csv), "\n"); lines != 3 {
		t.Errorf("%s has %d lines, want a header and 2 policies:\n%s", FilePlan, lines, csv)
	}
	var tbl bytes.Buffer
	if err := WriteTable(&tbl, r); err != nil || !strings.Contains(tbl.String(), "KV-fit rule of thumb") {
		t.Errorf("table: %v\n%s", err, tbl.String())
	}
}

func mustPolicy(t *testing.T, name string) Policy {
	t.Helper()
	p, err := LookupPolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLookupPolicy(t *testing.T) {
	for _, n := range append([]string{"sticky", "session-hash", "cold-move"}, DefaultPolicies...) {
		if _, err := LookupPolicy(n); err != nil {
			t.Errorf("LookupPolicy(%q): %v", n, err)
		}
	}
	if _, err := LookupPolicy("round-robin"); err == nil || !strings.Contains(err.Error(), "admission-fit") {
		t.Errorf("unknown policy: %v; want the list", err)
	}
	if p, _ := LookupPolicy("shortest-queue"); p.Affinity || p.variant() != "off" {
		t.Errorf("shortest-queue is affinity off, got %+v", p)
	}
}

// Verify runs the knee over HTTP on the embedded cluster and reports both
// worlds with the tolerances applied (the smoke workload at speed 10: a few
// seconds; the verdict itself depends on the machine's load and is not checked).
func TestVerifySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs the HTTP world")
	}
	c := smokeConfig(t)
	c.Policies = []Policy{mustPolicy(t, "working-set")}
	c.MaxSessions = 4
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := Verify(context.Background(), r, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 {
		t.Fatalf("%d verifications, want 1", len(vs))
	}
	v := vs[0]
	if v.Sessions != r.Policies[0].Knee.Sessions || v.HTTP.TurnsOK == 0 || v.Virtual.TurnsOK == 0 {
		t.Errorf("verification %+v: want the knee's sessions and turns in both worlds", v)
	}
	if v.HitsLimit < AgreeHitsPoints || v.P50Limit < AgreeP50Frac*v.HTTP.TTFBP50S {
		t.Errorf("limits %.2f points, %.3f s: below the documented tolerances", v.HitsLimit, v.P50Limit)
	}
	var b bytes.Buffer
	if err := WriteVerification(&b, vs, 10); err != nil || !strings.Contains(b.String(), "http") || !strings.Contains(b.String(), "virtual seeds mean") {
		t.Errorf("verification table: %v\n%s", err, b.String())
	}
}

// A trace scenario is refused with the reason (the search varies sessions).
func TestTraceScenarioRefused(t *testing.T) {
	c := smokeConfig(t)
	c.Scenario.Trace = &loadgen.TraceSpec{File: "conversation_trace.jsonl"}
	if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "cannot yet scale") {
		t.Errorf("err %v; want the trace named", err)
	}
}
