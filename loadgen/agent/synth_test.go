package agent

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
)

// readTraces reads every session of the shared Claude Code traces.
func readTraces(t *testing.T) []*Tree {
	t.Helper()
	dir := filepath.Dir(sharedtrace.Path(t, "claude-code/trace_0277.json"))
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var trees []*Tree
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := Read(f, filepath.Base(p))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		trees = append(trees, tr)
	}
	if len(trees) != 69 {
		t.Fatalf("%d sessions in %s, want the 69 of its README", len(trees), dir)
	}
	return trees
}

// split returns the first messages at most ResumeThreshold (fresh) and
// the others (resumed) whose first prompt fits window.
func split(f *Figures, window int) (fresh, resumed []float64, nResumed int) {
	for i, x := range f.FirstMessage {
		switch {
		case x <= ResumeThreshold:
			fresh = append(fresh, x)
		default:
			nResumed++
			if f.FirstPrompt[i] <= float64(window) {
				resumed = append(resumed, x)
			}
		}
	}
	return fresh, resumed, nResumed
}

func q50(xs []float64) float64 { return Quantile(xs, 0.5) }
func q90(xs []float64) float64 { return Quantile(xs, 0.9) }

// Every default of SynthParams that names the traces as its source is
// re-derived here from the 69 files (nearest-rank quantiles, Measure).
func TestDefaultsMatchTraces(t *testing.T) {
	f := Measure(readTraces(t))
	p := DefaultParams()
	eq := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: default %g, the traces give %g", name, got, want)
		}
	}
	tokens := func(name string, d Dist[int], xs []float64) {
		t.Helper()
		eq(name+".p50", float64(d.P50), q50(xs))
		eq(name+".p90", float64(d.P90), q90(xs))
	}
	// Gaps are given to 10 ms.
	gaps := func(name string, d Dist[time.Duration], xs []float64) {
		t.Helper()
		eq(name+".p50", d.P50.Seconds(), math.Round(q50(xs)*100)/100)
		eq(name+".p90", d.P90.Seconds(), math.Round(q90(xs)*100)/100)
	}
	eq("tool_tokens", float64(p.ToolTokens), q50(f.ToolTokens))
	eq("system_tokens", float64(p.SystemTokens), q50(f.SystemTokens))
	fresh, resumed, nResumed := split(&f, p.ContextWindow)
	if slices.Max(fresh) >= ResumeThreshold || slices.Min(f.FirstMessage[len(f.FirstMessage)-1:]) < 0 {
		t.Errorf("ResumeThreshold %d does not split the first messages: largest fresh %g", ResumeThreshold, slices.Max(fresh))
	}
	tokens("first_turn_tokens", p.FirstTurnTokens, fresh)
	eq("resume_share", *p.ResumeShare, float64(nResumed)/float64(f.Sessions))
	tokens("resume_tokens", p.ResumeTokens, resumed)
	tokens("calls", p.Calls, f.ParentCalls)
	if m := slices.Max(f.ParentCalls); float64(p.Calls.Max) < m {
		t.Errorf("calls.max %d is below the longest session's %g calls", p.Calls.Max, m)
	}
	tokens("new_input_tokens", p.NewInputTokens, f.NewInput)
	tokens("output_tokens", p.OutputTokens, f.Output)
	if m := slices.Max(f.Output); float64(p.OutputTokens.Max) < m {
		t.Errorf("output_tokens.max %d is below the longest output %g", p.OutputTokens.Max, m)
	}
	eq("tool_share", *p.ToolShare, float64(len(f.ToolGap))/float64(len(f.ToolGap)+len(f.HumanGap)))
	gaps("tool_gap", p.ToolGap, f.ToolGap)
	gaps("human_gap", p.HumanGap, f.HumanGap)
	eq("fan_out", *p.FanOut, float64(f.Spawns)/float64(len(f.Prompt)))
	for w, n := range f.Widths {
		if w > len(p.Widths) || p.Widths[w-1] != float64(n) {
			t.Errorf("fan_out_widths %v: the traces have %d spawns of %d", p.Widths, n, w)
		}
	}
	gaps("spawn_gap", p.SpawnGap, f.SpawnGap)
	gaps("join_gap", p.JoinGap, f.JoinGap)
	for _, st := range p.SubagentTypes {
		eq("subagent_types "+st.Name, st.Weight, float64(f.Types[st.Name]))
	}
	if len(p.SubagentTypes) != len(f.Types) {
		t.Errorf("subagent_types %v, the traces have %v", p.SubagentTypes, f.Types)
	}
	eq("subagent_head_tokens", float64(p.SubagentHeadTokens), q50(f.SubagentHead))
	tokens("subagent_task_tokens", p.SubagentTaskTokens, f.SubagentTask)
	tokens("subagent_calls", p.SubagentCalls, f.SubagentCalls)
	eq("subagent_calls.max", float64(p.SubagentCalls.Max), slices.Max(f.SubagentCalls))
	tokens("subagent_new_input_tokens", p.SubagentNewInputTokens, f.SubagentNewInput)
	eq("subagent_new_input_tokens.max", float64(p.SubagentNewInputTokens.Max), slices.Max(f.SubagentNewInput))
	tokens("subagent_output_tokens", p.SubagentOutputTokens, f.SubagentOutput)
	gaps("subagent_gap", p.SubagentGap, f.SubagentGap)
	// The restore is what a post-compaction prompt holds beyond the head and
	// the summary (p50 assumed): to 1,000 tokens.
	for _, c := range []struct {
		name      string
		restore   int
		postQuant float64
	}{{"restore_tokens.p50", p.RestoreTokens.P50, q50(f.PostCompaction)}, {"restore_tokens.p90", p.RestoreTokens.P90, q90(f.PostCompaction)}} {
		if d := c.postQuant - float64(p.SummaryTokens.P50) - float64(c.restore); math.Abs(d) > 1000 {
			t.Errorf("%s %d: the traces' post-compaction prompts hold %g beyond the head, less the summary's %d",
				c.name, c.restore, c.postQuant, p.SummaryTokens.P50)
		}
	}
	// The new-input cap brings the mean to the traces' (within 5 %).
	var syn []*Tree
	for i := range 2000 {
		syn = append(syn, Generate(p, 1, i))
	}
	sf := Measure(syn)
	if got, want := Mean(sf.NewInput), Mean(f.NewInput); math.Abs(got/want-1) > 0.05 {
		t.Errorf("synthesized new input mean %.0f, the traces' %.0f: new_input_tokens.max %d does not fit it", got, want, p.NewInputTokens.Max)
	}
	t.Logf("traces: %d sessions, %d parent calls, %d spawns %v, %d compactions; new input mean %.0f", f.Sessions, len(f.Prompt), f.Spawns, f.Widths, f.Compactions, Mean(f.NewInput))
}

