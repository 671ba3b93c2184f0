package agent

import (
	"math"
	"slices"
)

// Figures are the distributions a set of session trees shows: what the
// synthesized sessions are fitted to (SynthParams' defaults, measured on the
// Claude Code traces) and compared with (docs/traces.md, "Synthesized agent
// sessions"). Tokens are the recorded (unscaled) counts; gaps are seconds.
// Pairs of consecutive calls are of one agent, in call order.
type Figures struct {
	Sessions int
	// ParentCalls: calls of each session's parent agent.
	ParentCalls []float64
	// FirstPrompt: each session's first call's prompt; FirstMessage the same
	// minus the tools+system head (Tree.ToolTokens + SystemTokens), fresh and
	// resumed sessions alike.
	FirstPrompt, FirstMessage []float64
	// Prompt and Output: every parent call's.
	Prompt, Output []float64
	// NewInput: a parent call's prompt minus the previous call's prompt and
	// output (negative where a reply was not carried whole, e.g. thinking
	// dropped).
	NewInput []float64
	// Gap: from a parent call's end (T + APITime) to the next parent call's
	// start, over pairs with no subagent between them and a known APITime;
	// ToolGap and HumanGap split them by the earlier call's stop (tool_use,
	// anything else).
	Gap, ToolGap, HumanGap []float64
	// ParentStops: parent calls with a next call; ToolStops: of them, those
	// that stopped on tool_use.
	ParentStops, ToolStops int
	// Spawns: parent calls that spawned subagents (a spawn event); Widths:
	// subagents per spawn -> spawns. SpawnGap: from the spawning call's end to
	// each subagent's first call; JoinGap: from the end of a spawn's last
	// subagent to the parent call that waited for it (the smallest gap of the
	// join).
	Spawns    int
	Widths    map[int]int
	Types     map[string]int // subagents by Agent.Type
	SpawnGap  []float64
	JoinGap   []float64
	Subagents int
	// Per subagent: its calls, its first prompt and the same minus its own
	// head (Agent.ToolTokens + SystemTokens); per subagent call, as for the
	// parent.
	SubagentCalls, SubagentFirstPrompt, SubagentTask []float64
	SubagentNewInput, SubagentOutput, SubagentGap    []float64
	// SubagentHead: each subagent's tools+system head.
	SubagentHead []float64
	// Compactions: parent prompts that fell to less than half the previous
	// one (no gap, new input or join is counted across one); PostCompaction:
	// such a prompt minus the head; SessionsCompacting: sessions with one.
	Compactions, SessionsCompacting int
	PostCompaction                  []float64
	// ToolTokens, SystemTokens: each session's parent head.
	ToolTokens, SystemTokens []float64
}

// Measure returns the figures of trees.
func Measure(trees []*Tree) Figures {
	f := Figures{Widths: map[int]int{}, Types: map[string]int{}}
	for _, t := range trees {
		f.add(t)
	}
	return f
}

// addHead counts the session and its head sizes; it returns the head.
func (f *Figures) addHead(t *Tree) int {
	f.Sessions++
	f.ToolTokens = append(f.ToolTokens, float64(t.ToolTokens))
	f.SystemTokens = append(f.SystemTokens, float64(t.SystemTokens))
	return t.ToolTokens + t.SystemTokens
}

// byAgent returns each agent's steps in call order.
func byAgent(t *Tree) [][]int {
	out := make([][]int, len(t.Agents))
	for i, st := range t.Steps {
		out[st.Agent] = append(out[st.Agent], i)
	}
	for _, s := range out {
		slices.SortFunc(s, func(a, b int) int { return t.Steps[a].Index - t.Steps[b].Index })
	}
	return out
}

func (f *Figures) add(t *Tree) {
	head := f.addHead(t)
	agents := byAgent(t)
	parent := agents[0]
	f.ParentCalls = append(f.ParentCalls, float64(len(parent)))
	if len(parent) > 0 {
		c := &t.Steps[parent[0]].Call
		f.FirstPrompt = append(f.FirstPrompt, float64(c.In))
		f.FirstMessage = append(f.FirstMessage, float64(c.In-head))
	}
	compacted := false
	for k, s := range parent {
		st := &t.Steps[s]
		f.Prompt = append(f.Prompt, float64(st.Call.In))
		f.Output = append(f.Output, float64(st.Call.Out))
		if k == 0 {
			continue
		}
		prev := &t.Steps[parent[k-1]]
		f.ParentStops++
		if prev.Call.Stop == "tool_use" {
			f.ToolStops++
		}
		if st.Call.In*2 < prev.Call.In {
			// The gap holds the summary call where a capture did not
			// record it: not a gap of the loop.
			f.Compactions++
			compacted = true
			f.PostCompaction = append(f.PostCompaction, float64(st.Call.In-head))
			continue
		}
		f.NewInput = append(f.NewInput, float64(st.Call.In-prev.Call.In-prev.Call.Out))
		join := false
		gap := math.Inf(1)
		for _, d := range st.Deps {
			if t.Steps[d.Step].Agent != 0 {
				join = true
				gap = min(gap, d.Gap.Seconds())
			}
		}
		if join {
			f.JoinGap = append(f.JoinGap, gap)
			continue
		}
		if prev.Call.APITime < 0 {
			continue
		}
		g := (st.Call.T - prev.Call.End()).Seconds()
		f.Gap = append(f.Gap, g)
		if prev.Call.Stop == "tool_use" {
			f.ToolGap = append(f.ToolGap, g)
		} else {
			f.HumanGap = append(f.HumanGap, g)
		}
	}
	if compacted {
		f.SessionsCompacting++
	}
	spawns := map[int]int{}
	for a := 1; a < len(agents); a++ {
		steps := agents[a]
		if len(steps) == 0 {
			continue
		}
		f.Subagents++
		ag := t.Agents[a]
		f.Types[ag.Type]++
		first := &t.Steps[steps[0]]
		sh := ag.ToolTokens + ag.SystemTokens
		f.SubagentCalls = append(f.SubagentCalls, float64(len(steps)))
		f.SubagentFirstPrompt = append(f.SubagentFirstPrompt, float64(first.Call.In))
		f.SubagentHead = append(f.SubagentHead, float64(sh))
		f.SubagentTask = append(f.SubagentTask, float64(first.Call.In-sh))
		for _, d := range first.Deps {
			if t.Steps[d.Step].Agent == 0 {
				spawns[d.Step]++
				f.SpawnGap = append(f.SpawnGap, d.Gap.Seconds())
			}
		}
		for k, s := range steps {
			st := &t.Steps[s]
			f.SubagentOutput = append(f.SubagentOutput, float64(st.Call.Out))
			if k == 0 {
				continue
			}
			prev := &t.Steps[steps[k-1]]
			if st.Call.In*2 >= prev.Call.In {
				f.SubagentNewInput = append(f.SubagentNewInput, float64(st.Call.In-prev.Call.In-prev.Call.Out))
			}
			if prev.Call.APITime >= 0 && st.Call.In*2 >= prev.Call.In {
				f.SubagentGap = append(f.SubagentGap, (st.Call.T - prev.Call.End()).Seconds())
			}
		}
	}
	for _, w := range spawns {
		f.Spawns++
		f.Widths[w]++
	}
}

// Quantile returns the nearest-rank p-quantile of xs (p in (0, 1]): the
// smallest value with at least a share p of xs at or below it; NaN for none.
func Quantile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// Mean returns the mean of xs; NaN for none.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
