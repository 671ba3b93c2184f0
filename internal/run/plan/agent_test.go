package plan

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// treesConfig is a small plan over session trees: scenarios/agent-sessions.yaml
// with 2-minute points (gaps capped at 10 s) on 2 reference replicas, 2 seeds,
// working-set only, capped at 8 live trees.
func treesConfig(t *testing.T) Config {
	t.Helper()
	sc, err := loadgen.LoadScenario("../../../scenarios/agent-sessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.StageDuration = 2 * time.Minute
	sc.Agent.MaxGap = 10 * time.Second
	f, err := FleetFromProfile("a4000-qwen3-4b", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	slo, err := ParseSLO("ttfb_p95=5s")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := LookupPolicy("working-set")
	return Config{Fleet: f, Scenario: sc, SLO: slo, Seeds: 2, Warmup: 30 * time.Second, MaxSessions: 8, Workers: 1, Policies: []Policy{p}}
}

// A plan over session trees runs (it was refused before), its sessions are
// live trees (each point's stage level), every point has the trees' figures
// from the report's agent summary, no KV-fit figure is made up for trees, and
// the same seed gives the same answer byte for byte.
func TestSearchSessionTrees(t *testing.T) {
	c := treesConfig(t)
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	pr := r.Policies[0]
	if len(pr.Points) == 0 {
		t.Fatal("no point")
	}
	done := 0.0
	for _, pt := range pr.Points {
		for _, s := range pt.Samples {
			if math.IsNaN(s.TreesDone) || math.IsNaN(s.TreesCut) || !math.IsNaN(s.PeakContext) {
				t.Errorf("%d trees, seed %d: trees done %v, cut %v, peak context %v: want counts and no peak", pt.Sessions, s.Seed, s.TreesDone, s.TreesCut, s.PeakContext)
			}
			// Every live tree is done or cut at the end; at least the level was started.
			if s.TreesDone+s.TreesCut < float64(pt.Sessions) {
				t.Errorf("%d trees, seed %d: %v done + %v cut < the level", pt.Sessions, s.Seed, s.TreesDone, s.TreesCut)
			}
			if s.TreesDone > 0 && !(s.SessionP50S > 0 && s.SessionP95S >= s.SessionP50S) {
				t.Errorf("%d trees, seed %d: session p50 %v, p95 %v", pt.Sessions, s.Seed, s.SessionP50S, s.SessionP95S)
			}
			done += s.TreesDone
		}
	}
	if done == 0 {
		t.Fatal("no tree completed at any point: the test's points are too short to check the session times")
	}
	if !math.IsNaN(r.Fit.PeakContextTokens) || r.Fit.Sessions != 0 {
		t.Errorf("KV fit %+v: want none for trees", r.Fit)
	}
	var b strings.Builder
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sessions: live session trees", "trees done/h", "session p50 s", "session p95 s", "KV-fit rule of thumb: n/a for session trees"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	files, err := r.files()
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := strings.Cut(string(files[FilePoints]), "\n"); !strings.Contains(h, "trees_done_per_h,session_p50_s,session_p95_s,trees_done,trees_cut") {
		t.Errorf("points.csv header %q lacks the trees' columns", h)
	}
	again, err := Run(context.Background(), treesConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := answer(t, r), answer(t, again); a != b {
		t.Errorf("same seed, another answer:\n%s\nvs\n%s", a, b)
	}
}

// A plan over session trees whose scaled window does not fit the fleet's
// max_model_len is refused, naming the field and the largest scale that fits.
func TestSessionTreesOverMaxModelLen(t *testing.T) {
	c := treesConfig(t)
	c.Scenario.Agent.TokenScale = 0.25 // 200,000 -> 50,000 tokens, over 32,768
	_, err := Run(context.Background(), c)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"agent.token_scale 0.25", "agent.context_window 200000", "50000 tokens", "max_model_len 32768", "at most 0.15625"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
