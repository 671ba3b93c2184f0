package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

func TestTraceFiguresAndSection(t *testing.T) {
	png, err := TraceCurveFigure("t", []TraceCurvePoint{{1e5, 4.3}, {1e6, 5.6}, {0, 9}, {1e7, math.NaN()}}, 37.3)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("figure: %v", err)
	}
	m := &loadgen.Manifest{Scenario: &loadgen.Scenario{Trace: &loadgen.TraceSpec{File: "x.jsonl", Window: 5 * time.Minute}},
		Variants: []loadgen.Variant{{Name: "on", Stages: []loadgen.StageWindow{{Start: time.Hour}, {Start: time.Hour + 5*time.Minute}}}},
		Traces: []loadgen.TraceReplay{{Variant: "on", Requests: 3, Sent: 3, Conversations: 2, TurnsPerConversation: map[int]int{1: 1, 2: 1},
			CeilingPct: 30, Windows: []loadgen.TraceWindow{{Requests: 2, CeilingPct: 20}, {Requests: 1, CeilingPct: 50}}}}}
	sums := []Summary{{Variant: "on", Sessions: 7, WindowStart: time.Hour, WindowEnd: time.Hour + 5*time.Minute, PrefixHitsPct: 10},
		{Variant: "on", Stage: 1, Sessions: 3, WindowStart: time.Hour + 5*time.Minute, WindowEnd: time.Hour + 10*time.Minute, PrefixHitsPct: 12}}
	ax := stageAxisOf(m, sums)
	if ax.x(&sums[0]) != 0 || ax.x(&sums[1]) != 5 || !strings.Contains(ax.label, "replay time") {
		t.Errorf("trace axis %q: x %v, %v; want 0 and 5 minutes", ax.label, ax.x(&sums[0]), ax.x(&sums[1]))
	}
	var b strings.Builder
	traceSection(&b, m, sums)
	for _, want := range []string{"## Trace replay", "| on | 3 | 3 | 0 | 2 | 1: 1, 2: 1 | 30.0 | n/a (fleet KV unknown) |", "| on | 5-10 | 1 | 0 | 12.0 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, b.String())
		}
	}
	m.Scenario.Trace = nil
	if ax := stageAxisOf(m, sums); ax.x(&sums[0]) != 7 {
		t.Errorf("synthetic axis x %v, want the sessions", ax.x(&sums[0]))
	}
}

// A request trace's report is laid out by window, not by stage: windows in
// minutes since each variant's start (so off and on align), conversations
// started rather than sessions held, no closed-loop target or its notes,
// sessions done n/a, a window without arrivals marked (drain).
func TestTraceReportIsLaidOutByWindow(t *testing.T) {
	stages := func(start time.Duration) []loadgen.StageWindow {
		return []loadgen.StageWindow{{Start: start}, {Start: start + 5*time.Minute}}
	}
	m := &loadgen.Manifest{Scenario: &loadgen.Scenario{Trace: &loadgen.TraceSpec{File: "x.jsonl", Window: 5 * time.Minute}},
		Variants: []loadgen.Variant{{Name: "off", Stages: stages(0)}, {Name: "on", Affinity: true, Stages: stages(time.Hour)}}}
	sum := func(v string, stage, sessions int, start time.Duration) Summary {
		return Summary{Variant: v, Stage: stage, Sessions: sessions, WindowStart: start, WindowEnd: start + 5*time.Minute, Complete: true,
			TurnsOK: 10, Concurrency: Concurrency{Target: math.NaN(), Pct: math.NaN()}}
	}
	sums := []Summary{sum("off", 0, 7, 0), sum("off", 1, 0, 5*time.Minute), sum("on", 0, 7, time.Hour), sum("on", 1, 0, time.Hour+5*time.Minute)}
	md := string(SummaryMarkdown(m, sums, nil, nil))
	for _, want := range []string{"## Per report window, off -> on", "| window (min) | conversations started |", "| 0-5 | 7 -> 7 |",
		"| 5-10 (drain) | 0 -> 0 |", "| on | 0-5 | 7 | 300 | n/a |", "conversations done"} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	for _, bad := range []string{"1h0m", "the loop can hold", "Per stage"} {
		if strings.Contains(md, bad) {
			t.Errorf("summary has %q", bad)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

// sessions_per_h.png is left out, with the reason, for any trace replay: a
// request trace marks no conversation's end, and an agent replay's windows
// have n/a (its trees are in the whole-run table); a closed-loop run draws it.
func TestSessionsPerHLeftOutForTraces(t *testing.T) {
	stages := []loadgen.StageWindow{{Start: 0}}
	sums := []Summary{{Variant: "on", Sessions: 3, WindowEnd: 5 * time.Minute, Complete: true, TurnsOK: 1}}
	for _, c := range []struct {
		name    string
		m       loadgen.Manifest
		omitted string
	}{
		{"trace", loadgen.Manifest{Scenario: &loadgen.Scenario{Trace: &loadgen.TraceSpec{File: "x.jsonl"}}}, "request trace"},
		{"agent", loadgen.Manifest{Scenario: &loadgen.Scenario{Trace: &loadgen.TraceSpec{File: "d/"}}, AgentTraces: []loadgen.AgentReplay{{Variant: "on"}}}, "whole-run table"},
		{"closed loop", loadgen.Manifest{Scenario: loadgen.DefaultScenario()}, ""},
	} {
		c.m.Variants = []loadgen.Variant{{Name: "on", Affinity: true, Stages: stages}}
		figs, err := WritePlots(t.TempDir(), &Run{Manifest: c.m}, sums)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		found := false
		for _, f := range figs {
			if c.omitted != "" && strings.Contains(f.Title, "vs sessions") {
				t.Errorf("%s: figure %s titled %q: its x axis is the replay's time", c.name, f.File, f.Title)
			}
			if f.File != "sessions_per_h.png" {
				continue
			}
			found = true
			if c.omitted == "" && f.Omitted != "" || c.omitted != "" && !strings.Contains(f.Omitted, c.omitted) {
				t.Errorf("%s: sessions_per_h.png omitted %q, want %q", c.name, f.Omitted, c.omitted)
			}
		}
		if !found {
			t.Errorf("%s: no sessions_per_h.png figure", c.name)
		}
	}
}

// A synthesized agent run's header says what ran: the shape, its stages in
// live trees, its token scale and gap cap, and none of the chain's prompt
// sizes, turns or think time (which it printed before, from the defaults).
func TestSynthesizedAgentHeader(t *testing.T) {
	sc := loadgen.DefaultScenario()
	sc.Name, sc.Shape, sc.Stages = "agent-sessions", loadgen.ShapeAgent, []int{8}
	m := &loadgen.Manifest{Scenario: sc, Seed: 1, AgentTraces: []loadgen.AgentReplay{{Variant: "on", Format: "synthesized", TokenScale: 0.125, BlockSize: 8, MaxGap: time.Minute}}}
	var b strings.Builder
	mdScenarioLines(&b, m)
	got := b.String()
	for _, want := range []string{"shape agent (synthesized session trees), stages 8 live trees", "format synthesized, token scale 0.125", "max gap 1m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("header lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"first turn", "think time", "0 files", "live trees, each session"} {
		if strings.Contains(got, bad) {
			t.Errorf("header has %q:\n%s", bad, got)
		}
	}
}
