package loadgen

import (
	"container/heap"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sim is a tiny discrete-event driver of a Loop, as the virtual-time world drives
// it: turns are sent at their Intended instant and take a duration drawn by the
// test; some fail.
type sim struct {
	loop     *Loop
	q        eventQueue
	r        *rand.Rand
	dur      func(r *rand.Rand, tr TurnRequest) time.Duration
	failP    float64
	sent     int
	finished []Result
	seq      int
}

type event struct {
	at   time.Duration
	seq  int
	send bool // true: send tr; false: finish it
	tr   TurnRequest
	r    Result
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *sim) schedule(trs []TurnRequest) {
	for _, tr := range trs {
		s.push(event{at: tr.Intended, send: true, tr: tr})
	}
}

// run processes events up to (not including) until.
func (s *sim) run(until time.Duration) {
	for s.q.Len() > 0 && s.q[0].at < until {
		e := heap.Pop(&s.q).(event)
		if e.send {
			s.loop.Sent(e.tr, e.at)
			if e.tr.Side == nil { // side requests are not turns (as both worlds do)
				s.sent++
			}
			r := e.tr.NewResult()
			r.Sent = e.at
			r.Status = 200
			r.Done = e.at + s.dur(s.r, e.tr)
			if s.r.Float64() < s.failP {
				r.Err = "stream error event: injected"
			}
			s.push(event{at: r.Done, tr: e.tr, r: r})
			continue
		}
		if e.tr.Side != nil {
			s.loop.Finish(&e.r, e.at) // must do nothing
			continue
		}
		if e.r.OK() {
			e.tr.Session.AddReply("reply")
		}
		s.finished = append(s.finished, e.r)
		s.schedule(s.loop.Finish(&e.r, e.at))
	}
}

func newSim(sc *Scenario, variant string, seed uint64) *sim {
	return &sim{
		loop: NewLoop(sc, NewWorkload(sc), variant, 100*time.Second),
		r:    rand.New(rand.NewPCG(seed, 1)),
		dur: func(r *rand.Rand, _ TurnRequest) time.Duration {
			return time.Duration(200+r.IntN(3000)) * time.Millisecond
		},
	}
}

// runAll plays every stage and stops at the end of the last window.
func (s *sim) runAll() Variant {
	ws := s.loop.Windows()
	for i, w := range ws {
		s.schedule(s.loop.StartStage(i, w.Start))
		s.run(w.End)
	}
	s.loop.Stop(ws[len(ws)-1].End)
	return s.loop.Variant()
}

// docs/bench.md failure case 5: at the end, every stage satisfies started = completed + failed +
// in flight, and no turn is lost between stages.
func TestAccountingStartedEqualsCompletedFailedInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stages []int
		failP  float64
		think  time.Duration
	}{
		{"ramp up", []int{2, 4, 8}, 0, 0},
		{"ramp down", []int{8, 3}, 0, time.Second},
		{"with failures", []int{4, 6, 2}, 0.2, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := TinyScenario()
			sc.Stages, sc.ThinkTime = tc.stages, tc.think
			s := newSim(sc, "off", 9)
			s.failP = tc.failP
			v := s.runAll()
			if err := v.Check(); err != nil {
				t.Fatal(err)
			}
			if !v.Complete || len(v.Stages) != len(tc.stages) {
				t.Fatalf("variant complete %v with %d stages", v.Complete, len(v.Stages))
			}
			// Totals: each sent turn either finished in some stage or was in flight at the end.
			var completed, failed int
			for _, w := range v.Stages {
				completed += w.Completed
				failed += w.Failed
			}
			last := v.Stages[len(v.Stages)-1]
			if completed+failed+last.InFlight != s.sent {
				t.Errorf("completed %d + failed %d + in flight %d != sent %d", completed, failed, last.InFlight, s.sent)
			}
			if completed+failed != len(s.finished) {
				t.Errorf("stages count %d finished turns, driver finished %d", completed+failed, len(s.finished))
			}
			if tc.failP > 0 && failed == 0 {
				t.Error("no failure was injected")
			}
			// Completed per stage follows the stage rule (by Done instant).
			for i, w := range v.Stages {
				n := 0
				for _, r := range s.finished {
					if r.Done >= w.Start && r.Done < w.End && r.OK() {
						n++
					}
				}
				if n != w.Completed {
					t.Errorf("stage %d: Completed %d, turns done OK in its window %d", i, w.Completed, n)
				}
			}
		})
	}
}

