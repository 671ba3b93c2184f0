package loadgenhttp

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/loadgen"
)

// runVariant runs one variant. It returns the variant record (nil if the variant
// never started) and an error that ends the run.
func (rn *runner) runVariant(ctx context.Context, name string) (*loadgen.Variant, error) {
	affinity, err := loadgen.AffinityOf(name)
	if err != nil {
		return nil, fmt.Errorf("running variant: %w", err)
	}
	if err := rn.prepareVariant(ctx, name, affinity); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	start, stopScraping := rn.startScraping(ctx, name)
	defer stopScraping()
	vr, err := rn.newVariantRun(ctx, name, start)
	if err != nil {
		return nil, err
	}
	defer vr.cancelTurns()
	vr.settle(vr.drive(ctx))
	if rn.out != nil {
		if err := rn.out.Flush(); err != nil {
			vr.fail(fmt.Errorf("running variant %s: %w", name, err))
		}
	}
	v := vr.loop.Variant()
	if err := loadgen.RecordReplay(vr.loop, rn.m); err != nil {
		vr.fail(err)
	}
	return &v, vr.err
}

// startScraping scrapes once, so every window has a sample at or before its
// start (the prefix-hit delta needs one), and returns the variant's start; then
// it scrapes every interval until stop is called.
func (rn *runner) startScraping(ctx context.Context, variant string) (start time.Duration, stop func()) {
	scrapeCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if rn.scraper != nil {
		rn.scrapeOnce(scrapeCtx, rn.scraper, variant)
	}
	start = rn.clock.Now()
	if rn.scraper != nil {
		wg.Go(func() { rn.scrapeLoop(scrapeCtx, variant, start) })
	}
	return start, func() { cancel(); wg.Wait() }
}

// turnDone is what a turn goroutine hands back to the central goroutine.
type turnDone struct {
	tr    loadgen.TurnRequest
	r     loadgen.Result
	reply string
	sent  bool // false: canceled while waiting for its intended instant
}

// variantStats are the live figures of the progress lines.
type variantStats struct {
	ok, failed int
	// Per stage (index of StageWindow): turns ok and failed, sessions whose last
	// turn ended in the stage (summary.md's "sessions done").
	stageOK, stageFailed, stageSessionsDone []int
	ttfb                                    []*hdrhistogram.Histogram // per stage, microseconds
}

// variantRun is one variant while it runs: its closed loop, the turns out (one
// goroutine each, reporting on results), the live figures and the first error,
// which ends the run. Only the central goroutine touches it, except dispatch's
// turn goroutines, which only send on results.
type variantRun struct {
	rn      *runner
	name    string
	loop    loadgen.Controller
	windows []loadgen.StageWindow
	lastEnd time.Duration
	st      *variantStats

	turnCtx     context.Context
	cancelTurns context.CancelFunc
	results     chan turnDone
	turns       sync.WaitGroup

	maxFail     int // < 0: never abort
	consecutive int // failed turns in a row
	err         error
}

func (rn *runner) newVariantRun(ctx context.Context, name string, start time.Duration) (*variantRun, error) {
	loop, err := loadgen.NewController(rn.sc, rn.w, name, start, loadgen.Fleet{KVTokens: rn.cfg.FleetKVTokens, MaxModelLen: rn.cfg.MaxModelLen})
	if err != nil {
		return nil, fmt.Errorf("running variant %s: %w", name, err)
	}
	windows := loop.Windows()
	st := &variantStats{
		stageOK:           make([]int, len(windows)),
		stageFailed:       make([]int, len(windows)),
		stageSessionsDone: make([]int, len(windows)),
	}
	for range windows {
		st.ttfb = append(st.ttfb, hdrhistogram.New(1, 3_600_000_000, 3))
	}
	vr := &variantRun{rn: rn, name: name, loop: loop, windows: windows, lastEnd: windows[len(windows)-1].End, st: st,
		results: make(chan turnDone, 256), maxFail: rn.maxConsecutiveFailures()}
	// Turns outlive ctx: at Ctrl-C settle cancels them itself, after the loop.
	vr.turnCtx, vr.cancelTurns = context.WithCancel(context.WithoutCancel(ctx))
	return vr, nil
}

