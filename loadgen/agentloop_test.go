package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen/agent"
)

// A parent call spawns two subagents joined by the next parent call: a
// failed subagent call drops that subagent's later calls and releases the
// join; a failed parent call drops the rest of the tree, which then ends.
func TestAgentLoopFailuresAndJoin(t *testing.T) {
	dir := t.TempDir()
	body := `{"id":"s1","block_size":64,"requests":[
{"t":0,"type":"n","in":640,"out":64,"hash_ids":[1,2,3,4,5,6,7,8,9,10],"api_time":2},
{"t":4,"type":"subagent","agent_id":"a1","status":"completed","duration_ms":3000,"requests":[
 {"t":0,"type":"n","in":128,"out":8,"hash_ids":[20,21],"api_time":1},
 {"t":2,"type":"n","in":192,"out":8,"hash_ids":[20,21,22],"api_time":1}]},
{"t":5,"type":"subagent","agent_id":"a2","status":"completed","duration_ms":4000,"requests":[
 {"t":0,"type":"n","in":128,"out":8,"hash_ids":[30,31],"api_time":1}]},
{"t":7,"type":"n","in":700,"out":64,"hash_ids":[1,2,3,4,5,6,7,8,9,10],"api_time":1},
{"t":9,"type":"n","in":800,"out":64,"hash_ids":[1,2,3,4,5,6,7,8,9,10,11,12],"api_time":1}]}`
	if err := os.WriteFile(filepath.Join(dir, "s1.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := DefaultScenario()
	sc.Trace = &TraceSpec{File: dir, Path: dir, Format: FormatClaudeCode, TokenScale: 0.5, Live: 1}
	l, err := NewAgentLoop(sc, "on", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	finish := func(tr TurnRequest, sent, done time.Duration, ok bool) []TurnRequest {
		t.Helper()
		l.Sent(tr, sent)
		r := tr.NewResult()
		r.Sent, r.Done, r.Status = sent, done, 200
		if !ok {
			r.Status = 500
		}
		return l.Finish(&r, done)
	}
	first := l.StartStage(0, 0)
	if len(first) != 1 || first[0].Session.Agent != "" || first[0].Trace.Request.InputLength != 320 {
		t.Fatalf("first calls %+v: want the parent's first call, 640 tokens scaled to 320", first)
	}
	subs := finish(first[0], 0, 2*s, true)
	// a2's only call is its agent's last, but not the tree's: a completed
	// session is a tree (report SessionsCompleted counts Last).
	for _, tr := range subs {
		if tr.Last {
			t.Errorf("subagent %s's call marked the session's last", tr.Session.Agent)
		}
	}
	if len(subs) != 2 || subs[0].Session.Agent != "a1" || subs[1].Session.Agent != "a2" || subs[0].Session.Key != first[0].Session.Key {
		t.Fatalf("after the spawning call: %+v, want a1 and a2's first calls with the parent's key", subs)
	}
	// a1 started at 4 - 3 = 1 s recorded, before the spawning call ended (2 s): a
	// gap of 0.
	if subs[0].Intended != 2*s {
		t.Errorf("a1's first call intended at %v, want 2s", subs[0].Intended)
	}
	if next := finish(subs[0], 2*s, 3*s, false); len(next) != 0 {
		t.Errorf("a failed subagent call released %+v", next)
	}
	join := finish(subs[1], 3*s, 4*s, true)
	if len(join) != 1 || join[0].Session.Agent != "" || join[0].Turn != 1 {
		t.Fatalf("after both subagents: %+v, want the parent's second call", join)
	}
	// a2 started at 5 - 4 = 1 s recorded and its call ended at 2 s, 5 s
	// before the parent's call at 7 s: 4 s + 5 s. a1's last call, dropped at
	// its first call's failure (3 s), ended at 1 + 2 + 1 = 4 s recorded: 3 s
	// + 3 s, earlier.
	if join[0].Intended != 9*s {
		t.Errorf("the join is intended at %v, want 4s + 5s", join[0].Intended)
	}
	if join[0].Last {
		t.Error("the parent's second call marked last; its third is")
	}
	if rest := finish(join[0], 9*s, 10*s, false); len(rest) != 0 {
		t.Errorf("a failed parent call released %+v", rest)
	}
	if !l.Done() {
		t.Fatal("the only session ended; the loop is not done")
	}
	l.Stop(10 * s)
	rep := l.Replay()
	if rep.Calls != 6 || rep.Sent != 4 || rep.NotSent != 2 || rep.PlaysEnded != 1 || rep.SubagentsStarted != 2 {
		t.Errorf("replay %+v: want 6 calls, 4 sent, a1's second and the parent's third not sent", rep)
	}
	v := l.Variant()
	if !v.Complete {
		t.Errorf("variant %+v not complete", v)
	}
	for _, w := range v.Stages {
		if err := w.Check(); err != nil {
			t.Error(err)
		}
	}
}

// emptySource yields one tree without calls.
type emptySource struct{ done bool }

func (s *emptySource) next() (*agent.Tree, int, bool, error) {
	if s.done {
		return nil, 0, false, nil
	}
	s.done = true
	return &agent.Tree{ID: "empty", Name: "empty.json", Agents: []*agent.Agent{{}}}, 0, true, nil
}
func (s *emptySource) exhausted() bool { return s.done }
func (s *emptySource) notStarted() int { return 0 }

// A session tree without calls is an error naming it, not a live tree that
// never ends and holds its slot of the closed loop.
func TestAgentLoopTreeWithoutCalls(t *testing.T) {
	sc := DefaultScenario()
	spec := TraceSpec{Format: FormatClaudeCode, Live: 1, Duration: time.Hour}
	l := newAgentLoop(sc, spec, "on", 0, &emptySource{})
	l.rep.Basis = map[string]int{}
	l.windows, l.levels = []StageWindow{{Start: 0, End: time.Hour}}, []int{1}
	if trs := l.StartStage(0, 0); len(trs) != 0 {
		t.Fatalf("an empty tree sent %d calls", len(trs))
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "empty.json: session tree has no calls") {
		t.Fatalf("err %v, want the empty tree named", err)
	}
	if l.Active() != 0 {
		t.Errorf("%d live trees, want none", l.Active())
	}
}