func TestCheckDetectsDroppedTurn(t *testing.T) {
	sc := TinyScenario()
	v := newSim(sc, "off", 1).runAll()
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	v.Stages[1].Completed-- // a turn that vanished
	err := v.Check()
	if !errors.Is(err, ErrAccounting) {
		t.Fatalf("Check: %v, want ErrAccounting", err)
	}
	m := &Manifest{Variants: []Variant{v}}
	if !errors.Is(m.Check(), ErrAccounting) {
		t.Error("Manifest.Check missed it")
	}
	// A turn in flight at a boundary that the next stage does not count.
	v2 := Variant{Name: "on", Stages: []StageWindow{
		{Started: 5, Completed: 2, InFlight: 3},
		{Started: 2, Completed: 2},
	}}
	if !errors.Is(v2.Check(), ErrAccounting) {
		t.Error("carry-over loss not detected")
	}
}

// Sessions carry over at a boundary: raising the level adds sessions without
// restarting the running ones.
func TestLoopRampCarriesOverSessions(t *testing.T) {
	sc := TinyScenario()
	sc.Stages = []int{2, 5}
	w := NewWorkload(sc)
	l := NewLoop(sc, w, "off", 0)
	first := l.StartStage(0, 0)
	if len(first) != 2 || first[0].Session.ID != 0 || first[1].Session.ID != 1 || first[0].Turn != 0 {
		t.Fatalf("stage 0 started %d turns", len(first))
	}
	for _, tr := range first {
		l.Sent(tr, 0)
	}
	more := l.StartStage(1, 10*time.Second)
	if len(more) != 3 || l.Active() != 5 {
		t.Fatalf("stage 1 added %d sessions, %d active; want 3 added, 5 active", len(more), l.Active())
	}
	for i, tr := range more {
		if tr.Session.ID != int64(2+i) || tr.Intended != 10*time.Second || tr.Variant != "off" {
			t.Errorf("added session %d: id %d intended %v variant %q", i, tr.Session.ID, tr.Intended, tr.Variant)
		}
	}
	// A running session of stage 0 goes on with its next turn.
	r := first[0].NewResult()
	r.Status, r.Sent, r.Done = 200, 0, 11*time.Second
	first[0].Session.AddReply("x")
	next := l.Finish(&r, r.Done)
	if len(next) != 1 || next[0].Session != first[0].Session || next[0].Turn != 1 {
		t.Fatalf("next %+v", next)
	}
	ws := l.Windows()
	// Sent in stage 0, done in stage 1: started in stage 0, in flight at its end,
	// carried into stage 1.
	if ws[0].Started != 1 || ws[0].InFlight != 1 || ws[1].CarriedIn != 1 || ws[1].Started != 0 || ws[1].Completed != 1 {
		t.Errorf("windows %+v", ws)
	}
}

// docs/bench.md failure case 6: the loop intends each next turn at the previous turn's end + think
// time, and the Result keeps intended and actual send apart.
func TestIntendedIsPreviousDonePlusThink(t *testing.T) {
	sc := TinyScenario()
	sc.ThinkTime = 1500 * time.Millisecond
	l := NewLoop(sc, NewWorkload(sc), "on", 0)
	tr := l.StartStage(0, 0)[0]
	l.Sent(tr, 40*time.Millisecond) // the harness was 40 ms late
	r := tr.NewResult()
	r.Sent, r.Status, r.Done = 40*time.Millisecond, 200, 3*time.Second
	if r.Intended != 0 || r.Sent-r.Intended != 40*time.Millisecond {
		t.Errorf("intended %v sent %v", r.Intended, r.Sent)
	}
	tr.Session.AddReply("ok")
	next := l.Finish(&r, r.Done)
	if len(next) != 1 || next[0].Intended != 4500*time.Millisecond {
		t.Fatalf("next turn intended at %v, want 4.5s", next[0].Intended)
	}
	if got := next[0].NewResult(); got.Intended != 4500*time.Millisecond || got.Turn != 1 || got.Variant != "on" {
		t.Errorf("result identity %+v", got)
	}
}

