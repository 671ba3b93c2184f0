package plan

import (
	"fmt"
	"math"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// Plans over session trees (a scenario of shape agent, loadgen.ShapeAgent:
// docs/planning.md, "Agent sessions"). A point's session count is its live
// trees: one stage of that level, a closed loop over trees (a tree that ends
// is replaced at once, loadgen.AgentLoop), each tree a parent conversation
// with the subagents it spawns and joins. What changes from the chain:
//
//   - TTFB, goodput, output tokens/min, prefix hits and stayed % are over
//     calls, the parent's and the subagents' alike (each call is a turn of
//     the stage summary; stayed: a later call on its conversation's first
//     replica, a subagent being a conversation of its own).
//   - sessions/h counts trees completed, and the session completion time
//     p50/p95 (first call sent to last call done) is added: the report's
//     agent summary (report.AgentSummary) of the point's whole run, warmup
//     included; a tree longer than the run is cut and in neither.
//   - the KV-fit rule of thumb does not apply (no one peak context per
//     session: a tree's context grows to the compaction point and falls
//     back, and its subagents hold contexts of their own meanwhile).

// trees reports whether the plan's sessions are session trees.
func (c *Config) trees() bool { return c.Scenario != nil && c.Scenario.Shape == loadgen.ShapeAgent }

func (r *Result) trees() bool { return r.Config.trees() }

// turns is what the plan's TTFB and goodput count: turns, or calls.
func (r *Result) turns() string {
	if r.trees() {
		return "calls"
	}
	return "turns"
}

// agentProblems refuses a plan over session trees whose calls the fleet
// cannot serve: a scaled context window (agent.context_window x
// agent.token_scale) over the fleet's max_model_len makes the replay skip
// every call past it (loadgen.OverLengthSkip), so each point would measure
// a different, smaller workload than the scenario's.
func (c *Config) agentProblems() error {
	if !c.trees() {
		return nil
	}
	sc := c.Scenario.WithDefaults()
	var a loadgen.AgentShape
	if sc.Agent != nil {
		a = *sc.Agent
	}
	p := a.SynthParams.WithDefaults()
	ts := a.TokenScale
	if ts == 0 {
		ts = 1
	}
	e, err := c.Fleet.resolved()
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if e.MaxModelLen <= 0 {
		return nil
	}
	window := int(math.Round(float64(p.ContextWindow) * ts))
	if window <= e.MaxModelLen {
		return nil
	}
	// The largest token_scale whose block stays whole and whose window fits.
	k := e.MaxModelLen * p.BlockSize / p.ContextWindow
	return fmt.Errorf("plan: scenario %q: agent.token_scale %g maps agent.context_window %d to %d tokens, over the fleet's max_model_len %d: "+
		"the replay would skip every call past it (over length) and each point would measure a smaller workload than the scenario's; "+
		"set agent.token_scale to at most %g (%d/%d: agent.block_size x token_scale whole)",
		c.Scenario.Name, ts, p.ContextWindow, window, e.MaxModelLen, float64(k)/float64(p.BlockSize), k, p.BlockSize)
}

// treesLine defines a session of a plan over session trees, printed under
// the plan's first line; "" for the chain.
func (r *Result) treesLine() string {
	if !r.trees() {
		return ""
	}
	run := r.Config.Scenario.WithDefaults().StageDuration + r.Config.Warmup
	return fmt.Sprintf("sessions: live session trees (shape agent: a parent conversation with the subagents it spawns and joins), a closed loop over trees, a tree that ends replaced at once; "+
		"TTFB, goodput, out tok/min, prefix hits and stayed %% are over calls, the parent's and the subagents' alike; "+
		"trees done/h and session p50/p95 (first call sent to last call done) are over the trees completed in a point's run of %s (warmup included): a tree longer than that is cut and counted in neither\n",
		fmtDuration(run))
}

func fmtDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%d min", int(d/time.Minute))
	}
	return d.String()
}

// treesFitLine replaces the KV-fit rule of thumb for session trees.
func treesFitLine() string {
	return "KV-fit rule of thumb: n/a for session trees: a tree's context grows to the compaction point and falls back, and its subagents hold contexts of their own meanwhile, so no one peak context per session divides the fleet's KV"
}
