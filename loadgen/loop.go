package loadgen

import (
	"errors"
	"fmt"
	"math"
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
// Accounting (docs/bench.md, failure case 5). For every stage window: CarriedIn = turns in
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
	open   map[turnKey]openTurn      // turns sent and not yet finished
	due    map[turnKey]time.Duration // turns handed out and not yet sent -> intended instant

	// Per window, for the achieved concurrency (StageConcurrency): the time turns
	// finished so far spent in flight inside its measured window, and the sum and
	// count of the durations (Done - Sent) of the turns done OK in it.
	busy     []time.Duration
	turnTime []time.Duration
	turnN    []int

	stopped bool
	stopAt  time.Duration
}

type turnKey struct {
	session int64
	turn    int
}

// openTurn is a turn sent and not yet finished: its window at send and its Sent instant.
type openTurn struct {
	window int
	sent   time.Duration
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
		open:    map[turnKey]openTurn{},
		due:     map[turnKey]time.Duration{},
	}
	for i, n := range sc.Stages {
		l.windows = append(l.windows, StageWindow{
			Sessions: n,
			Start:    start + time.Duration(i)*sc.StageDuration,
			End:      start + time.Duration(i+1)*sc.StageDuration,
			Warmup:   sc.Warmup,
		})
	}
	n := len(l.windows)
	l.busy, l.turnTime, l.turnN = make([]time.Duration, n), make([]time.Duration, n), make([]int, n)
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

// InFlightAt returns the turns in flight at the simulated instant now: sent and
// not finished, or handed out with an intended instant at or before now and not
// yet reported by Sent (a driver that calls Sent only when the turn ends, as the
// HTTP runner does, has them on the wire). Side requests are not turns.
func (l *Loop) InFlightAt(now time.Duration) int {
	due, _ := countDue(l.due, now)
	return len(l.open) + due
}

// Waiting returns the sessions whose next turn is intended after now: waiting
// out a think time or a failure backoff, not in flight.
func (l *Loop) Waiting(now time.Duration) int {
	_, later := countDue(l.due, now)
	return later
}

// countDue counts the intended instants of due at or before now and after it.
func countDue[K comparable](due map[K]time.Duration, now time.Duration) (atOrBefore, after int) {
	for _, at := range due {
		if at <= now {
			atOrBefore++
		} else {
			after++
		}
	}
	return atOrBefore, after
}

// measured returns window i's measured part [Start+Warmup, End).
func (l *Loop) measured(i int) (start, end time.Duration) {
	w := l.windows[i]
	return w.Start + w.Warmup, w.End
}

// overlap returns the length of [a, b) inside [lo, hi).
func overlap(a, b, lo, hi time.Duration) time.Duration {
	return max(0, min(b, hi)-max(a, lo))
}

// addBusy adds a turn in flight over [from, to) to the windows it overlaps.
func (l *Loop) addBusy(from, to time.Duration, into []time.Duration) {
	for i := l.WindowIndex(from); i <= l.WindowIndex(to) && i < len(l.windows); i++ {
		lo, hi := l.measured(i)
		into[i] += overlap(from, to, lo, hi)
	}
}

// StageConcurrency returns stage k's achieved concurrency up to the simulated
// instant now (normally its end): the time-average of the turns in flight over
// its measured window so far, counting turns in flight now from their Sent
// instant (or, not yet reported by Sent, their intended one: see InFlightAt);
// and the level the loop can hold (ConcurrencyTarget of the stage's sessions,
// the mean duration of its OK turns so far and the scenario's think time). Both
// are NaN before the measured window starts. The report computes the same
// figure from turns.jsonl (report.Summary.TurnsInFlightMean).
func (l *Loop) StageConcurrency(k int, now time.Duration) (achieved, target float64) {
	if k < 0 || k >= len(l.windows) {
		return math.NaN(), math.NaN()
	}
	lo, hi := l.measured(k)
	hi = min(hi, now)
	if hi <= lo {
		return math.NaN(), math.NaN()
	}
	busy := l.busy[k]
	for _, o := range l.open {
		busy += overlap(o.sent, now, lo, hi)
	}
	for _, at := range l.due {
		busy += overlap(at, now, lo, hi)
	}
	turn := time.Duration(0)
	if l.turnN[k] > 0 {
		turn = l.turnTime[k] / time.Duration(l.turnN[k])
	}
	return busy.Seconds() / (hi - lo).Seconds(), ConcurrencyTarget(l.windows[k].Sessions, turn, l.sc.ThinkTime)
}

