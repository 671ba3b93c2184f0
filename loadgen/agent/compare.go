package agent

import (
	"math"
	"slices"
)

// Units of a FigureRow.
const (
	UnitTokens   = "tokens"
	UnitSeconds  = "s"
	UnitCalls    = "calls"
	UnitSessions = "sessions"
	UnitShare    = "share"
	UnitMean     = "per session"
	UnitWidth    = "subagents"
)

// FigureDef is one row of a comparison of two Figures (warden trace agents):
// a distribution, summed up by its p50, p90 and max, or one value (Single: a
// count, a share or a mean).
type FigureDef struct {
	Name, Unit string
	// Help says what the row counts, for --help.
	Help   string
	Single bool
	dist   func(*Figures) []float64
	value  func(*Figures) (float64, int)
}

// Summary is one side of a FigureRow: N samples (for a single value, what it
// is counted over), their nearest-rank P50 and P90 and their Max; or Value.
// NaN where there is none.
type Summary struct {
	N                    int
	P50, P90, Max, Value float64
}

// FigureRow is a FigureDef with both sides.
type FigureRow struct {
	FigureDef
	Trace, Synth Summary
}

// Ratios returns synth / trace of the p50, p90 and max (for a single value:
// NaN, NaN and the value's ratio); NaN where the trace's figure is 0 or
// missing.
func (r FigureRow) Ratios() (p50, p90, third float64) {
	ratio := func(s, t float64) float64 {
		if t == 0 || math.IsNaN(t) || math.IsNaN(s) {
			return math.NaN()
		}
		return s / t
	}
	if r.Single {
		return math.NaN(), math.NaN(), ratio(r.Synth.Value, r.Trace.Value)
	}
	return ratio(r.Synth.P50, r.Trace.P50), ratio(r.Synth.P90, r.Trace.P90), ratio(r.Synth.Max, r.Trace.Max)
}

func share(n, of int) (float64, int) {
	if of == 0 {
		return math.NaN(), 0
	}
	return float64(n) / float64(of), of
}

func widths(f *Figures) []float64 {
	var out []float64
	for w, n := range f.Widths {
		for range n {
			out = append(out, float64(w))
		}
	}
	return out
}

func heads(f *Figures) []float64 {
	out := make([]float64, len(f.ToolTokens))
	for i := range out {
		out[i] = f.ToolTokens[i] + f.SystemTokens[i]
	}
	return out
}

// FigureDefs returns the rows of a comparison, in order (see Figures for how
// each is measured).
func FigureDefs() []FigureDef {
	d := func(name, unit, help string, f func(*Figures) []float64) FigureDef {
		return FigureDef{Name: name, Unit: unit, Help: help, dist: f}
	}
	v := func(name, unit, help string, f func(*Figures) (float64, int)) FigureDef {
		return FigureDef{Name: name, Unit: unit, Help: help, Single: true, value: f}
	}
	return []FigureDef{
		v("sessions", UnitSessions, "session trees read and synthesized", func(f *Figures) (float64, int) { return float64(f.Sessions), f.Sessions }),
		d("calls per session", UnitCalls, "the parent agent's calls of each session (summary calls included)", func(f *Figures) []float64 { return f.ParentCalls }),
		d("first prompt", UnitTokens, "each session's first prompt", func(f *Figures) []float64 { return f.FirstPrompt }),
		d("first message", UnitTokens, "the first prompt less the tools+system head (a resumed session's earlier conversation included)", func(f *Figures) []float64 { return f.FirstMessage }),
		d("prompt", UnitTokens, "every parent call's prompt", func(f *Figures) []float64 { return f.Prompt }),
		d("output", UnitTokens, "every parent call's output", func(f *Figures) []float64 { return f.Output }),
		d("new input", UnitTokens, "a parent prompt less the previous prompt and output (tool results, a user message; not across a compaction)", func(f *Figures) []float64 { return f.NewInput }),
		d("tool gap", UnitSeconds, "from a parent call that stopped on tool_use to the next call's start", func(f *Figures) []float64 { return f.ToolGap }),
		d("human gap", UnitSeconds, "from a parent call that ended the turn to the next call's start", func(f *Figures) []float64 { return f.HumanGap }),
		v("tool share", UnitShare, "tool gaps among tool and human gaps", func(f *Figures) (float64, int) { return share(len(f.ToolGap), len(f.ToolGap)+len(f.HumanGap)) }),
		v("spawn share", UnitShare, "parent calls that spawned subagents (fan-out per parent call)", func(f *Figures) (float64, int) { return share(f.Spawns, len(f.Prompt)) }),
		d("fan-out width", UnitWidth, "subagents per spawn", widths),
		d("spawn gap", UnitSeconds, "from the spawning call's end to each subagent's first call", func(f *Figures) []float64 { return f.SpawnGap }),
		d("join gap", UnitSeconds, "from a spawn's last subagent's end to the parent call that waited for it", func(f *Figures) []float64 { return f.JoinGap }),
		d("subagent calls", UnitCalls, "each subagent's calls", func(f *Figures) []float64 { return f.SubagentCalls }),
		d("subagent task", UnitTokens, "a subagent's first prompt less its own head", func(f *Figures) []float64 { return f.SubagentTask }),
		d("subagent new input", UnitTokens, "as new input, per subagent call", func(f *Figures) []float64 { return f.SubagentNewInput }),
		d("subagent output", UnitTokens, "every subagent call's output", func(f *Figures) []float64 { return f.SubagentOutput }),
		d("subagent gap", UnitSeconds, "between two calls of one subagent", func(f *Figures) []float64 { return f.SubagentGap }),
		v("compactions per session", UnitMean, "parent prompts that fell below half the previous one, per session", func(f *Figures) (float64, int) { return share(f.Compactions, f.Sessions) }),
		v("sessions compacting", UnitShare, "sessions with a compaction", func(f *Figures) (float64, int) { return share(f.SessionsCompacting, f.Sessions) }),
		d("post-compaction prompt", UnitTokens, "the prompt after a compaction less the head", func(f *Figures) []float64 { return f.PostCompaction }),
		d("parent head", UnitTokens, "each session's tools+system head", heads),
		d("subagent head", UnitTokens, "each subagent's tools+system head", func(f *Figures) []float64 { return f.SubagentHead }),
	}
}

func (d FigureDef) summary(f *Figures) Summary {
	if d.Single {
		v, n := d.value(f)
		return Summary{N: n, P50: math.NaN(), P90: math.NaN(), Max: math.NaN(), Value: v}
	}
	xs := d.dist(f)
	s := Summary{N: len(xs), P50: Quantile(xs, 0.5), P90: Quantile(xs, 0.9), Max: math.NaN(), Value: math.NaN()}
	if len(xs) > 0 {
		s.Max = slices.Max(xs)
	}
	return s
}

// Compare returns every FigureDefs row of trace (the recorded sessions) and
// synth (the synthesized ones).
func Compare(trace, synth *Figures) []FigureRow {
	defs := FigureDefs()
	out := make([]FigureRow, len(defs))
	for i, d := range defs {
		out[i] = FigureRow{FigureDef: d, Trace: d.summary(trace), Synth: d.summary(synth)}
	}
	return out
}

// Add adds t's figures to f; a zero Figures is ready to use (Measure of one
// tree after another, without holding them all).
func (f *Figures) Add(t *Tree) {
	if f.Widths == nil {
		f.Widths = map[int]int{}
	}
	if f.Types == nil {
		f.Types = map[string]int{}
	}
	f.add(t)
}
