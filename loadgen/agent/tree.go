package agent

import (
	"fmt"
	"time"
)

// Timestamp bases of a capture (Tree.Basis): how a subagent's times are
// stored.
const (
	// BasisRelative: a subagent's `t` is when it finished (started when
	// duration_ms is known, `t - duration_ms/1000`), its calls' `t` count from
	// its start (the kv-cache-tester "v8" set).
	BasisRelative = "relative"
	// BasisAbsolute: every `t` is on the session's one timeline.
	BasisAbsolute = "absolute"
	// BasisNone: the session has no subagent, nothing to decide.
	BasisNone = "none"
)

// Tree is one agent session. Times are on the parent's timeline, from its first
// call's recorded start (0).
type Tree struct {
	ID        string // the file's "id"
	Name      string // file name, for errors
	BlockSize int    // tokens per hash id
	// ToolTokens and SystemTokens are the parent's tools and system-prompt head.
	ToolTokens, SystemTokens int
	Basis                    string
	// Agents: index 0 is the parent, then every subagent in file order.
	Agents []*Agent
	// Steps: every call in file order (a subagent's calls where it sits).
	Steps []Step
	// NegativeGaps counts waits whose recorded gap was negative (set to 0).
	NegativeGaps int
	// Global is the range of hash ids whose text is shared beyond this tree
	// (a synthesized session's heads: GlobalIDs): a replay sends them as they
	// are and salts only the tree's own ids. The zero range holds none: a
	// trace file's ids are all its own (hash_id_scope "local").
	Global IDRange
}

// IDRange is the hash ids [Lo, Hi).
type IDRange struct{ Lo, Hi int64 }

// Contains reports whether id is in r.
func (r IDRange) Contains(id int64) bool { return id >= r.Lo && id < r.Hi }

// Agent is the parent (index 0, ID "") or one subagent of a Tree.
type Agent struct {
	ID     string // agent_id; "" for the parent
	Type   string // subagent_type (Explore, Plan, general-purpose, ...)
	Status string // completed, async_launched; "" for the parent
	// Background: nothing waits for it (async_launched, or no later call of
	// the agent that spawned it).
	Background bool
	Calls      int    // its steps
	Path       string // "requests[3]", for errors
	// ToolTokens and SystemTokens are a subagent's own head (the file's
	// tool_tokens and system_tokens for it); the parent's are the Tree's.
	ToolTokens, SystemTokens int
}

// Call is one recorded request.
type Call struct {
	Path    string        // "requests[4]" or "requests[1].requests[3]", for errors
	T       time.Duration // recorded start, parent's timeline
	APITime time.Duration // recorded server time; -1 when not recorded
	In, Out int           // prompt and output tokens
	// HashIDs: one id per full block of the prompt, floor(In / BlockSize) of
	// them; the rest of the prompt is the call's own.
	HashIDs []int64
	Model   string
	Stop    string
}

// End returns the recorded end (T + APITime), or T when APITime is unknown.
func (c *Call) End() time.Duration { return c.T + max(0, c.APITime) }

// Step is one call of a replay and what it waits for.
type Step struct {
	Call  Call
	Agent int  // index in Tree.Agents
	Index int  // its position among its agent's calls, from 0
	Last  bool // its agent's last call
	// Deps: the steps whose end this one waits for, each with the recorded gap
	// from that step's end to this one's start. A step without Deps starts
	// Offset after the tree's start.
	Deps   []Dep
	Offset time.Duration
}

// Dep is one wait of a Step: Gap after Step ends.
type Dep struct {
	Step int
	Gap  time.Duration
	// Unknown: the waited-for call has no api_time; Gap is then start to start
	// (or the call's think_time, when it follows in the same agent).
	Unknown bool
}

// Stats are a tree's sums, for manifests and recounts.
type Stats struct {
	Calls, ParentCalls, Subagents, Background int
	InTokens, OutTokens                       int64
	NegativeGaps, UnknownGaps                 int
}

