package loadgen

import (
	"errors"
	"fmt"
	"time"
)

// Loop is the closed-loop controller of one variant: which sessions run, which turn
// each sends next and when, and the per-stage accounting. It is pure: no clock, no
// goroutines, no I/O. Callers pass the simulated instant of every event; the HTTP
// runner and the virtual-time driver both drive it the same way:
//
//	loop := NewLoop(sc, w, "off", start)
//	for i := range sc.Stages { at stage start: send(loop.StartStage(i, windows[i].Start)) }
//	when a turn is written:  loop.Sent(tr, now)
//	when a turn ends:        tr.Session.AddReply(text) (if it succeeded); send(loop.Finish(&r, r.Done))
//	at the end:              loop.Stop(end); v := loop.Variant()
//
// where send(trs) sends each TurnRequest at or after its Intended instant.
//
// Session rules. A stage raises the target level; new sessions are added at once
// to reach it while running sessions carry over (a continuous ramp). A session whose
// last turn completes, or whose turn fails, ends; it is replaced by a new session
// only while fewer sessions than the target are running, so a stage with fewer
// sessions than the previous one lets the count drain to its level. A failed turn
// ends its session because the conversation cannot go on without the reply it
// lacks; the replacement starts after max(think time, FailureBackoff). The next turn
// of a running session is intended at the previous turn's end + its think time
// (Workload.ThinkTime: Scenario.ThinkTime, or a draw from ThinkSpread); a
// replacement for a completed session likewise; sessions added at a stage start are
// intended at the stage start.
//
// Accounting (peers.md case 14). For every stage window: CarriedIn = turns in
// flight at the window's start (sent in an earlier window); Started = turns sent
// inside it (a turn's window at send is the one containing its Sent instant);
// Completed and Failed = turns that ended inside it (by their Done instant, the
// stage rule of DESIGN-NOTES); InFlight = turns still in flight at the window's
// end (or at Stop for the last window). Hence CarriedIn + Started == Completed +
// Failed + InFlight per window, CarriedIn(0) == 0 and CarriedIn(k+1) ==
// InFlight(k), so Started summed over the windows is the number of turns sent.
// Variant.Check verifies all three.
type Loop struct {
	sc      *Scenario
	w       *Workload
	variant string
	start   time.Duration
	windows []StageWindow

	stage  int // index of the last stage started, -1 before the first
	target int // sessions wanted now
	live   map[int64]*Session
	nextID int64
	open   map[turnKey]int // turns sent and not yet finished -> window index at send

	stopped bool
	stopAt  time.Duration
}

type turnKey struct {
	session int64
	turn    int
}

// NewLoop returns the controller for one variant whose first stage starts at the
// simulated instant start. sc is used with defaults applied; w must be built from
// the same scenario.
func NewLoop(sc *Scenario, w *Workload, variant string, start time.Duration) *Loop {
	sc = sc.WithDefaults()
	l := &Loop{
		sc:      sc,
		w:       w,
		variant: variant,
		start:   start,
		stage:   -1,
		live:    map[int64]*Session{},
		open:    map[turnKey]int{},
	}
	for i, n := range sc.Stages {
		l.windows = append(l.windows, StageWindow{
			Sessions: n,
			Start:    start + time.Duration(i)*sc.StageDuration,
			End:      start + time.Duration(i+1)*sc.StageDuration,
			Warmup:   sc.Warmup,
		})
	}
	return l
}

// Name returns the variant name.
func (l *Loop) Name() string { return l.variant }

// Stage returns the index of the last stage started (-1 before StartStage(0)).
func (l *Loop) Stage() int { return l.stage }

// Active returns the number of sessions running (sending, or between turns).
func (l *Loop) Active() int { return len(l.live) }

// InFlight returns the number of turns sent and not yet finished.
func (l *Loop) InFlight() int { return len(l.open) }

// Stopped reports whether Stop was called.
func (l *Loop) Stopped() bool { return l.stopped }

