package loadgen

import (
	"io"
	"strings"
	"testing"
	"time"
)

// A three-request trace: request 1 continues request 0 (its two full blocks lead
// 1's ids) 10 s after it; request 2 is another conversation.
const tinyTrace = `{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [0, 1, 2]}
{"timestamp": 2000, "input_length": 1200, "output_length": 4, "hash_ids": [0, 5, 6]}
{"timestamp": 10000, "input_length": 1600, "output_length": 4, "hash_ids": [0, 1, 3, 4]}
`

func tinyScenario(mode string) *Scenario {
	sc := TinyScenario()
	sc.Trace = &TraceSpec{File: "tiny.jsonl", Mode: mode, Window: time.Minute,
		Opener: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(tinyTrace)), nil }}
	return sc
}

func finishOK(l *TraceLoop, tr TurnRequest, sent, done time.Duration) []TurnRequest {
	l.Sent(tr, sent)
	r := tr.NewResult()
	r.Sent, r.Done, r.Status = sent, done, 200
	return l.Finish(&r, done)
}

func TestTraceLoopSessionMode(t *testing.T) {
	l, err := NewTraceLoop(tinyScenario(TraceSession), "on", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	trs := l.StartStage(0, 0)
	// Requests 0 and 1 (request 2 waits for request 0 to end).
	if len(trs) != 2 || trs[0].Trace.Index != 0 || trs[1].Trace.Index != 1 || trs[1].Intended != 2*time.Second {
		t.Fatalf("first window sent %+v", trs)
	}
	if trs[0].Session.Key == "" || trs[0].Session.Key == trs[1].Session.Key {
		t.Errorf("session keys %q, %q: want one per conversation", trs[0].Session.Key, trs[1].Session.Key)
	}
	// Request 0 ends at 30 s: its next turn goes at 30 s + the recorded 10 s gap.
	next := finishOK(l, trs[0], 0, 30*time.Second)
	if len(next) != 1 || next[0].Trace.Index != 2 || next[0].Intended != 40*time.Second || next[0].Turn != 1 ||
		next[0].Session.Key != trs[0].Session.Key {
		t.Fatalf("after request 0 ended: %+v", next)
	}
	finishOK(l, trs[1], 2*time.Second, 5*time.Second)
	finishOK(l, next[0], 40*time.Second, 50*time.Second)
	l.Stop(2 * time.Minute)
	v := l.Variant()
	if err := v.Check(); err != nil {
		t.Error(err)
	}
	rep := l.Replay()
	if rep.Requests != 3 || rep.Sent != 3 || rep.NotSent != 0 || rep.Conversations != 2 ||
		rep.TurnsPerConversation[1] != 1 || rep.TurnsPerConversation[2] != 1 {
		t.Errorf("replay %+v", rep)
	}
}

func TestTraceLoopTimestampModeAndFailedTurn(t *testing.T) {
	l, err := NewTraceLoop(tinyScenario(TraceTimestamp), "off", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	trs := l.StartStage(0, 0)
	if len(trs) != 3 || trs[2].Intended != 10*time.Second || trs[0].Session.Key != "" {
		t.Fatalf("timestamp mode sent %+v (want all three at their recorded times, keyless)", trs)
	}
	for _, tr := range trs {
		l.Sent(tr, tr.Intended)
	}
	l.Stop(time.Minute) // all three in flight
	if err := l.Variant().Check(); err != nil {
		t.Error(err)
	}
	if w := l.Windows()[0]; w.InFlight != 3 || w.Started != 3 {
		t.Errorf("window %+v", w)
	}

	// Session mode: request 0 fails, so its next turn (request 2) is not sent.
	l, _ = NewTraceLoop(tinyScenario(TraceSession), "on", 0, 1<<20)
	trs = l.StartStage(0, 0)
	l.Sent(trs[0], 0)
	r := trs[0].NewResult()
	r.Sent, r.Done, r.Status, r.Err = 0, time.Second, 503, "no replica"
	if next := l.Finish(&r, time.Second); len(next) != 0 {
		t.Errorf("a failed turn's conversation went on: %+v", next)
	}
	l.Stop(time.Minute)
	if rep := l.Replay(); rep.NotSent != 2 { // request 2, and request 1 never sent
		t.Errorf("not sent %d, want 2: %+v", rep.NotSent, rep)
	}
}

func TestTraceLoopBadLine(t *testing.T) {
	sc := tinyScenario(TraceTimestamp)
	sc.Trace.Opener = func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(tinyTrace + `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [9]}` + "\n")), nil
	}
	_, err := CheckTrace(sc)
	if err == nil || !strings.Contains(err.Error(), "tiny.jsonl line 4: timestamp 1 ms is before") {
		t.Fatalf("err %v, want line 4 unsorted", err)
	}
}

// session_header none: session mode replays keyless traffic.
func TestTraceLoopSessionModeKeyless(t *testing.T) {
	sc := tinyScenario(TraceSession)
	sc.SessionHeader = SessionHeaderNone
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := NewTraceLoop(sc, "on", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range l.StartStage(0, 0) {
		if tr.Session.Key != "" {
			t.Errorf("request %d sent key %q with session_header none", tr.Trace.Index, tr.Session.Key)
		}
	}
	// session_header none is valid for synthetic workloads too (keyless
	// placement is measured on them, docs/routing.md "Keyless placement").
	plain := TinyScenario()
	plain.SessionHeader = SessionHeaderNone
	if err := plain.Validate(); err != nil {
		t.Errorf("session_header none without a trace: %v", err)
	}
}