// Stats returns the tree's sums.
func (t *Tree) Stats() Stats {
	s := Stats{Calls: len(t.Steps), Subagents: len(t.Agents) - 1, NegativeGaps: t.NegativeGaps}
	for _, a := range t.Agents[1:] {
		if a.Background {
			s.Background++
		}
	}
	for i := range t.Steps {
		st := &t.Steps[i]
		if st.Agent == 0 {
			s.ParentCalls++
		}
		s.InTokens += int64(st.Call.In)
		s.OutTokens += int64(st.Call.Out)
		for _, d := range st.Deps {
			if d.Unknown {
				s.UnknownGaps++
			}
		}
	}
	return s
}

// planner flattens agents into steps.
type planner struct {
	t        *Tree
	negative int
}

// item is one entry of an agent's recorded sequence: a call, or a subagent.
type item struct {
	call  *Call
	think time.Duration // the call's recorded think_time; -1 when absent
	sub   *subagent
}

type subagent struct {
	agent int
	items []item
}

// agentSeq places one agent's items as steps. spawn is the step that spawned
// it (-1 for none); it returns the agent's last step (-1 when it has none).
func (p *planner) agentSeq(agent int, items []item, spawn int) int {
	prev := -1 // this agent's previous step
	var group []int
	idx := 0
	for k, it := range items {
		if it.sub != nil {
			sp := prev
			if sp < 0 {
				sp = spawn
			}
			last := p.agentSeq(it.sub.agent, it.sub.items, sp)
			a := p.t.Agents[it.sub.agent]
			if !later(items[k+1:]) {
				a.Background = true
			}
			if !a.Background && last >= 0 {
				group = append(group, last)
			}
			continue
		}
		st := Step{Call: *it.call, Agent: agent, Index: idx}
		idx++
		switch {
		case len(group) > 0:
			// A join: the recorded gap after the previous call holds the
			// subagents' own time, so only their ends gate it (each waited
			// for the previous call already).
			for _, g := range group {
				st.Deps = append(st.Deps, p.dep(g, it, false))
			}
		case prev >= 0:
			st.Deps = append(st.Deps, p.dep(prev, it, true))
		case spawn >= 0:
			st.Deps = append(st.Deps, p.dep(spawn, it, false))
		default:
			st.Offset = max(0, it.call.T)
		}
		group = group[:0]
		p.t.Steps = append(p.t.Steps, st)
		prev = len(p.t.Steps) - 1
	}
	if prev >= 0 {
		p.t.Steps[prev].Last = true
	}
	p.t.Agents[agent].Calls = idx
	return prev
}

// later reports whether items hold a call (something a subagent's end gates).
func later(items []item) bool {
	for _, it := range items {
		if it.call != nil {
			return true
		}
	}
	return false
}

// dep is the wait of the call of it on step s: the recorded gap from s's end to
// the call's start. sameAgent: s is the call just before it in its agent (its
// think_time then stands in for an unknown api_time).
func (p *planner) dep(s int, it item, sameAgent bool) Dep {
	w := &p.t.Steps[s].Call
	d := Dep{Step: s}
	switch {
	case w.APITime >= 0:
		d.Gap = it.call.T - w.End()
	case sameAgent && it.think >= 0:
		d.Gap, d.Unknown = it.think, true
	default:
		d.Gap, d.Unknown = it.call.T-w.T, true
	}
	if d.Gap < 0 {
		p.negative++
		d.Gap = 0
	}
	return d
}

// Validate checks the plan's invariants: every dependency is an earlier step.
func (t *Tree) Validate() error {
	for i, st := range t.Steps {
		for _, d := range st.Deps {
			if d.Step < 0 || d.Step >= i {
				return fmt.Errorf("%s %s: waits for step %d, not an earlier call", t.Name, st.Call.Path, d.Step)
			}
		}
	}
	return nil
}