// ConcurrencyWarning returns the warning for stage k of controller c at the
// simulated instant now (its end) when c is a closed loop (Loop) whose achieved
// concurrency (StageConcurrency) is below MinConcurrencyPct of the level it can
// hold, "" otherwise (a replay has no such level): e.g. "1.26 turns in flight
// on average, 32 % of the 4.00 the loop can hold (below 90 %)". Both worlds
// print it to stderr at the stage's end.
func ConcurrencyWarning(c Controller, k int, now time.Duration) string {
	l, ok := c.(*Loop)
	if !ok {
		return ""
	}
	achieved, target := l.StageConcurrency(k, now)
	return ConcurrencyShortfall(achieved, target)
}

// ConcurrencyShortfall words an achieved concurrency below MinConcurrencyPct of
// target (see ConcurrencyWarning); "" when it is not, or either is NaN. The
// report's note uses the same words.
func ConcurrencyShortfall(achieved, target float64) string {
	if math.IsNaN(achieved) || math.IsNaN(target) || target <= 0 || 100*achieved/target >= MinConcurrencyPct {
		return ""
	}
	return fmt.Sprintf("%.2f turns in flight on average, %.0f %% of the %.2f the loop can hold (below %.0f %%)",
		achieved, 100*achieved/target, target, MinConcurrencyPct)
}

// MinConcurrencyPct is the share of the level a closed loop can hold
// (ConcurrencyTarget) below which a stage's achieved concurrency is reported as a
// warning (summary.md note, and stderr at the stage's end): under 90 %, the stage
// measured fewer turns in flight than its sessions, e.g. because failed turns'
// replacements waited out FailureBackoff, the router held turns, or the harness
// sent late. 90 % leaves room for the ramp's first turns and the think time
// estimate, which are not exact.
const MinConcurrencyPct = 90.0

// ConcurrencyTarget is the mean number of turns in flight a closed loop of
// sessions can hold when its turns take turn on average (Sent to Done) and each is
// followed by a think time think: sessions * turn / (turn + think); sessions
// when think is 0, or when no turn completed (turn 0: then nothing excuses an
// empty wire).
func ConcurrencyTarget(sessions int, turn, think time.Duration) float64 {
	if think <= 0 || turn <= 0 {
		return float64(sessions)
	}
	return float64(sessions) * turn.Seconds() / (turn + think).Seconds()
}

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
	return variantRecord(l.variant, l.Windows(), l.stopped, len(l.windows))
}

// variantRecord is the manifest record of a variant whose windows so far are ws
// out of planned: complete when stopped with every window run to its end.
func variantRecord(name string, ws []StageWindow, stopped bool, planned int) Variant {
	aff, _ := AffinityOf(name)
	complete := stopped && len(ws) == planned
	for _, w := range ws {
		complete = complete && w.Complete
	}
	return Variant{Name: name, Affinity: aff, Stages: ws, Complete: complete}
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
	l.due[turnKey{s.ID, tr.Turn}] = tr.Intended
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
	delete(l.due, k)
	l.open[k] = openTurn{window: l.WindowIndex(now), sent: now}
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
	o, ok := l.open[k]
	if !ok {
		o = openTurn{window: l.WindowIndex(r.Sent), sent: r.Sent}
	}
	ws := o.window
	delete(l.open, k)
	delete(l.due, k)
	l.addBusy(o.sent, now, l.busy)
	wd := max(l.WindowIndex(now), ws)
	// Failed turns too: a stream that hangs until it times out holds its
	// session on the wire (report.Concurrency.Target).
	if lo, hi := l.measured(wd); now >= lo && now < hi {
		l.turnTime[wd] += now - o.sent
		l.turnN[wd]++
	}
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
		l.due[turnKey{s.ID, tr.Turn}] = tr.Intended
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
	unrecorded := make([]time.Duration, len(l.windows))
	for _, o := range l.open {
		l.addBusy(o.sent, now, l.busy)
		l.addBusy(o.sent, now, unrecorded)
		countOpenAtStop(l.windows, o.window, last)
	}
	for i := range l.windows {
		l.windows[i].UnrecordedInFlight = unrecorded[i]
	}
	l.due = map[turnKey]time.Duration{}
	l.stopped, l.stopAt = true, now
}

// countOpenAtStop counts a turn sent in window ws and still in flight when the
// variant stops in window last: started in ws, in flight at the end of every
// window from ws on, carried into each after ws.
func countOpenAtStop(windows []StageWindow, ws, last int) {
	windows[ws].Started++
	for i := ws; i <= max(last, ws); i++ {
		windows[i].InFlight++
		if i > ws {
			windows[i].CarriedIn++
		}
	}
}

// ErrAccounting is wrapped by the Check methods when turns went missing.
var ErrAccounting = errors.New("turn accounting does not add up")

// Check verifies one window's accounting: CarriedIn + Started == Completed +
// Failed + InFlight, all non-negative (docs/bench.md, failure case 5: a runner
// that drops or hangs turns must not exit 0).
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
