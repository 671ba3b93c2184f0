package loadgen

import (
	"container/heap"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen/agent"
)

func shapeScenario(t *testing.T, yaml string) *Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(yaml), "agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// The example scenario loads, with every default of the agent: section.
func TestShapeExampleScenario(t *testing.T) {
	sc, err := LoadScenario(filepath.Join("..", "scenarios", "agent-sessions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Shape != ShapeAgent || sc.Agent == nil || sc.Agent.TokenScale != 0.125 || sc.Agent.MaxGap != time.Minute {
		t.Fatalf("shape %q, agent %+v", sc.Shape, sc.Agent)
	}
	if got, want := sc.Agent.SynthParams, agent.DefaultParams(); got.Calls != want.Calls || *got.FanOut != *want.FanOut {
		t.Errorf("agent params %+v, want the defaults", got)
	}
	bs, _, ok := sc.BlockPrompts()
	if !ok || bs != 8 {
		t.Errorf("block prompts %d %v: want 64 x 0.125 = 8-token blocks", bs, ok)
	}
}

// Bad agent: sections are refused at the line of the field, naming it.
func TestShapeScenarioErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "shape: agent\nagent:\n  calls: {p50: 34}\n  fan_outt: 0.1\n", `agent.yaml:4: agent.fan_outt: field fan_outt not found (did you mean fan_out?`},
		{"unknown dist field", "shape: agent\nagent:\n  calls: {p51: 34}\n", `agent.yaml:3: agent.calls: field p51 not found (did you mean p50?`},
		{"p90 below p50", "shape: agent\nagent:\n  calls:\n    p50: 34\n    p90: 20\n", `agent.yaml:5: agent.calls.p90: 20 is below p50 34`},
		{"fractional", "shape: agent\nagent:\n  output_tokens: {p50: 242.5, p90: 907}\n", `agent.yaml:3: agent.output_tokens.p50: 242.5 is not an integer`},
		{"share", "shape: agent\nagent:\n  fan_out: 1.5\n", `agent.yaml:3: agent.fan_out: 1.5 is not a share in [0, 1]`},
		{"gap type", "shape: agent\nagent:\n  tool_gap: {p50: 10}\n", `agent.yaml:3: agent.tool_gap.p50: cannot unmarshal !!int ` + "`10`" + ` into time.Duration (durations are Go duration strings`},
		{"token scale", "shape: agent\nagent:\n  token_scale: 0.1\n", `agent.yaml:3: agent.token_scale: 0.1: block_size 64 x token_scale must be a whole number`},
		{"subagent type", "shape: agent\nagent:\n  subagent_types:\n    - {name: Explore, weight: 1}\n    - {name: Explore, weight: 2}\n", `agent.yaml:5: agent.subagent_types[1].name: type "Explore" given twice`},
		{"chain field", "shape: agent\nturns: 4\n", `agent.yaml:2: turns: applies to shape chain only`},
		{"agent without shape", "agent:\n  calls: {p50: 3}\n", `agent.yaml:1: agent: applies to shape: agent only`},
		{"unknown shape", "shape: tree\n", `agent.yaml:1: shape: unknown shape "tree"`},
		{"with a trace", "shape: agent\ntrace: {file: x.jsonl}\n", `agent.yaml:1: shape: shape agent synthesizes its sessions`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(c.yaml), "agent.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

// treeEvent is a send (at Intended) or an end of a call in the test driver.
type treeEvent struct {
	at  time.Duration
	tr  TurnRequest
	end bool
	seq int
}

type treeEvents []treeEvent

func (e treeEvents) Len() int { return len(e) }
func (e treeEvents) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e treeEvents) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *treeEvents) Push(x any)   { *e = append(*e, x.(treeEvent)) }
func (e *treeEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// drive runs l as a world would, every call taking took, until stop; fail
// says which calls fail. It returns every call sent, in send order.
func drive(t *testing.T, l *AgentLoop, windows []StageWindow, stop time.Duration, took time.Duration, fail func(TurnRequest) bool) []TurnRequest {
	t.Helper()
	q := &treeEvents{}
	seq := 0
	push := func(trs []TurnRequest, at time.Duration, end bool) {
		for _, tr := range trs {
			a := at
			if !end {
				a = max(at, tr.Intended)
			}
			heap.Push(q, treeEvent{at: a, tr: tr, end: end, seq: seq})
			seq++
		}
	}
	next := 0
	var sent []TurnRequest
	for {
		for next < len(windows) && (q.Len() == 0 || windows[next].Start <= (*q)[0].at) {
			push(l.StartStage(next, windows[next].Start), windows[next].Start, false)
			next++
		}
		if q.Len() == 0 || (*q)[0].at >= stop {
			break
		}
		ev := heap.Pop(q).(treeEvent)
		if !ev.end {
			l.Sent(ev.tr, ev.at)
			sent = append(sent, ev.tr)
			push([]TurnRequest{ev.tr}, ev.at+took, true)
			continue
		}
		r := ev.tr.NewResult()
		r.Sent, r.Done, r.Status = ev.at-took, ev.at, 200
		if fail != nil && fail(ev.tr) {
			r.Status = 500
		}
		push(l.Finish(&r, ev.at), ev.at, false)
		if a := l.Active(); a > l.target {
			t.Fatalf("%d live trees at %v, over the level %d", a, ev.at, l.target)
		}
	}
	l.Stop(stop)
	return sent
}

// Shape agent's loop: stages raise the live trees, a tree that ends is
// replaced, windows are the stages with their level; the heads' ids are the
// same in every session (and subagent type), every other id is the
// session's own; a session is the same in both variants.
func TestShapeLoopLevelsAndIDs(t *testing.T) {
	sc := shapeScenario(t, "shape: agent\nseed: 3\nstages: [2, 4]\nstage_duration: 20m\nagent:\n  token_scale: 0.125\n  max_gap: 20s\n  fan_out: 0.2\n")
	l, err := NewAgentLoop(sc, "on", 0, 32768)
	if err != nil {
		t.Fatal(err)
	}
	sent := drive(t, l, l.Windows(), 40*time.Minute, 2*time.Second, nil)
	v := l.Variant()
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	if len(v.Stages) != 2 || v.Stages[0].Sessions != 2 || v.Stages[1].Sessions != 4 || !v.Complete {
		t.Fatalf("windows %+v: want the stages 2 and 4, complete", v.Stages)
	}
	rep := l.Replay()
	if rep.Format != FormatSynthesized || rep.PlaysEnded == 0 || rep.Plays != rep.PlaysEnded+4 || rep.SubagentsStarted == 0 {
		t.Errorf("replay %+v: want ended trees replaced (4 live at the end) and subagents", rep)
	}
	p := agent.DefaultParams()
	parentHead := (p.ToolTokens + p.SystemTokens) / p.BlockSize
	subHead := p.SubagentHeadTokens / p.BlockSize
	heads := map[string][]int64{} // parent, or a subagent type -> its head
	owner := map[int64]string{}   // a session's own id -> the session
	prev := map[string][]int64{}  // session/agent -> last call's ids
	for _, tr := range sent {
		ids := tr.Trace.Request.HashIDs
		a := tr.Trace.Agent
		name, hb := "parent", parentHead
		if a.Agent != "" {
			name, hb = a.Type, subHead
		}
		if h, ok := heads[name]; !ok {
			heads[name] = ids[:hb]
		} else if !slices.Equal(h, ids[:hb]) {
			t.Fatalf("%s/%s#%d: the %s head differs from another session's", a.File, a.Agent, a.Call, name)
		}
		for _, id := range ids[hb:] {
			if o, ok := owner[id]; ok && o != a.File {
				t.Fatalf("id %d of %s is %s's too", id, a.File, o)
			}
			owner[id] = a.File
		}
		k := a.File + "/" + a.Agent
		if pv, ok := prev[k]; ok && len(ids) >= len(pv) && !slices.Equal(ids[:len(pv)], pv) {
			t.Fatalf("%s#%d: ids do not start with the previous call's", k, a.Call)
		}
		prev[k] = ids
	}
	if len(heads) < 2 {
		t.Errorf("heads seen: %d, want the parent's and a subagent type's", len(heads))
	}
	// The other variant starts the same sessions with the same requests.
	off, _ := NewAgentLoop(sc, "off", 0, 32768)
	a, b := off.StartStage(0, 0), sent[:2]
	for i := range a {
		if !slices.Equal(a[i].Trace.Request.HashIDs, b[i].Trace.Request.HashIDs) || a[i].Trace.Agent.File != b[i].Trace.Agent.File {
			t.Errorf("variant off's first call %d differs from on's", i)
		}
	}
}

// A tree whose parent call fails ends, and its replacement starts
// FailureBackoff later, not at once.
func TestShapeLoopFailureBackoff(t *testing.T) {
	sc := shapeScenario(t, "shape: agent\nstages: [1]\nstage_duration: 1m\nfailure_backoff: 5s\n")
	l, _ := NewAgentLoop(sc, "on", 0, 0)
	sent := drive(t, l, l.Windows(), time.Minute, time.Second, func(tr TurnRequest) bool { return tr.Trace.Agent.Tree == 0 })
	if len(sent) < 2 || sent[1].Trace.Agent.Tree != 1 || sent[1].Intended != 6*time.Second {
		t.Fatalf("after the failed first call (ended at 1s) the next call is %+v, want tree 1's first at 1s + 5s", sent[1])
	}
}

// The trace replay's calibration sample has a shape-agent counterpart: the
// first sessions' calls, as their first plays send them.
func TestShapeTraceSample(t *testing.T) {
	sc := shapeScenario(t, "shape: agent\nagent:\n  token_scale: 0.25\n")
	got, err := TraceSample(sc, 5)
	if err != nil || len(got) != 5 {
		t.Fatalf("%d samples, %v", len(got), err)
	}
	tr := agent.Generate(agent.SynthParams{}, 1, 0)
	if want := len(tr.Steps[0].Call.HashIDs)*16 + 0; got[0].Request.InputLength < want {
		t.Errorf("first sample %d tokens, want at least %d (its blocks at 16 tokens)", got[0].Request.InputLength, want)
	}
}

// A scenario file with shape agent reads its agent: lines (a guard for the
// YAML tags of the inlined parameters).
func TestShapeScenarioRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	body := "shape: agent\nagent:\n  tool_tokens: 1000\n  system_tokens: 500\n  calls: {p50: 5, p90: 9}\n  subagent_types: [{name: X, weight: 1}]\n  human_gap: {p50: 30s, p90: 5m}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	a := sc.Agent
	if a.ToolTokens != 1000 || a.SystemTokens != 500 || a.Calls.P90 != 9 || a.SubagentTypes[0].Name != "X" || a.HumanGap.P90 != 5*time.Minute {
		t.Errorf("agent %+v", a)
	}
}