// With a think-time spread, each gap is a draw within [min, max] that depends on
// the session and turn only: the same session waits the same in another variant,
// and the gaps of one session differ from turn to turn.
func TestThinkTimeSpreadDraws(t *testing.T) {
	sc := TinyScenario()
	sc.Turns = 6
	sc.ThinkTime, sc.ThinkSpread = 5*time.Second, DurationRange{Min: time.Second, Max: 9 * time.Second}
	w := NewWorkload(sc)
	gaps := func(variant string) []time.Duration {
		l := NewLoop(sc, w, variant, 0)
		tr := l.StartStage(0, 0)[0]
		var out []time.Duration
		for now := time.Duration(0); ; {
			l.Sent(tr, tr.Intended)
			r := tr.NewResult()
			now = tr.Intended + 2*time.Second
			r.Sent, r.Status, r.Done = tr.Intended, 200, now
			tr.Session.AddReply("ok")
			next := l.Finish(&r, now)
			if len(next) == 0 || next[0].Session.ID != tr.Session.ID {
				return out
			}
			out = append(out, next[0].Intended-now)
			tr = next[0]
		}
	}
	on, off := gaps("on"), gaps("off")
	if len(on) != sc.Turns-1 || !slices.Equal(on, off) {
		t.Fatalf("gaps on %v, off %v: want %d equal gaps", on, off, sc.Turns-1)
	}
	distinct := map[time.Duration]bool{}
	for i, g := range on {
		if g < time.Second || g > 9*time.Second {
			t.Errorf("gap %d = %v outside [1s, 9s]", i, g)
		}
		if g != w.ThinkTime(0, i+1) {
			t.Errorf("gap %d = %v, Workload.ThinkTime says %v", i, g, w.ThinkTime(0, i+1))
		}
		distinct[g] = true
	}
	if len(distinct) < 4 {
		t.Errorf("gaps %v: a spread of 8 s gave %d distinct values in %d draws", on, len(distinct), len(on))
	}
	sc.ThinkSpread = DurationRange{}
	if g := NewWorkload(sc).ThinkTime(0, 1); g != 5*time.Second {
		t.Errorf("fixed think time: %v, want 5s", g)
	}
}

// An ended session is replaced while below the level; a failed turn ends its
// session and its replacement waits for the failure backoff.
func TestLoopReplacesEndedSessions(t *testing.T) {
	sc := TinyScenario()
	sc.Turns = 1
	sc.Stages = []int{1}
	sc.ThinkTime = 100 * time.Millisecond
	sc.FailureBackoff = 2 * time.Second
	l := NewLoop(sc, NewWorkload(sc), "off", 0)
	tr := l.StartStage(0, 0)[0]
	r := tr.NewResult()
	r.Status, r.Done = 200, time.Second
	tr.Session.AddReply("done")
	next := l.Finish(&r, r.Done)
	if len(next) != 1 || next[0].Session.ID != 1 || next[0].Turn != 0 || next[0].Intended != 1100*time.Millisecond {
		t.Fatalf("replacement %+v", next)
	}
	if !r.LastTurn {
		t.Error("one-turn session's turn not marked last")
	}
	f := next[0].NewResult()
	f.Status, f.Err, f.Done = 200, "stream ended before [DONE]", 2*time.Second
	next = l.Finish(&f, f.Done)
	if len(next) != 1 || next[0].Session.ID != 2 || next[0].Intended != 4*time.Second {
		t.Fatalf("after failure %+v, want session 2 at 4s", next)
	}
	ws := l.Windows()
	if ws[0].Completed != 1 || ws[0].Failed != 1 {
		t.Errorf("window %+v", ws[0])
	}
}

// A later stage with fewer sessions lets the count drain: ended sessions are not
// replaced until it is below the new level.
func TestLoopDrainsToLowerLevel(t *testing.T) {
	sc := TinyScenario()
	sc.Turns = 1
	sc.Stages = []int{3, 1}
	l := NewLoop(sc, NewWorkload(sc), "off", 0)
	trs := l.StartStage(0, 0)
	if got := l.StartStage(1, 10*time.Second); len(got) != 0 {
		t.Fatalf("lower stage started %d sessions", len(got))
	}
	var replaced int
	for i, tr := range trs {
		r := tr.NewResult()
		r.Status, r.Done = 200, 11*time.Second+time.Duration(i)
		tr.Session.AddReply("x")
		replaced += len(l.Finish(&r, r.Done))
		if want := max(1, 2-i); l.Active() != want {
			t.Errorf("after %d ended: %d active, want %d", i+1, l.Active(), want)
		}
	}
	if replaced != 1 {
		t.Errorf("%d replacements, want 1 (only when the count fell below 1)", replaced)
	}
}

func TestStopCountsInFlightAndCutsStage(t *testing.T) {
	sc := TinyScenario()
	sc.Stages = []int{2, 2, 2}
	l := NewLoop(sc, NewWorkload(sc), "off", 0)
	for _, tr := range l.StartStage(0, 0) {
		l.Sent(tr, time.Second)
	}
	l.StartStage(1, 10*time.Second)
	l.Stop(15 * time.Second) // interrupted mid stage 1
	v := l.Variant()
	if v.Complete || len(v.Stages) != 2 {
		t.Fatalf("complete %v, %d stages; want incomplete with 2", v.Complete, len(v.Stages))
	}
	if !v.Stages[0].Complete || v.Stages[1].Complete || v.Stages[1].End != 15*time.Second {
		t.Errorf("stages %+v", v.Stages)
	}
	if v.Stages[0].InFlight != 2 || v.Stages[1].InFlight != 2 || v.Stages[1].CarriedIn != 2 || v.Stages[1].Started != 0 {
		t.Errorf("in flight %+v", v.Stages)
	}
	if err := v.Check(); err != nil {
		t.Error(err)
	}
	// After Stop the loop ignores everything.
	if l.StartStage(2, 20*time.Second) != nil {
		t.Error("StartStage after Stop")
	}
}

