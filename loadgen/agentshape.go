package loadgen

import (
	"math"
	"time"

	"github.com/lmwarden/warden/loadgen/agent"
)

// Scenario shapes (Scenario.Shape).
const (
	// ShapeChain is the linear chain of the reference workload: a shared
	// system prompt, a unique first turn, Turns turns (the default).
	ShapeChain = "chain"
	// ShapeAgent is synthesized Claude Code sessions as trees (Scenario.Agent,
	// agent.Generate), replayed by AgentLoop; stages are live trees.
	ShapeAgent = "agent"
)

// FormatSynthesized is AgentReplay.Format for the synthesized sessions of
// shape agent.
const FormatSynthesized = "synthesized"

// AgentShape is a scenario's `agent:` section (shape agent): the parameters of
// the synthesized sessions (agent.SynthParams, in Claude Code's own tokens)
// and how they are replayed.
type AgentShape struct {
	agent.SynthParams `yaml:",inline"`
	// TokenScale scales every prompt and output for a smaller fleet, whole
	// blocks kept shared (block_size x it must be whole), as for a trace
	// replay (docs/traces.md, "Fitting a smaller fleet"); default 1. It is
	// given, not derived from the servers' max_model_len, so a scenario means
	// the same workload on every fleet: 0.125 maps the 200,000-token window
	// onto 25,000, inside the reference fleet's 32,768.
	TokenScale float64 `yaml:"token_scale" json:"token_scale,omitzero"`
	// MaxGap caps every gap (tool runs, human pauses) of the replay; 0: none.
	MaxGap time.Duration `yaml:"max_gap" json:"max_gap,omitzero"`
}

// clone returns a deep copy (nil for nil).
func (a *AgentShape) clone() *AgentShape {
	if a == nil {
		return nil
	}
	c := *a
	c.SynthParams = a.SynthParams.WithDefaults()
	return &c
}

// shapeSpec is the replay spec of sc's synthesized sessions (sc with
// defaults): AgentLoop reads its scaling, gaps and span from it.
func shapeSpec(sc *Scenario) TraceSpec {
	a := sc.Agent
	if a == nil {
		a = &AgentShape{}
	}
	p := a.SynthParams.WithDefaults()
	return TraceSpec{
		Format: FormatClaudeCode, BlockSize: p.BlockSize, TokenScale: a.TokenScale, MaxGap: a.MaxGap,
		Duration: time.Duration(len(sc.Stages)) * sc.StageDuration, Window: sc.StageDuration,
		Live: sc.Stages[0],
	}.WithDefaults()
}

// synthSource generates the sessions of a scenario of shape agent, without
// end: session i is agent.Generate(params, seed, i) in every variant and
// world.
type synthSource struct {
	p    agent.SynthParams
	seed uint64
	i    int
}

func newSynthSource(sc *Scenario) *synthSource {
	sc = sc.WithDefaults()
	var p agent.SynthParams
	if sc.Agent != nil {
		p = sc.Agent.SynthParams
	}
	return &synthSource{p: p.WithDefaults(), seed: sc.Seed}
}

func (s *synthSource) next() (*agent.Tree, int, bool, error) {
	t := agent.Generate(s.p, s.seed, s.i)
	s.i++
	return t, 0, true, nil
}

func (s *synthSource) exhausted() bool { return false }
func (s *synthSource) notStarted() int { return 0 }

// newShapeLoop returns the AgentLoop of sc's synthesized sessions (sc with
// defaults, shape agent): one window per stage, the stage's level its live
// trees.
func newShapeLoop(sc *Scenario, variant string, start time.Duration, maxModelLen int) *AgentLoop {
	spec := shapeSpec(sc)
	l := newAgentLoop(sc, spec, variant, start, newSynthSource(sc))
	l.shape = true
	l.rep = AgentReplay{Variant: variant, Format: FormatSynthesized, Basis: map[string]int{},
		TokenScale: spec.TokenScale, BlockSize: l.bs, MaxGap: spec.MaxGap, Speedup: spec.Speedup,
		MaxModelLen: maxModelLen, OverLength: spec.OverLength}
	for i, n := range sc.Stages {
		l.windows = append(l.windows, StageWindow{
			Sessions: n,
			Start:    start + time.Duration(i)*sc.StageDuration,
			End:      start + time.Duration(i+1)*sc.StageDuration,
			Warmup:   sc.Warmup,
		})
		l.levels = append(l.levels, n)
	}
	return l
}

// BlockPrompts reports whether sc's turns are requests with block ids whose
// prompts the worlds synthesize (TraceTurn: a trace replay, or shape agent),
// with the tokens per block of the synthesized text and its salt.
func (sc *Scenario) BlockPrompts() (blockSize int, salt uint64, ok bool) {
	switch {
	case sc.Trace != nil:
		s := sc.Trace.WithDefaults()
		return s.SynthBlockSize(), s.Salt, true
	case sc.Shape == ShapeAgent:
		s := shapeSpec(sc.WithDefaults())
		return s.SynthBlockSize(), s.Salt, true
	}
	return 0, 0, false
}

// chainFields are the scenario fields of the chain's sessions, which shape
// agent does not use.
var chainFields = []string{"system_prompt_tokens", "first_turn_tokens", "turn_tokens", "turns", "max_output_tokens", "think_time", "side_requests"}

// shapeProblems checks the shape and the agent: section (c: sc with
// defaults).
func (ps *problemSet) shapeProblems(c *Scenario) {
	switch c.Shape {
	case "", ShapeChain, ShapeAgent:
	default:
		ps.bad("shape", "unknown shape %q (want %q or %q)", c.Shape, ShapeChain, ShapeAgent)
		return
	}
	if c.Shape != ShapeAgent {
		if c.Agent != nil {
			ps.bad("agent", "applies to shape: agent only (this scenario's shape is %s)", c.Shape)
		}
		return
	}
	if c.Trace != nil {
		ps.bad("shape", "shape agent synthesizes its sessions: it does not go with trace (a replay of recorded ones)")
	}
	for _, f := range chainFields {
		if _, ok := ps.sc.lines[f]; ok {
			ps.bad(f, "applies to shape chain only (shape agent's sizes are under agent:)")
		}
	}
	a := c.Agent
	if a == nil {
		a = &AgentShape{}
	}
	for _, p := range a.SynthParams.Validate() {
		ps.bad("agent."+p.Field, "%s", p.Text)
	}
	bs := a.SynthParams.WithDefaults().BlockSize
	if f := float64(bs) * a.TokenScale; a.TokenScale < 0 || (a.TokenScale != 0 && (f < 1 || math.Abs(f-math.Round(f)) > 1e-9)) {
		ps.bad("agent.token_scale", "%g: block_size %d x token_scale must be a whole number of tokens, at least 1 (e.g. 0.125 -> 8)", a.TokenScale, bs)
	}
	if a.MaxGap < 0 {
		ps.bad("agent.max_gap", "must not be negative, got %s", a.MaxGap)
	}
}