// Windows returns the stage windows with the accounting so far: stage i spans
// [start + i*StageDuration, start + (i+1)*StageDuration). After Stop it holds only
// the stages reached; a stage cut short ends at the stop instant and is not
// Complete.
func (l *Loop) Windows() []StageWindow {
	if !l.stopped {
		return append([]StageWindow(nil), l.windows...)
	}
	if l.stopAt <= l.start {
		return nil
	}
	last := l.WindowIndex(l.stopAt)
	out := append([]StageWindow(nil), l.windows[:last+1]...)
	for i := range out {
		if out[i].End > l.stopAt {
			out[i].End = l.stopAt
			out[i].Complete = false
		} else {
			out[i].Complete = true
		}
	}
	return out
}

// Variant returns the variant record for the manifest: its name, affinity (from the
// name, see AffinityOf), windows, and whether every stage ran to its end.
func (l *Loop) Variant() Variant {
	aff, _ := AffinityOf(l.variant)
	ws := l.Windows()
	complete := l.stopped && len(ws) == len(l.windows)
	for _, w := range ws {
		complete = complete && w.Complete
	}
	return Variant{Name: l.variant, Affinity: aff, Stages: ws, Complete: complete}
}

// WindowIndex returns the index of the stage window containing t, clamped to the first and last.
func (l *Loop) WindowIndex(t time.Duration) int {
	if t < l.start || len(l.windows) == 0 {
		return 0
	}
	k := int((t - l.start) / l.sc.StageDuration)
	return min(k, len(l.windows)-1)
}

// StartStage raises the level to stage i's session count at the simulated instant
// now and returns the first turns of the sessions added to reach it (intended at
// now). Running sessions carry over. It returns nil for an out-of-range i or after
// Stop.
func (l *Loop) StartStage(i int, now time.Duration) []TurnRequest {
	if l.stopped || i < 0 || i >= len(l.windows) {
		return nil
	}
	l.stage = i
	l.target = l.windows[i].Sessions
	var out []TurnRequest
	for len(l.live) < l.target {
		out = l.withSide(out, l.newSession(now))
	}
	return out
}

// withSide appends tr to out and, when the scenario sends a side request beside
// it (Scenario.SideRequests), that request after it.
func (l *Loop) withSide(out []TurnRequest, tr TurnRequest) []TurnRequest {
	out = append(out, tr)
	if side, ok := tr.Session.SideRequest(tr); ok {
		out = append(out, side)
	}
	return out
}

func (l *Loop) newSession(intended time.Duration) TurnRequest {
	s := l.w.SessionFor(l.variant, l.nextID)
	l.nextID++
	l.live[s.ID] = s
	tr, _ := s.NextTurn(intended)
	tr.Variant = l.variant
	return tr
}

// Sent records that a turn was written at the simulated instant now. Calling it
// twice for one turn, after Stop, for a finished turn or for a side request
// (TurnRequest.Side) does nothing.
func (l *Loop) Sent(tr TurnRequest, now time.Duration) {
	if l.stopped || tr.Session == nil || tr.Side != nil {
		return
	}
	k := turnKey{tr.Session.ID, tr.Turn}
	if _, ok := l.open[k]; ok {
		return
	}
	if s := l.live[tr.Session.ID]; s == nil || s != tr.Session || tr.Turn != s.next-1 {
		return // not the session's current turn
	}
	l.open[k] = l.WindowIndex(now)
}