// Both variants get the same sessions (same content) in the same order, under
// keys of their own so the router sees new conversations in each variant.
func TestSameSessionsInBothVariants(t *testing.T) {
	sc := TinyScenario()
	firsts := map[string][]string{}
	keys := map[string][]string{}
	for _, v := range []string{"off", "on"} {
		s := newSim(sc, v, 3)
		orig := s.loop
		var trs []TurnRequest
		for i, w := range orig.Windows() {
			got := orig.StartStage(i, w.Start)
			trs = append(trs, got...)
			s.schedule(got)
			s.run(w.End)
		}
		for _, r := range s.finished {
			if r.Turn == 0 {
				keys[v] = append(keys[v], r.SessionKey)
			}
		}
		for _, tr := range trs {
			firsts[v] = append(firsts[v], tr.Messages[0].Content)
		}
	}
	if len(firsts["off"]) < 4 || !slices.Equal(firsts["off"], firsts["on"]) {
		t.Fatalf("first messages differ between variants (%d vs %d sessions)", len(firsts["off"]), len(firsts["on"]))
	}
	for i := range min(len(keys["off"]), len(keys["on"])) {
		if keys["off"][i] == keys["on"][i] {
			t.Fatalf("session %d has the same key in both variants", i)
		}
	}
	w := NewWorkload(sc)
	a, b := w.SessionFor("off", 4), w.SessionFor("on", 4)
	ta, _ := a.NextTurn(0)
	tb, _ := b.NextTurn(0)
	if a.Key == b.Key || !slices.Equal(ta.Messages, tb.Messages) || a.Key != w.SessionFor("off", 4).Key {
		t.Error("SessionFor: want equal content, distinct and stable keys")
	}
}

// A stage's Started counts the turns sent inside its window only; the turns in
// flight at its start are its carried-in count, the previous stage's in flight.
// Summed over the stages, Started is then the number of turns sent.
func TestStageStartedCountsOnlyTurnsSentInTheWindow(t *testing.T) {
	sc := TinyScenario()
	sc.Stages, sc.ThinkTime = []int{2, 4, 3}, 200*time.Millisecond
	s := newSim(sc, "off", 5)
	s.dur = func(*rand.Rand, TurnRequest) time.Duration { return 7 * time.Second } // spans boundaries
	v := s.runAll()
	started, carried := 0, 0
	for _, w := range v.Stages {
		started += w.Started
	}
	if started != s.sent {
		t.Errorf("turns started, summed over stages, %d != turns sent %d", started, s.sent)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Stages []map[string]any `json:"stages"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for i, w := range raw.Stages {
		n := func(k string) int { f, _ := w[k].(float64); return int(f) }
		_, ok := w["turns_carried_in"]
		c, want := n("turns_carried_in"), 0
		if i > 0 {
			want = int(raw.Stages[i-1]["turns_in_flight"].(float64))
		}
		if !ok || c != want {
			t.Errorf("stage %d: turns_carried_in %d (present %v), want the previous stage's in flight %d", i, c, ok, want)
		}
		carried += c
		if c+n("turns_started") != n("turns_completed")+n("turns_failed")+n("turns_in_flight") {
			t.Errorf("stage %d: carried in + started != completed + failed + in flight: %v", i, w)
		}
	}
	if carried == 0 {
		t.Error("no turn crossed a boundary: the test proves nothing")
	}
	if err := v.Check(); err != nil {
		t.Error(err)
	}
}

// A manifest written before turns_carried_in existed counted carried-in turns in
// Started again; it reads as the same accounting in today's terms.
func TestManifestWithoutCarriedInReadsAsBefore(t *testing.T) {
	old := `{"name":"off","stages":[` +
		`{"sessions":2,"turns_started":5,"turns_completed":2,"turns_failed":0,"turns_in_flight":3},` +
		`{"sessions":4,"turns_started":7,"turns_completed":5,"turns_failed":1,"turns_in_flight":1}]}`
	var v Variant
	if err := json.Unmarshal([]byte(old), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v.Stages[1])
	var w map[string]any
	_ = json.Unmarshal(b, &w)
	if v.Stages[0].Started != 5 || v.Stages[1].Started != 4 || w["turns_carried_in"] != 3.0 {
		t.Errorf("old manifest read as started %d, %d, stage 1 %v; want 5, 4, carried in 3",
			v.Stages[0].Started, v.Stages[1].Started, w)
	}
	if err := v.Check(); err != nil {
		t.Errorf("old balanced manifest: %v", err)
	}
}
