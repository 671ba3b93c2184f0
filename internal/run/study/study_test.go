package study

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// smallSetup is a few seconds of simulated traffic on a tiny KV cache, so that
// working sets overflow it and every code path runs in well under a second.
func smallSetup() Setup {
	sc := &loadgen.Scenario{
		Name: "tiny", Seed: 7,
		SystemPromptTokens: 300, FirstTurnTokens: 600, TurnTokens: 80, Turns: 3,
		MaxOutputTokens: 32, ThinkTime: 500 * time.Millisecond,
		Stages: []int{2, 6}, StageDuration: 20 * time.Second,
		FirstTurnSpread: loadgen.TokenRange{Min: 500, Max: 700},
	}
	return Setup{Name: "tiny", Scenario: sc.WithDefaults(), Replicas: 2, Profile: sim.ProfileA4000Qwen3_4B, MaxNumSeqs: 8, NumGPUBlocks: 400}
}

func TestRunOneProducesStagesAndTrace(t *testing.T) {
	s := smallSetup()
	for _, name := range []string{ArmShortestQueue, ArmWorkingSet, ArmUnlimitedCache, "place-lagged-in-flight"} {
		t.Run(name, func(t *testing.T) {
			a, err := LookupArm(name)
			if err != nil {
				t.Fatal(err)
			}
			r, err := RunOne(context.Background(), s, a, 3, RunOptions{Trace: true, Placements: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Stages) != 2 {
				t.Fatalf("%d stages", len(r.Stages))
			}
			for _, st := range r.Stages {
				if st.TurnsOK == 0 {
					t.Fatalf("stage %d: no turns", st.Stage)
				}
				if !(st.BoundHitsPct > 0 && st.BoundHitsPct <= 100) {
					t.Fatalf("stage %d: bound %v", st.Stage, st.BoundHitsPct)
				}
				// Counters and usage measure the same hits here (no double counting).
				if math.Abs(st.PrefixHitsPct-st.UsageCachedPct) > 15 {
					t.Fatalf("stage %d: counters %.1f%% vs usage %.1f%%", st.Stage, st.PrefixHitsPct, st.UsageCachedPct)
				}
				if st.FleetKVTokens != float64(2*399*16) {
					t.Fatalf("fleet KV %v", st.FleetKVTokens)
				}
			}
			if r.Trace == nil || len(r.Trace.Replicas) != 2 || len(r.Trace.Placements) == 0 {
				t.Fatalf("trace %+v", r.Trace)
			}
			if len(r.Placements) == 0 {
				t.Fatal("no placements recorded")
			}
			// Every conversation in the trace was placed once by the router; the
			// router may have placed a few more whose first turn was still in
			// flight when the run ended (aborted turns are not recorded).
			first := 0
			for _, p := range r.Placements {
				if p.Reason == router.ReasonPlaced || p.Reason == router.ReasonBalanced && p.Home < 0 {
					first++
				}
			}
			if extra := first - len(r.Trace.Placements); name != ArmShortestQueue && (extra < 0 || extra > 6) {
				t.Fatalf("%d router placements, %d conversations in the trace", first, len(r.Trace.Placements))
			}
		})
	}
}

// TestUnlimitedCacheBoundMatchesEngine: with a cache that never evicts and
// sticky placement, the engine's own per-request cached share equals the
// analytic bound except for each replica's first sight of the system prompt.
func TestUnlimitedCacheBoundMatchesEngine(t *testing.T) {
	a, _ := LookupArm(ArmUnlimitedCache)
	r, err := RunOne(context.Background(), smallSetup(), a, 5, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := r.Stages[len(r.Stages)-1]
	if last.UsageCachedPct > last.BoundHitsPct+0.01 || last.BoundHitsPct-last.UsageCachedPct > 3 {
		t.Fatalf("usage %.2f%% vs bound %.2f%%", last.UsageCachedPct, last.BoundHitsPct)
	}
}

func TestBound(t *testing.T) {
	ok := func(session int64, turn, prompt, out int, done time.Duration) loadgen.Result {
		return loadgen.Result{Variant: "on", Session: session, Turn: turn, PromptTokens: prompt, OutputTokens: out, Status: 200, Done: done}
	}
	results := []loadgen.Result{
		ok(1, 0, 1000, 50, 1*time.Second), // system 320 -> 320 cached
		ok(1, 1, 1200, 50, 2*time.Second), // reuse 1049 -> 1040
		ok(2, 0, 100, 10, 3*time.Second),  // system capped at prompt-1 = 99 -> 96
		ok(2, 1, 500, 10, 30*time.Second), // outside the window
		{Variant: "on", Session: 3, Status: 500, PromptTokens: 999, Done: 2 * time.Second}, // failed: left out
		{Variant: "off", Session: 1, Turn: 1, Status: 200, PromptTokens: 999, Done: 2 * time.Second},
	}
	got := Bound(results, "on", 0, 10*time.Second, 320, 16)
	want := 100 * float64(320+1040+96) / float64(1000+1200+100)
	if math.Abs(got-want) > 1e-9 {
		t.Fatalf("bound %v, want %v", got, want)
	}
	if !math.IsNaN(Bound(results, "on", time.Hour, 2*time.Hour, 320, 16)) {
		t.Fatal("empty window should be NaN")
	}
}

func TestAggregateAndAcceptance(t *testing.T) {
	mk := func(arm string, seed uint64, p50, p95, out, hits, bound, busy, fit float64) *RunResult {
		st := Stage{FitRatio: fit, BoundHitsPct: bound}
		st.Stage, st.Sessions = 0, 16
		st.TTFBP50S, st.TTFBP95S, st.OutputTokensPerMin, st.PrefixHitsPct, st.ReplicasBusy = p50, p95, out, hits, busy
		return &RunResult{Setup: "s", Arm: arm, Seed: seed, Stages: []Stage{st}}
	}
	runs := []*RunResult{
		mk(ArmShortestQueue, 1, 5, 15, 9000, 40, 85, 4, 0.9), mk(ArmShortestQueue, 2, 5.2, 16, 9100, 41, 85, 4, 0.9),
		mk(ArmSticky, 1, 2, 14, 13000, 76, 86, 3.8, 0.9), mk(ArmSticky, 2, 2.2, 13, 13100, 77, 86, 3.8, 0.9),
		mk(ArmWorkingSet, 1, 2.1, 13.5, 13050, 78, 86, 4, 0.9), mk(ArmWorkingSet, 2, 1.9, 20, 12000, 79, 86, 4, 0.9),
	}
	rows := Aggregate(runs)
	if len(rows) != 3 || rows[0].Arm != ArmShortestQueue || rows[2].Arm != ArmWorkingSet {
		t.Fatalf("rows %+v", rows)
	}
	c := rows[1].Cells["ttfb_p50_s"]
	if c.N != 2 || math.Abs(c.Mean-2.1) > 1e-9 || math.Abs(c.SD-math.Sqrt(0.02)) > 1e-9 || c.Min != 2 || c.Max != 2.2 {
		t.Fatalf("cell %+v", c)
	}
	checks := Acceptance(rows, "s", ArmWorkingSet, []string{ArmShortestQueue, ArmSticky}, 4)
	met := map[string]bool{}
	for _, ch := range checks {
		met[ch.What] = ch.Met
	}
	want := map[string]bool{
		"TTFB p50 (s)":      true, // 2.0 vs sticky 2.1
		"TTFB p95 (s)":      true, // 16.75 vs 13.5, but the spread across seeds is wide
		"output tokens/min": true,
		"prefix hits vs unlimited-cache bound (working set fits)": true, // 78.5 of 86
		"replicas busy": true,
	}
	for k, v := range want {
		if got, ok := met[k]; !ok || got != v {
			t.Errorf("%s: met=%v (present %v), want %v", k, got, ok, v)
		}
	}
	// A clear loss is flagged.
	runs = append(runs[:4], mk(ArmWorkingSet, 1, 9, 30, 5000, 20, 86, 3, 0.9), mk(ArmWorkingSet, 2, 9.1, 31, 5100, 21, 86, 3, 0.9))
	for _, ch := range Acceptance(Aggregate(runs), "s", ArmWorkingSet, []string{ArmShortestQueue, ArmSticky}, 4) {
		if ch.Met {
			t.Errorf("%s met by a clearly worse candidate: %+v", ch.What, ch)
		}
	}
}

func TestStudyRunWritesFiles(t *testing.T) {
	dir := t.TempDir()
	var progress bytes.Buffer
	arms := []Arm{}
	for _, n := range []string{ArmShortestQueue, ArmSticky, ArmWorkingSet} {
		a, _ := LookupArm(n)
		arms = append(arms, a)
	}
	runs, err := Run(context.Background(), Options{Setups: []Setup{smallSetup()}, Arms: arms, Seeds: []uint64{1, 2},
		OutDir: dir, TraceSeed: 1, Signals: true, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 6 || strings.Count(progress.String(), "\n") != 6 {
		t.Fatalf("%d runs; progress:\n%s", len(runs), progress.String())
	}
	for _, f := range []string{CSVFile, MarkdownFile, SignalsFile, "fig-tiny-ttfb_p50_s.png", "fig-tiny-replicas_busy.png",
		"trace-tiny-working-set.png", "hits-over-time-tiny.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, MarkdownFile))
	if !strings.Contains(string(md), "| 6 | working-set |") || !strings.Contains(string(md), "Acceptance checks") {
		t.Fatalf("study.md:\n%s", md)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, runs); err != nil || !strings.Contains(table.String(), "working-set") {
		t.Fatalf("table: %v\n%s", err, table.String())
	}
}

// TestSignalsScoreExactCountBest: on racing placements the router's own
// in-flight count, changed with each decision, always picks a replica with the
// fewest live conversations; a lagging count does not.
func TestSignalsScoreExactCountBest(t *testing.T) {
	a, _ := LookupArm(ArmWorkingSet)
	// Deterministic steps: with the a4000 profile's step-time spread the exact
	// count agreed on 98.7% of placements (2026-12-01), not "always".
	su := smallSetup()
	su.Profile = sim.ProfileA4000Qwen3_4BLockstep
	r, err := RunOne(context.Background(), su, a, 2, RunOptions{Trace: true, Placements: true})
	if err != nil {
		t.Fatal(err)
	}
	sc := ScoreSignals(r)
	if len(sc) != len(Signals) || sc[0].Placements == 0 {
		t.Fatalf("scores %+v", sc)
	}
	for _, s := range sc {
		if s.Agree < 0 || s.Agree > 1 || s.ExcessTokens < 0 {
			t.Fatalf("score out of range: %+v", s)
		}
	}
	if sc[0].Agree < 0.99 {
		t.Fatalf("exact in-flight agreed on %.2f%% of placements (think time 0.5 s: in flight is live)", 100*sc[0].Agree)
	}
}

func TestDrawTraceFromResultsDir(t *testing.T) {
	dir := t.TempDir()
	a, _ := LookupArm(ArmSticky)
	if _, err := RunOne(context.Background(), smallSetup(), a, 1, RunOptions{KeepDir: dir}); err != nil {
		t.Fatal(err)
	}
	run, err := report.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := DrawTrace(dir, run, "on"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "trace-on.png")); err != nil || st.Size() == 0 {
		t.Fatal(err)
	}
	if err := DrawTrace(dir, run, "nope"); err == nil {
		t.Fatal("want an error for a variant with no samples")
	}
}

func TestLookups(t *testing.T) {
	for _, n := range ArmNames() {
		if a, err := LookupArm(n); err != nil || a.Name != n {
			t.Errorf("arm %s: %+v %v", n, a, err)
		}
	}
	if _, err := LookupArm("nope"); err == nil {
		t.Error("unknown arm accepted")
	}
	for _, n := range []string{SetupReference, SetupGap, SetupJitter} {
		s, err := LookupSetup(n, "../../../scenarios")
		if err != nil || s.Replicas != 4 || s.Scenario.Validate() != nil {
			t.Errorf("setup %s: %+v %v", n, s, err)
		}
	}
	// The three reference setups differ only in the gap between turns and the
	// spread of message sizes.
	for _, c := range []struct {
		name        string
		think       time.Duration
		first, turn int
	}{
		{SetupReference, 0, 0, 0},
		{SetupGap, GapThinkTime, GapFirstJitter, GapTurnJitter},
		{SetupJitter, 0, TokenizerFirstJitter, TokenizerTurnJitter},
	} {
		s, _ := LookupSetup(c.name, "../../../scenarios")
		sc := s.Scenario
		gotFirst := (sc.FirstTurnSpread.Max - sc.FirstTurnSpread.Min) / 2
		gotTurn := (sc.TurnSpread.Max - sc.TurnSpread.Min) / 2
		if sc.ThinkTime != c.think || gotFirst != c.first || gotTurn != c.turn {
			t.Errorf("setup %s: think %v, first +-%d, turn +-%d; want %v, +-%d, +-%d",
				c.name, sc.ThinkTime, gotFirst, gotTurn, c.think, c.first, c.turn)
		}
		if c.first > 0 && (sc.FirstTurnSpread.Min+sc.FirstTurnSpread.Max)/2 != sc.FirstTurnTokens {
			t.Errorf("setup %s: first-turn spread %+v not centred on %d", c.name, sc.FirstTurnSpread, sc.FirstTurnTokens)
		}
	}
	if s, err := LookupSetup(SetupFleet, "../../../scenarios"); err != nil || s.Replicas != 7 {
		t.Errorf("fleet: %+v %v", s, err)
	}
	if _, err := LookupSetup("nope", "."); err == nil {
		t.Error("unknown setup accepted")
	}
}

// Stage durations multiply the samples: every seed runs once per duration, the
// windows have that length, and a row aggregates seeds x durations.
func TestStageDurationsAreSamples(t *testing.T) {
	a, _ := LookupArm(ArmWorkingSet)
	durs := []time.Duration{15 * time.Second, 25 * time.Second}
	runs, err := Run(context.Background(), Options{Setups: []Setup{smallSetup()}, Arms: []Arm{a}, Seeds: []uint64{1, 2},
		StageDurations: durs})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 2 seeds x 2 durations", len(runs))
	}
	seen := map[time.Duration]int{}
	for _, r := range runs {
		seen[r.StageDuration]++
		for _, st := range r.Stages {
			if got := st.WindowEnd - st.WindowStart; got != r.StageDuration {
				t.Fatalf("seed %d, duration %v: stage %d window %v", r.Seed, r.StageDuration, st.Stage, got)
			}
		}
	}
	if seen[durs[0]] != 2 || seen[durs[1]] != 2 {
		t.Fatalf("durations run: %v", seen)
	}
	for _, row := range Aggregate(runs) {
		if row.Seeds != 4 || row.Cells["ttfb_p50_s"].N != 4 {
			t.Fatalf("row %+v: want 4 samples", row)
		}
	}
	if _, err := Run(context.Background(), Options{Setups: []Setup{smallSetup()}, Arms: []Arm{a}, Seeds: []uint64{1},
		StageDurations: []time.Duration{-time.Second}}); err == nil {
		t.Fatal("a negative stage duration was accepted")
	}
}

// cold-move: a conversation the LRU model calls evicted moves for good to a
// replica with at least margin fewer requests in flight, and otherwise stays home;
// a conversation whose context the model still holds stays home whatever the
// load; with overCap the home must also be over its KV cache.
func TestColdMoveMovesOnlyEvictedConversations(t *testing.T) {
	newPol := func(margin int, overCap bool, once ...bool) *lruModel {
		a := coldMoveArm("t", 1.5, margin, overCap, len(once) > 0 && once[0])()
		p := a.NewPolicy(PolicyEnv{Seed: 1, Margin: 2}).(*lruModel)
		p.model = router.NewCacheModel()
		return p
	}
	reps := func(homeIn, otherIn int, homeLive int64) []router.ReplicaState {
		return []router.ReplicaState{
			{Healthy: true, InFlight: homeIn, KVCapacityTokens: 1000, LiveTokens: homeLive},
			{Healthy: true, InFlight: otherIn, KVCapacityTokens: 1000},
		}
	}
	req := router.Request{Key: "x", Home: 0, Threshold: 8, PromptTokens: 400}
	// Warm: x was the last conversation sent to replica 0.
	p := newPol(1, false)
	p.model.Touch(0, p.model.Hash("x"), 400, 1000)
	if d, _ := p.Pick(0, req, reps(3, 0, 900)); d.Replica != 0 || d.Reason != router.ReasonSticky {
		t.Errorf("warm conversation: %+v, want sticky home", d)
	}
	// Cold: 1,600 tokens of other conversations since x (stack distance 2,000 > 1.5 x 1,000).
	cold := func(p *lruModel) {
		p.model.Touch(0, p.model.Hash("x"), 400, 1000)
		p.model.Touch(0, p.model.Hash("a"), 800, 1000)
		p.model.Touch(0, p.model.Hash("b"), 800, 1000)
	}
	p = newPol(1, false)
	cold(p)
	if d, _ := p.Pick(0, req, reps(3, 2, 2000)); d.Replica != 1 || d.Reason != router.ReasonMoved {
		t.Errorf("cold, other replica one fewer in flight: %+v, want moved to 1", d)
	}
	p = newPol(1, false)
	cold(p)
	if d, _ := p.Pick(0, req, reps(3, 3, 900)); d.Replica != 0 {
		t.Errorf("cold, equal in flight: %+v, want home", d)
	}
	p = newPol(2, true)
	cold(p)
	if d, _ := p.Pick(0, req, reps(3, 1, 900)); d.Replica != 0 {
		t.Errorf("cold, home under its cache (overCap): %+v, want home", d)
	}
	p = newPol(2, true)
	cold(p)
	if d, _ := p.Pick(0, req, reps(3, 1, 2000)); d.Replica != 1 || d.Reason != router.ReasonMoved {
		t.Errorf("cold, home over its cache, two fewer elsewhere (overCap): %+v, want moved to 1", d)
	}
	// once: a conversation that moved does not move again, cold or not.
	p = newPol(1, false, true)
	cold(p)
	if d, _ := p.Pick(0, req, reps(3, 2, 900)); d.Replica != 1 {
		t.Fatalf("once, first cold move: %+v, want moved to 1", d)
	}
	p.model.Touch(1, p.model.Hash("c"), 800, 1000)
	p.model.Touch(1, p.model.Hash("d"), 800, 1000)
	back := []router.ReplicaState{{Healthy: true, InFlight: 0, KVCapacityTokens: 1000}, {Healthy: true, InFlight: 3, KVCapacityTokens: 1000, LiveTokens: 900}}
	if d, _ := p.Pick(0, router.Request{Key: "x", Home: 1, Threshold: 8, PromptTokens: 400}, back); d.Replica != 1 {
		t.Errorf("once, cold again at its new home: %+v, want it to stay on 1", d)
	}
}
