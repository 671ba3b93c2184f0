package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// trace_0277 (a parent, three parallel Explore subagents and a Plan
// subagent) in virtual time, affinity off then on: the report's session
// figures agree with turns.jsonl as read here. One tree per variant, every
// call ended: its completion time is its last Done less its first Sent, at
// least the parent's calls back to back; parent and subagent calls add up to
// the turns; the live trees and calls are the tree's and the calls' time over
// the run.
func TestAgentReport0277(t *testing.T) {
	t.Parallel()
	path := sharedtrace.Path(t, "claude-code/trace_0277.json")
	sc := loadgen.DefaultScenario()
	sc.Name, sc.Variants = "agents", []string{"off", "on"}
	sc.Trace = &loadgen.TraceSpec{File: path, Path: path, Format: loadgen.FormatClaudeCode, TokenScale: agentScale, MaxGap: time.Minute}
	dir := filepath.Join(t.TempDir(), "agents")
	var progress, table strings.Builder
	if _, err := Run(context.Background(), Options{Virtual: true, SimReplicas: 4, Profile: DefaultProfile,
		Scenario: sc, OutDir: dir, RunID: "agents", Progress: &progress, Report: &table}); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	run, err := report.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	aggs, trees := report.SummarizeAgents(run)
	if len(aggs) != 2 || len(trees) != 2 {
		t.Fatalf("%d summaries and %d trees, want 2 and 2", len(aggs), len(trees))
	}
	for i, a := range aggs {
		tree, rep := trees[i], run.Manifest.AgentTraces[i]
		var turns, parentCalls int
		var parentBusy, callBusy time.Duration
		first, last := time.Duration(-1), time.Duration(0)
		for _, r := range run.Results {
			if r.Variant != a.Variant {
				continue
			}
			turns++
			callBusy += r.Done - r.Sent
			if r.Trace.Agent.Agent == "" {
				parentCalls++
				parentBusy += r.Done - r.Sent
			}
			if first < 0 || r.Sent < first {
				first = r.Sent
			}
			last = max(last, r.Done)
		}
		d := tree.Duration()
		switch {
		case tree.Variant != a.Variant || !tree.Complete || a.SessionsCompleted != 1 || a.SessionsCut != 0 || tree.Subagents != 4:
			t.Errorf("%s: tree %+v, %d complete, %d cut; want one complete tree of 4 subagents", a.Variant, tree, a.SessionsCompleted, a.SessionsCut)
		case a.ParentCalls+a.SubagentCalls != turns || a.ParentCalls != parentCalls || tree.Calls != turns || turns != rep.Sent:
			t.Errorf("%s: %d parent + %d subagent calls, tree %d, manifest sent %d; turns.jsonl has %d (%d parent)",
				a.Variant, a.ParentCalls, a.SubagentCalls, tree.Calls, rep.Sent, turns, parentCalls)
		case d != last-first || d < parentBusy:
			t.Errorf("%s: completion %v; want last done - first sent %v, at least the parent's calls %v", a.Variant, d, last-first, parentBusy)
		case a.SessionP50S != d.Seconds() || a.SessionP95S != d.Seconds():
			t.Errorf("%s: session p50 %v p95 %v, want %v", a.Variant, a.SessionP50S, a.SessionP95S, d.Seconds())
		}
		w := a.RunSeconds()
		if got, want := a.LiveTreesMean*w, d.Seconds(); got < want*0.999 || got > want*1.001 {
			t.Errorf("%s: live trees x run = %v s, want the tree's %v s", a.Variant, got, want)
		}
		if got, want := a.LiveCallsMean*w, callBusy.Seconds(); got < want*0.999 || got > want*1.001 {
			t.Errorf("%s: live calls x run = %v s, want the calls' %v s", a.Variant, got, want)
		}
		if a.InFlightAtStop != 0 || a.NotSent != 0 || rep.Sent+a.SkippedOverLength != rep.Calls {
			t.Errorf("%s: %+v against the manifest %+v", a.Variant, a, rep)
		}
	}
	if aggs[1].StayedPct <= aggs[0].StayedPct {
		t.Errorf("stayed %% off %.1f, on %.1f: affinity should keep the conversations home", aggs[0].StayedPct, aggs[1].StayedPct)
	}
	for _, f := range []string{report.TreesCSVFile, report.SessionTimeFigureFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("warden bench wrote no %s: %v", f, err)
		}
	}
	if out := table.String(); !strings.Contains(out, "sessions done (complete trees)") || !strings.Contains(out, "window (min)") {
		t.Errorf("warden bench's table lacks the session or window table:\n%s", out)
	}
}