// fail records err unless an earlier error ends the run already.
func (vr *variantRun) fail(err error) {
	if vr.err == nil {
		vr.err = err
	}
}

// drive runs the stages in turn, completing turns as they finish and printing
// progress, until the last stage ends, ctx is done or an error ends the run. It
// returns the instant the variant stops.
func (vr *variantRun) drive(ctx context.Context) (stopAt time.Duration) {
	clock, windows := vr.rn.clock, vr.windows
	stage := 0
	vr.dispatch(vr.loop.StartStage(0, windows[0].Start))
	stageTimer := time.NewTimer(time.Until(clock.Wall(windows[0].End)))
	defer stageTimer.Stop()
	every := vr.rn.cfg.ProgressEvery
	if every <= 0 {
		every = DefaultProgressEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	vr.progressLine(stage, "start")
	for vr.err == nil {
		select {
		case d := <-vr.results:
			vr.complete(d, true)
			if loadgen.Ended(vr.loop) {
				// An agent replay played every session: the variant ends now.
				vr.progressLine(stage, "done")
				return min(clock.Now(), vr.lastEnd)
			}
		case <-stageTimer.C:
			vr.progressLine(stage, "done")
			vr.warnConcurrency(stage)
			stage++
			if stage == len(windows) {
				return vr.lastEnd
			}
			vr.dispatch(vr.loop.StartStage(stage, windows[stage].Start))
			stageTimer.Reset(time.Until(clock.Wall(windows[stage].End)))
			tick.Reset(every) // the periodic lines count from the stage's start
			vr.progressLine(stage, "start")
		case <-tick.C:
			vr.progressLine(stage, "")
		case <-ctx.Done():
			stopAt = min(clock.Now(), vr.lastEnd)
			vr.progressLine(stage, "interrupted")
			return stopAt
		}
	}
	return min(clock.Now(), vr.lastEnd)
}

// dispatch starts one goroutine per turn: it waits for the turn's intended
// instant, sends it and reports on results.
func (vr *variantRun) dispatch(trs []loadgen.TurnRequest) {
	clock := vr.rn.clock
	for _, tr := range trs {
		vr.turns.Go(func() {
			// Scenario.RTT: the request reaches the server half an RTT after the
			// client sends it, and every event reaches the client half an RTT after
			// the server wrote it (simulated time, as the virtual world applies it).
			ow := vr.rn.w.OneWay(tr.Session.ID, tr.Turn)
			if err := clock.SleepUntil(vr.turnCtx, tr.Intended+ow); err != nil {
				vr.results <- turnDone{tr: tr}
				return
			}
			r, reply := vr.rn.client.Do(vr.turnCtx, tr, clock)
			if ow > 0 {
				r.ShiftForNetwork(ow)
				// The client sees the end only now: the loop acts on it then.
				_ = clock.SleepUntil(vr.turnCtx, r.Done)
			}
			vr.results <- turnDone{tr: tr, r: r, reply: reply, sent: true}
		})
	}
}

// complete applies one finished turn to the loop, and dispatches the turns it
// makes due if dispatchNext. A turn that ended at or after the variant's end is
// only marked sent: it stays in flight.
func (vr *variantRun) complete(d turnDone, dispatchNext bool) {
	if !d.sent {
		return
	}
	vr.loop.Sent(d.tr, d.r.Sent)
	if d.r.Done >= vr.lastEnd {
		return
	}
	if d.tr.Side != nil {
		vr.record(&d.r) // not a turn: recorded for the report, nothing else
		return
	}
	if d.r.OK() && d.tr.Trace == nil {
		d.tr.Session.AddReply(d.reply)
	}
	next := vr.loop.Finish(&d.r, d.r.Done)
	vr.count(&d.r, vr.loop.WindowIndex(d.r.Done))
	vr.record(&d.r)
	if dispatchNext {
		vr.dispatch(next)
	}
}

// count adds a finished turn to the live figures of stage k and to the failure
// streak; MaxConsecutiveFailures in a row end the run.
func (vr *variantRun) count(r *loadgen.Result, k int) {
	st := vr.st
	if r.OK() {
		st.ok++
		st.stageOK[k]++
		if r.LastTurn {
			st.stageSessionsDone[k]++
		}
		if ttfb := r.TTFB(); ttfb > 0 {
			_ = st.ttfb[k].RecordValue(ttfb.Microseconds())
		}
		vr.consecutive = 0
		return
	}
	st.failed++
	st.stageFailed[k]++
	vr.consecutive++
	if vr.maxFail > 0 && vr.consecutive >= vr.maxFail {
		vr.fail(fmt.Errorf("running variant %s: %w: %d in a row, last: %s", vr.name, ErrTooManyFailures, vr.consecutive, r.Err))
	}
}

// record writes a finished turn or side request to turns.jsonl and hands it to
// OnResult.
func (vr *variantRun) record(r *loadgen.Result) {
	if out := vr.rn.out; out != nil {
		if err := out.WriteResult(r); err != nil {
			vr.fail(fmt.Errorf("running variant %s: %w", vr.name, err))
		}
	}
	if f := vr.rn.cfg.OnResult; f != nil {
		f(*r)
	}
}

// settle ends the variant at stopAt: it cancels what is in flight or waiting,
// then settles every turn. A turn that ended before stopAt counts normally; the
// others stay in flight and Stop counts them InFlight (they are not written to
// turns.jsonl).
func (vr *variantRun) settle(stopAt time.Duration) {
	vr.cancelTurns()
	go func() { vr.turns.Wait(); close(vr.results) }()
	for d := range vr.results {
		if d.sent && d.r.Done < stopAt {
			vr.complete(d, false)
		} else if d.sent {
			vr.loop.Sent(d.tr, d.r.Sent)
		}
	}
	vr.loop.Stop(stopAt)
}

// warnConcurrency prints a warning at stage k's end when the turns it held in
// flight on average (loadgen.Loop.StageConcurrency) fell below
// loadgen.MinConcurrencyPct of the level the loop can hold; summary.md says the
// same from turns.jsonl.
func (vr *variantRun) warnConcurrency(k int) {
	if msg := loadgen.ConcurrencyWarning(vr.loop, k, vr.windows[k].End); msg != "" {
		fmt.Fprintf(vr.rn.progress, "warning: [%s] stage %d/%d (%d sessions): %s\n",
			vr.name, k+1, len(vr.windows), vr.windows[k].Sessions, msg)
	}
}

// progressLine prints one status line: variant, stage, elapsed simulated time,
// sessions, turns ok/failed, turns in flight now and sessions waiting for their
// next turn (think time or failure backoff: nothing on the wire), sessions
// completed, and the stage's TTFB p50. Turns, sessions done and TTFB count the
// stage only, as summary.md does.
func (vr *variantRun) progressLine(stage int, what string) {
	rn, st, windows := vr.rn, vr.st, vr.windows
	if rn.progress == io.Discard || stage >= len(windows) {
		return
	}
	w := vr.loop.Windows()[stage] // live: a trace window counts its conversations as they start
	now := rn.clock.Now()
	el := max(now-w.Start, 0)
	if what == "done" {
		el = w.End - w.Start
	}
	p50 := "-"
	if h := st.ttfb[stage]; h.TotalCount() > 0 {
		p50 = fmt.Sprintf("%.2fs", float64(h.ValueAtQuantile(50))/1e6)
	}
	if what != "" {
		what = " " + what
	}
	label := fmt.Sprintf("stage %d/%d (%d sessions)", stage+1, len(windows), w.Sessions)
	if rn.sc.Trace != nil {
		// A trace replay's report windows, to its end or the duration cap.
		label = fmt.Sprintf("window %d (of at most %d; %d started)", stage+1, len(windows), w.Sessions)
	}
	fmt.Fprintf(rn.progress, "[%s] %s%s  t=%s/%s  sessions %d  turns ok %d failed %d in flight %d waiting %d  sessions done %d  TTFB p50 %s\n",
		vr.loop.Name(), label, what,
		el.Round(time.Second), (w.End - w.Start).Round(time.Second),
		vr.loop.Active(), st.stageOK[stage], st.stageFailed[stage], vr.loop.InFlightAt(now), vr.loop.Waiting(now), st.stageSessionsDone[stage], p50)
}