// The same (params, seed, index) give the same tree; another index or seed
// another one.
func TestGenerateDeterministic(t *testing.T) {
	a, b := Generate(SynthParams{}, 7, 3), Generate(SynthParams{}, 7, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two trees of (seed 7, session 3) differ")
	}
	for _, c := range []*Tree{Generate(SynthParams{}, 7, 4), Generate(SynthParams{}, 8, 3)} {
		if reflect.DeepEqual(a.Steps, c.Steps) {
			t.Errorf("%s has the same steps as %s", c.ID, a.ID)
		}
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
}

// within fails when got is off want by more than tol (a share of want).
func within(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got/want-1) > tol {
		t.Errorf("%s: sampled %.4g, parameter %.4g (tolerance %.0f %%)", name, got, want, 100*tol)
	}
}

// Over 2,000 sessions the sampled distributions match the parameters:
// quantiles of per-call figures (over 100,000 draws) within 5 %, of
// per-session and per-subagent ones (2,000 and ~1,000 draws; a p90's
// sampling error is ~3 %) within 10 %, shares within 10 %.
func TestGenerateMatchesParams(t *testing.T) {
	p := DefaultParams()
	var trees []*Tree
	for i := range 2000 {
		trees = append(trees, Generate(p, 1, i))
	}
	f := Measure(trees)
	fresh, _, nResumed := split(&f, math.MaxInt)
	within(t, "calls p50", q50(f.ParentCalls), float64(p.Calls.P50), 0.10)
	// Clamped at calls.max 400, past the lognormal's p99.
	within(t, "calls p90", q90(f.ParentCalls), float64(p.Calls.P90), 0.10)
	within(t, "first_turn_tokens p50", q50(fresh), float64(p.FirstTurnTokens.P50), 0.10)
	within(t, "first_turn_tokens p90", q90(fresh), float64(p.FirstTurnTokens.P90), 0.10)
	within(t, "resume_share", float64(nResumed)/float64(f.Sessions), *p.ResumeShare, 0.10)
	within(t, "new_input_tokens p50", q50(f.NewInput), float64(p.NewInputTokens.P50), 0.05)
	within(t, "new_input_tokens p90", q90(f.NewInput), float64(p.NewInputTokens.P90), 0.05)
	within(t, "output_tokens p50", q50(f.Output), float64(p.OutputTokens.P50), 0.05)
	within(t, "output_tokens p90", q90(f.Output), float64(p.OutputTokens.P90), 0.05)
	within(t, "tool_share", float64(len(f.ToolGap))/float64(len(f.ToolGap)+len(f.HumanGap)), *p.ToolShare, 0.10)
	within(t, "tool_gap p50", q50(f.ToolGap), p.ToolGap.P50.Seconds(), 0.05)
	within(t, "tool_gap p90", q90(f.ToolGap), p.ToolGap.P90.Seconds(), 0.05)
	within(t, "human_gap p50", q50(f.HumanGap), p.HumanGap.P50.Seconds(), 0.10)
	within(t, "human_gap p90", q90(f.HumanGap), p.HumanGap.P90.Seconds(), 0.10)
	within(t, "fan_out", float64(f.Spawns)/float64(len(f.Prompt)), *p.FanOut, 0.10)
	for w, want := range p.Widths {
		within(t, "fan_out_widths share", float64(f.Widths[w+1])/float64(f.Spawns), want/21, 0.15)
	}
	within(t, "join_gap p50", q50(f.JoinGap), p.JoinGap.P50.Seconds(), 0.10)
	within(t, "subagent_calls p50", q50(f.SubagentCalls), float64(p.SubagentCalls.P50), 0.10)
	within(t, "subagent_calls p90", q90(f.SubagentCalls), float64(p.SubagentCalls.P90), 0.10)
	within(t, "subagent_task_tokens p50", q50(f.SubagentTask), float64(p.SubagentTaskTokens.P50), 0.10)
	within(t, "subagent_new_input_tokens p50", q50(f.SubagentNewInput), float64(p.SubagentNewInputTokens.P50), 0.05)
	within(t, "subagent_gap p50", q50(f.SubagentGap), p.SubagentGap.P50.Seconds(), 0.05)
	if f.Compactions == 0 {
		t.Error("2,000 sessions and no compaction")
	}
	for _, tr := range trees {
		for _, st := range tr.Steps {
			if c := &st.Call; c.In+c.Out > p.ContextWindow {
				t.Fatalf("%s %s: prompt %d + output %d over the window %d", tr.ID, c.Path, c.In, c.Out, p.ContextWindow)
			}
		}
	}
}

