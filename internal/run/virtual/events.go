package virtual

import (
	"container/heap"
	"time"
)

type eventKind uint8

const (
	evStage   eventKind = iota // a stage of the current variant starts
	evSend                     // a turn is sent
	evStep                     // an engine's batch ends
	evPoll                     // the harness polls every engine's counters
	evObserve                  // the router reads every engine's gauges
	evEnd                      // the current variant ends
	evTimeout                  // a turn's request_timeout expires
	evArrive                   // a sent turn reaches the router, half an RTT later (Scenario.RTT)
	evEngine                   // a routed request reaches its engine after the API server's preprocessing
	evRelease                  // the router sees a finished request's stream end (after the API server's output work)
	evDeliver                  // the client receives a finished request's last event, half an RTT later
)

// event is one scheduled happening. Events at the same instant run in the order
// they were scheduled (seq), which keeps runs deterministic.
type event struct {
	at      time.Duration
	seq     uint64
	kind    eventKind
	variant int    // variant index the event belongs to
	idx     int    // stage index (evStage) or engine index (evStep)
	turn    int    // index into the pending-turn table (evSend)
	req     string // engine request id (evTimeout, evEngine, evRelease, evDeliver)
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

// scheduler is the discrete-event clock: a priority queue of events by instant.
type scheduler struct {
	q   eventQueue
	seq uint64
	now time.Duration
}

func (s *scheduler) at(e event) {
	if e.at < s.now {
		e.at = s.now
	}
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *scheduler) next() (event, bool) {
	if len(s.q) == 0 {
		return event{}, false
	}
	e := heap.Pop(&s.q).(event)
	s.now = e.at
	return e, true
}