// Finish records the outcome of a turn (r.Session, r.Turn) that ended at the
// simulated instant now (normally r.Done) and returns what to send next: the
// session's next turn intended at now + its think time (Workload.ThinkTime), or, when the session ended (last
// turn done, or the turn failed), the first turn of a replacement session when the
// level requires one. For a successful turn the caller adds the reply first
// (Session.AddReply); if it did not, an empty reply is recorded. A turn not
// reported by Sent is taken as sent at r.Sent. Finish after Stop, for an unknown
// session or turn, or for a side request (Result.Side: the loop never waits for
// one), does nothing and returns nil. The turns it returns are followed by their
// side requests when the scenario sends one beside them.
func (l *Loop) Finish(r *Result, now time.Duration) []TurnRequest {
	if l.stopped || r.Side {
		return nil
	}
	s := l.live[r.Session]
	if s == nil || r.Turn != s.next-1 {
		return nil
	}
	k := turnKey{r.Session, r.Turn}
	ws, ok := l.open[k]
	if !ok {
		ws = l.WindowIndex(r.Sent)
	}
	delete(l.open, k)
	wd := max(l.WindowIndex(now), ws)
	l.windows[ws].Started++
	for i := ws; i < wd; i++ {
		l.windows[i].InFlight++
		l.windows[i+1].CarriedIn++
	}
	ok = r.OK()
	if ok {
		l.windows[wd].Completed++
		if s.pending {
			s.AddReply("")
		}
	} else {
		l.windows[wd].Failed++
		s.fail()
	}
	if !s.Done() {
		tr, _ := s.NextTurn(now + l.w.ThinkTime(s.ID, s.next))
		tr.Variant = l.variant
		return l.withSide(nil, tr)
	}
	delete(l.live, s.ID)
	if len(l.live) >= l.target {
		return nil
	}
	gap := l.w.ThinkTime(s.ID, l.sc.Turns)
	if !ok {
		gap = max(gap, l.sc.FailureBackoff)
	}
	return l.withSide(nil, l.newSession(now+gap))
}

// Stop closes the variant at the simulated instant now: turns sent and not finished
// count as InFlight in every window from their send to the window containing now
// (the last window, for a variant that ran to its end). Later calls do nothing.
func (l *Loop) Stop(now time.Duration) {
	if l.stopped {
		return
	}
	last := l.WindowIndex(now)
	for _, ws := range l.open {
		l.windows[ws].Started++
		for i := ws; i <= max(last, ws); i++ {
			l.windows[i].InFlight++
			if i > ws {
				l.windows[i].CarriedIn++
			}
		}
	}
	l.stopped, l.stopAt = true, now
}

// ErrAccounting is wrapped by the Check methods when turns went missing.
var ErrAccounting = errors.New("turn accounting does not add up")

// Check verifies one window's accounting: CarriedIn + Started == Completed +
// Failed + InFlight, all non-negative (peers.md case 14: a runner that drops or
// hangs turns must not exit 0).
func (w StageWindow) Check() error {
	if w.CarriedIn < 0 || w.Started < 0 || w.Completed < 0 || w.Failed < 0 || w.InFlight < 0 {
		return fmt.Errorf("%w: negative count (carried in %d, started %d, completed %d, failed %d, in flight %d)",
			ErrAccounting, w.CarriedIn, w.Started, w.Completed, w.Failed, w.InFlight)
	}
	if !w.Balanced() {
		return fmt.Errorf("%w: carried in %d + started %d != completed %d + failed %d + in flight %d",
			ErrAccounting, w.CarriedIn, w.Started, w.Completed, w.Failed, w.InFlight)
	}
	return nil
}

// Balanced reports whether CarriedIn + Started == Completed + Failed + InFlight.
func (w StageWindow) Balanced() bool {
	return w.CarriedIn+w.Started == w.Completed+w.Failed+w.InFlight
}

// Check verifies every window of the variant and that the turns in flight at one
// window's end are the next window's carried-in turns (CarriedIn(k+1) ==
// InFlight(k), CarriedIn(0) == 0).
func (v Variant) Check() error {
	var errs []error
	for i, w := range v.Stages {
		if err := w.Check(); err != nil {
			errs = append(errs, fmt.Errorf("variant %q stage %d (%d sessions): %w", v.Name, i, w.Sessions, err))
		}
		prev := 0
		if i > 0 {
			prev = v.Stages[i-1].InFlight
		}
		if w.CarriedIn != prev {
			errs = append(errs, fmt.Errorf("variant %q stage %d: %w: %d turns in flight at the previous stage's end but %d carried in",
				v.Name, i, ErrAccounting, prev, w.CarriedIn))
		}
	}
	return errors.Join(errs...)
}

// Check verifies the accounting of every variant of the run.
func (m *Manifest) Check() error {
	var errs []error
	for _, v := range m.Variants {
		errs = append(errs, v.Check())
	}
	return errors.Join(errs...)
}