// Each call's full-block ids start with its agent's previous call's, except
// after a summary call, where only the head's are kept; the head's ids are
// global (the same in every session, per subagent type) and no other is.
func TestGeneratePrefixProperty(t *testing.T) {
	p := DefaultParams()
	parentHead := (p.ToolTokens + p.SystemTokens) / p.BlockSize
	heads := map[string][]int64{}
	compactions, subagents := 0, 0
	for i := range 300 {
		tr := Generate(p, 1, i)
		if tr.Global != GlobalIDs {
			t.Fatalf("%s: global range %v", tr.ID, tr.Global)
		}
		agents := byAgent(tr)
		for a, steps := range agents {
			name, hb := "parent", parentHead
			if a > 0 {
				name, hb = "sub "+tr.Agents[a].Type, p.SubagentHeadTokens/p.BlockSize
				subagents++
			}
			for k, s := range steps {
				c := &tr.Steps[s].Call
				if len(c.HashIDs) != c.In/p.BlockSize {
					t.Fatalf("%s %s: %d ids for %d tokens", tr.ID, c.Path, len(c.HashIDs), c.In)
				}
				for j, id := range c.HashIDs {
					if tr.Global.Contains(id) != (j < hb) {
						t.Fatalf("%s %s: block %d (head %d blocks) global %v", tr.ID, c.Path, j, hb, tr.Global.Contains(id))
					}
				}
				if h, ok := heads[name]; !ok {
					heads[name] = c.HashIDs[:hb]
				} else if !slices.Equal(h, c.HashIDs[:hb]) {
					t.Fatalf("%s %s: the %s head differs from another session's", tr.ID, c.Path, name)
				}
				if k == 0 {
					continue
				}
				prev := &tr.Steps[steps[k-1]].Call
				want := prev.HashIDs
				if c.In < prev.In {
					compactions++
					want = prev.HashIDs[:hb]
				}
				if !slices.Equal(c.HashIDs[:len(want)], want) {
					t.Fatalf("%s %s: ids do not start with the previous call's", tr.ID, c.Path)
				}
			}
		}
	}
	if compactions == 0 || subagents == 0 || len(heads) < 3 {
		t.Errorf("%d compactions, %d subagents, heads %d: the test saw too little", compactions, subagents, len(heads))
	}
}

// Call counts whose lognormal reaches below 1 (p50 1, p90 4: a quarter of the
// draws round to 0) still give every session and every subagent a call; a
// session with none never ended in the closed loop over trees.
func TestGenerateEveryAgentHasACall(t *testing.T) {
	p := DefaultParams()
	p.Calls = Dist[int]{P50: 1, P90: 4}
	p.SubagentCalls = Dist[int]{P50: 1, P90: 4}
	one := 1.0
	p.FanOut = &one
	zero := 0
	for i := range 400 {
		tr := Generate(p, 3, i)
		if tr.Agents[0].Calls < 1 {
			t.Fatalf("%s: the parent has %d calls", tr.ID, tr.Agents[0].Calls)
		}
		for _, a := range tr.Agents[1:] {
			if a.Calls < 1 {
				t.Fatalf("%s: subagent %s has %d calls", tr.ID, a.ID, a.Calls)
			}
		}
		if tr.Agents[0].Calls == 1 {
			zero++
		}
	}
	if zero == 0 {
		t.Error("no session drew a single call: the test does not reach the clamp")
	}
}
