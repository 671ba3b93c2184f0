package study

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Options configures a study: every setup x arm x seed.
type Options struct {
	Setups []Setup
	Arms   []Arm
	Seeds  []uint64
	// StageDurations, when set, runs every seed once per duration (each replacing
	// the setup's stage duration), so a row's samples are seeds x durations. With
	// identical sessions and no gap between turns the seeds alone barely move
	// where a stage's window cuts the conversations' turns; varying the window
	// length does, and the spread it adds is part of what a 3-minute stage
	// measures (docs/routing.md, section 7, "At 24-32 sessions a 3-minute
	// window's verdict is its phase").
	StageDurations []time.Duration
	// OutDir receives the study's files (Write); "" writes nothing.
	OutDir string
	// TraceSeed, when non-zero, draws the per-replica trace of that seed's run of
	// every setup and arm into OutDir/trace-<setup>-<arm>.png.
	TraceSeed uint64
	// TraceArms limits the traces to these arms (nil: every arm).
	TraceArms []string
	// Signals records every decision of the TraceSeed runs and writes the signals
	// table (SignalsFile; results/study/signals.md is the committed one).
	Signals bool
	// NoFigures skips the per-metric figures (for studies with many arms).
	NoFigures bool
	// Parallel runs at most this many runs at once (0: GOMAXPROCS). Runs are
	// independent and deterministic, so the result does not depend on it.
	Parallel int
	Progress io.Writer // one line per run; nil = none
}

// Run executes the study and returns every run's result in setup, arm, seed order.
// With OutDir set it writes the tables, figures and traces (Write). A failed run
// fails the study; ctx cancellation stops it between runs.
func Run(ctx context.Context, o Options) ([]*RunResult, error) {
	if len(o.Setups) == 0 || len(o.Arms) == 0 || len(o.Seeds) == 0 {
		return nil, errors.New("running study: need at least one setup, arm and seed")
	}
	type job struct {
		i    int
		s    Setup
		a    Arm
		seed uint64
		dur  time.Duration // 0: the setup's
	}
	durs := o.StageDurations
	if len(durs) == 0 {
		durs = []time.Duration{0}
	}
	for _, d := range durs {
		if d < 0 {
			return nil, fmt.Errorf("running study: negative stage duration %v", d)
		}
	}
	var jobs []job
	for _, s := range o.Setups {
		for _, a := range o.Arms {
			for _, seed := range o.Seeds {
				for _, d := range durs {
					jobs = append(jobs, job{len(jobs), s, a, seed, d})
				}
			}
		}
	}
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	out := make([]*RunResult, len(jobs))
	errs := make([]error, len(jobs))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(jobs) || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				mu.Unlock()
				traced := o.TraceSeed != 0 && j.seed == o.TraceSeed && j.dur == durs[0] &&
					(o.TraceArms == nil || slices.Contains(o.TraceArms, j.a.Name))
				r, err := RunOne(ctx, j.s, j.a, j.seed, RunOptions{Trace: traced, Placements: traced && o.Signals, StageDuration: j.dur})
				out[j.i], errs[j.i] = r, err
				if o.Progress != nil && err == nil {
					mu.Lock()
					stage := ""
					if j.dur > 0 {
						stage = fmt.Sprintf(" stage %v", j.dur)
					}
					fmt.Fprintf(o.Progress, "study %-10s %-28s seed %d%s  %.1fs\n", j.s.Name, j.a.Name, j.seed, stage, r.Wall.Seconds())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("running study: %w", ctx.Err())
	}
	if o.OutDir != "" {
		if err := Write(o.OutDir, o, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// tracePath is the file a run's trace is drawn to.
func tracePath(dir, setup, arm string) string {
	return filepath.Join(dir, "trace-"+setup+"-"+arm+".png")
}
