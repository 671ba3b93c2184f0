package loadgenhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmapi"
	"github.com/lmwarden/warden/loadgen"
)

// Runner defaults.
const (
	// DefaultProgressEvery is the wall gap between two progress lines within a stage.
	DefaultProgressEvery = 10 * time.Second
	// DefaultMaxConsecutiveFailures aborts a run when that many turns in a row fail
	// (a wrong model name, a dead server): the figures would mean nothing.
	DefaultMaxConsecutiveFailures = 50
	// DefaultIdleWait caps (wall) the wait for replicas to drain before a variant.
	DefaultIdleWait = 30 * time.Second
)

// RunConfig configures an HTTP-world run (Run). Zero fields take defaults.
type RunConfig struct {
	Scenario *loadgen.Scenario // required; defaults applied
	BaseURL  string            // router (or server) root the turns go to, e.g. "http://127.0.0.1:8080"
	// BaseURLs, when it has more than one root, spreads the turns over them
	// round robin per turn (RoundRobin; several routers sharing state); BaseURL
	// is then its first and is asked for the model.
	BaseURLs []string
	// Clock is the run's simulated clock (speed 1 against real servers); nil = a
	// new simclock.Scaled at speed 1. Every instant recorded is Clock.Now().
	Clock *simclock.Scaled
	// Client sends the turns; nil = NewClient(Scenario, BaseURL, HTTP, Header).
	Client Client
	HTTP   *http.Client // nil = a client with a connection pool sized for the stages
	Header http.Header  // extra headers on every turn (e.g. auth); may be nil

	// Replicas are scraped every ScrapeInterval; a required series missing at the
	// first scrape fails the run before any load is sent (peers.md case 13).
	Replicas       []ReplicaMetrics
	ScrapeInterval time.Duration // simulated; default loadgen.DefaultScrapeInterval
	// ResetURLs are server roots to POST /reset_prefix_cache to before each variant
	// when Scenario.ResetCache (vLLM needs VLLM_SERVER_DEV_MODE=1; a refusal is a
	// warning and a manifest note, not a failure).
	ResetURLs []string
	// SetAffinity switches the router's session affinity before each variant; nil =
	// the harness cannot switch it (noted in the manifest).
	SetAffinity func(ctx context.Context, on bool) error
	IdleWait    time.Duration // wall cap on waiting for replicas to drain; default DefaultIdleWait

	ResultsDir    string                     // results/<run-id>/ to write; "" = write nothing
	Progress      io.Writer                  // progress lines; nil = none
	ProgressEvery time.Duration              // wall; default DefaultProgressEvery
	OnResult      func(r loadgen.Result)     // called for every finished turn (from one goroutine)
	OnSample      func(loadgen.SeriesSample) // called for every series sample (from the scraper goroutine)

	MaxConsecutiveFailures int // default DefaultMaxConsecutiveFailures; < 0 = never abort

	// Copied into the manifest.
	RunID    string // default: UTC time "20060102-150405"
	Mode     string // default "http"
	Target   string // default BaseURL
	Profile  string
	Policy   string
	Versions map[string]string
	Notes    []string
}

// ErrTooManyFailures is returned when MaxConsecutiveFailures turns failed in a row.
var ErrTooManyFailures = errors.New("too many consecutive failed turns")

// Run runs every variant of the scenario against BaseURL in the HTTP world: for
// each variant it waits for the replicas to drain, resets their prefix caches (if
// asked), sets the router's affinity, then runs the closed loop (Loop) over the
// stages with one goroutine per turn, while a scraper records every replica's
// series. It writes the results directory (if ResultsDir) and returns the manifest.
//
// On ctx cancellation (Ctrl-C) it stops the current variant at once (in-flight turns
// are canceled and counted InFlight), writes everything completed with
// Manifest.Interrupted set, and returns the manifest with an error wrapping
// ctx.Err(). A broken accounting (Manifest.Check) is returned as an error wrapping
// ErrAccounting, with the manifest.
func Run(ctx context.Context, cfg RunConfig) (*loadgen.Manifest, error) {
	if cfg.Scenario == nil {
		return nil, errors.New("running benchmark: no scenario")
	}
	if err := cfg.Scenario.Validate(); err != nil {
		return nil, fmt.Errorf("running benchmark: invalid scenario: %w", err)
	}
	rn := &runner{cfg: cfg, sc: cfg.Scenario.WithDefaults()}
	if err := rn.setup(ctx); err != nil {
		return nil, err
	}
	var runErr error
	for _, name := range rn.sc.Variants {
		v, err := rn.runVariant(ctx, name)
		if v != nil {
			rn.m.Variants = append(rn.m.Variants, *v)
		}
		if err != nil {
			runErr = err
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		rn.m.Interrupted = true
		if runErr == nil {
			runErr = fmt.Errorf("running benchmark: interrupted: %w", ctx.Err())
		}
	}
	rn.m.Notes = append(rn.m.Notes, rn.notes...)
	if err := rn.m.Check(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("running benchmark: %w", err))
	}
	if rn.out != nil {
		if err := rn.out.Close(rn.m); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("running benchmark: %w", err))
		}
	}
	return rn.m, runErr
}

type runner struct {
	cfg      RunConfig
	sc       *loadgen.Scenario
	clock    *simclock.Scaled
	client   Client
	http     *http.Client
	w        *loadgen.Workload
	scraper  *Scraper
	out      *loadgen.ResultsWriter
	m        *loadgen.Manifest
	progress io.Writer

	notesMu sync.Mutex
	notes   []string
	warned  map[string]bool
}

func (rn *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	rn.notesMu.Lock()
	defer rn.notesMu.Unlock()
	if rn.warned == nil {
		rn.warned = map[string]bool{}
	}
	if rn.warned[msg] {
		return
	}
	rn.warned[msg] = true
	rn.notes = append(rn.notes, msg)
	fmt.Fprintf(rn.progress, "warning: %s\n", msg)
}

func (rn *runner) setup(ctx context.Context) error {
	cfg := rn.cfg
	rn.clock = cfg.Clock
	if rn.clock == nil {
		rn.clock = simclock.NewScaled(1)
	}
	rn.progress = io.Discard
	if cfg.Progress != nil {
		rn.progress = &lockedWriter{w: cfg.Progress}
	}
	rn.http = cfg.HTTP
	if rn.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		most := 0
		for _, n := range rn.sc.Stages {
			most = max(most, n)
		}
		tr.MaxIdleConnsPerHost = 2*most + 16
		tr.MaxIdleConns = 0
		rn.http = &http.Client{Transport: tr}
	}
	if cfg.Client != nil {
		rn.client = cfg.Client
	} else {
		if rn.sc.Model == "" {
			model, err := vllmapi.FirstModel(ctx, rn.http, cfg.BaseURL, cfg.Header)
			if err != nil {
				return fmt.Errorf("running benchmark: asking the served model: %w", err)
			}
			rn.sc.Model = model
		}
		rn.client = NewClient(rn.sc, cfg.BaseURL, rn.http, cfg.Header)
		if len(cfg.BaseURLs) > 1 {
			rr := &RoundRobin{}
			for _, u := range cfg.BaseURLs {
				rr.Clients = append(rr.Clients, NewClient(rn.sc, u, rn.http, cfg.Header))
			}
			rn.client = rr
		}
	}
	rn.w = loadgen.NewWorkload(rn.sc)
	if len(cfg.Replicas) > 0 {
		rn.scraper = &Scraper{Replicas: cfg.Replicas, HTTP: rn.http, Clock: rn.clock}
		if _, err := rn.scraper.Scrape(ctx, ""); err != nil {
			return fmt.Errorf("running benchmark: first scrape of replica metrics: %w", err)
		}
	}
	m := &loadgen.Manifest{
		RunID:    cfg.RunID,
		Created:  time.Now().UTC(),
		Mode:     cfg.Mode,
		Target:   cfg.Target,
		Scenario: rn.sc,
		Seed:     rn.sc.Seed,
		Speed:    rn.clock.Speed,
		Profile:  cfg.Profile,
		Policy:   cfg.Policy,
		Versions: map[string]string{},
		Notes:    append([]string(nil), cfg.Notes...),
	}
	if m.RunID == "" {
		m.RunID = m.Created.Format("20060102-150405")
	}
	if m.Mode == "" {
		m.Mode = "http"
	}
	if m.Target == "" {
		m.Target = cfg.BaseURL
	}
	if m.Speed <= 0 {
		m.Speed = 1
	}
	for k, v := range cfg.Versions {
		m.Versions[k] = v
	}
	if _, ok := m.Versions["go"]; !ok {
		m.Versions["go"] = runtime.Version()
	}
	for _, r := range cfg.Replicas {
		m.Replicas = append(m.Replicas, r.Name)
	}
	if cfg.SetAffinity == nil {
		m.Notes = append(m.Notes, "the harness did not switch router affinity between variants (no SetAffinity)")
	}
	rn.m = m
	if cfg.ResultsDir != "" {
		out, err := loadgen.CreateResults(cfg.ResultsDir)
		if err != nil {
			return fmt.Errorf("running benchmark: %w", err)
		}
		rn.out = out
	}
	return nil
}

// NewClient returns the streaming client for sc.API (OpenAIClient or
// AnthropicClient) with the scenario's model, max output tokens, session header
// style and request timeout.
func NewClient(sc *loadgen.Scenario, baseURL string, hc *http.Client, header http.Header) Client {
	sc = sc.WithDefaults()
	if sc.API == loadgen.APIAnthropicMessages {
		return &AnthropicClient{BaseURL: baseURL, Model: sc.Model, MaxTokens: sc.MaxOutputTokens,
			SessionHeader: sc.SessionHeader, Header: header, HTTP: hc, Timeout: sc.RequestTimeout}
	}
	return &OpenAIClient{BaseURL: baseURL, Model: sc.Model, MaxTokens: sc.MaxOutputTokens,
		SessionHeader: sc.SessionHeader, Header: header, HTTP: hc, Timeout: sc.RequestTimeout}
}

// lockedWriter serialises writes from the central and scraper goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
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
	ok, failed  int
	outstanding int // turns dispatched and not yet back (waiting or in flight)
	// Per stage (index of StageWindow): turns ok and failed, sessions whose last
	// turn ended in the stage (summary.md's "sessions done").
	stageOK, stageFailed, stageSessionsDone []int
	ttfb                                    []*hdrhistogram.Histogram // per stage, microseconds
}

func (rn *runner) prepareVariant(ctx context.Context, name string, affinity bool) error {
	rn.waitIdle(ctx)
	if *rn.sc.ResetCache {
		for _, u := range rn.cfg.ResetURLs {
			if err := resetPrefixCache(ctx, rn.http, u); err != nil {
				rn.note("variant %s: %v (the variant starts with a warm cache)", name, err)
			}
		}
		if len(rn.cfg.ResetURLs) == 0 {
			rn.note("prefix caches were not reset between variants (no reset URLs): later variants start warm")
		}
	}
	if rn.cfg.SetAffinity != nil {
		if err := rn.cfg.SetAffinity(ctx, affinity); err != nil {
			return fmt.Errorf("running variant %s: setting router affinity %v: %w", name, affinity, err)
		}
	}
	return nil
}

// waitIdle waits (up to IdleWait, wall) until no replica runs or queues a request,
// so a variant does not start on the previous one's leftovers.
func (rn *runner) waitIdle(ctx context.Context) {
	if rn.scraper == nil {
		return
	}
	limit := rn.cfg.IdleWait
	if limit == 0 {
		limit = DefaultIdleWait
	}
	deadline := time.Now().Add(limit)
	for {
		samples, _ := rn.scraper.Scrape(ctx, "")
		busy := false
		for _, s := range samples {
			if s.Running > 0 || s.Waiting > 0 {
				busy = true
			}
		}
		if !busy || time.Now().After(deadline) || ctx.Err() != nil {
			if busy {
				rn.note("replicas still busy after waiting %s for them to drain", limit)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func resetPrefixCache(ctx context.Context, hc *http.Client, base string) error {
	url := strings.TrimSuffix(base, "/") + "/reset_prefix_cache"
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return fmt.Errorf("resetting prefix cache: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("resetting prefix cache: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return fmt.Errorf("resetting prefix cache: POST %s: http %d %s (vLLM needs VLLM_SERVER_DEV_MODE=1)",
			url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

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
	clock := rn.clock

	// Scrape once at or before the variant's start so every window has a sample at
	// or before its start (the prefix-hit delta needs one), then every interval.
	var scrapeWG sync.WaitGroup
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	defer func() { stopScrape(); scrapeWG.Wait() }()
	if rn.scraper != nil {
		rn.scrapeOnce(scrapeCtx, name)
	}
	start := clock.Now()
	if rn.scraper != nil {
		scrapeWG.Go(func() { rn.scrapeLoop(scrapeCtx, name) })
	}

	loop := loadgen.NewLoop(rn.sc, rn.w, name, start)
	windows := loop.Windows()
	lastEnd := windows[len(windows)-1].End
	st := &variantStats{
		stageOK:           make([]int, len(windows)),
		stageFailed:       make([]int, len(windows)),
		stageSessionsDone: make([]int, len(windows)),
	}
	for range windows {
		st.ttfb = append(st.ttfb, hdrhistogram.New(1, 3_600_000_000, 3))
	}

	turnCtx, cancelTurns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTurns()
	results := make(chan turnDone, 256)
	var turns sync.WaitGroup
	dispatch := func(trs []loadgen.TurnRequest) {
		st.outstanding += len(trs)
		for _, tr := range trs {
			turns.Go(func() {
				if err := clock.SleepUntil(turnCtx, tr.Intended); err != nil {
					results <- turnDone{tr: tr}
					return
				}
				r, reply := rn.client.Do(turnCtx, tr, clock)
				results <- turnDone{tr: tr, r: r, reply: reply, sent: true}
			})
		}
	}

	maxFail := rn.cfg.MaxConsecutiveFailures
	if maxFail == 0 {
		maxFail = DefaultMaxConsecutiveFailures
	}
	consecutive := 0
	var runErr error
	// complete applies one finished turn to the loop. A turn that ended at or after
	// the variant's end is only marked sent: it stays in flight.
	complete := func(d turnDone, dispatchNext bool) {
		st.outstanding--
		if !d.sent {
			return
		}
		loop.Sent(d.tr, d.r.Sent)
		if d.r.Done >= lastEnd {
			return
		}
		if d.tr.Side != nil {
			// Not a turn: recorded for the report, nothing else.
			if rn.out != nil {
				if err := rn.out.WriteResult(&d.r); err != nil && runErr == nil {
					runErr = fmt.Errorf("running variant %s: %w", name, err)
				}
			}
			if rn.cfg.OnResult != nil {
				rn.cfg.OnResult(d.r)
			}
			return
		}
		if d.r.OK() {
			d.tr.Session.AddReply(d.reply)
		}
		next := loop.Finish(&d.r, d.r.Done)
		k := loop.WindowIndex(d.r.Done)
		if d.r.OK() {
			st.ok++
			st.stageOK[k]++
			if d.r.LastTurn {
				st.stageSessionsDone[k]++
			}
			if ttfb := d.r.TTFB(); ttfb > 0 {
				_ = st.ttfb[k].RecordValue(ttfb.Microseconds())
			}
			consecutive = 0
		} else {
			st.failed++
			st.stageFailed[k]++
			consecutive++
			if maxFail > 0 && consecutive >= maxFail && runErr == nil {
				runErr = fmt.Errorf("running variant %s: %w: %d in a row, last: %s", name, ErrTooManyFailures, consecutive, d.r.Err)
			}
		}
		if rn.out != nil {
			if err := rn.out.WriteResult(&d.r); err != nil && runErr == nil {
				runErr = fmt.Errorf("running variant %s: %w", name, err)
			}
		}
		if rn.cfg.OnResult != nil {
			rn.cfg.OnResult(d.r)
		}
		if dispatchNext {
			dispatch(next)
		}
	}

	stage := 0
	dispatch(loop.StartStage(0, windows[0].Start))
	stageTimer := time.NewTimer(time.Until(clock.Wall(windows[0].End)))
	defer stageTimer.Stop()
	every := rn.cfg.ProgressEvery
	if every <= 0 {
		every = DefaultProgressEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	rn.progressLine(loop, st, stage, windows, "start")

	stopAt := lastEnd
run:
	for runErr == nil {
		select {
		case d := <-results:
			complete(d, true)
		case <-stageTimer.C:
			rn.progressLine(loop, st, stage, windows, "done")
			stage++
			if stage == len(windows) {
				break run
			}
			dispatch(loop.StartStage(stage, windows[stage].Start))
			stageTimer.Reset(time.Until(clock.Wall(windows[stage].End)))
			tick.Reset(every) // the periodic lines count from the stage's start
			rn.progressLine(loop, st, stage, windows, "start")
		case <-tick.C:
			rn.progressLine(loop, st, stage, windows, "")
		case <-ctx.Done():
			stopAt = min(clock.Now(), lastEnd)
			rn.progressLine(loop, st, stage, windows, "interrupted")
			break run
		}
	}
	if runErr != nil {
		stopAt = min(clock.Now(), lastEnd)
	}

	// End of the variant: cancel what is in flight or waiting, then settle every
	// turn. A turn that ended before stopAt counts normally; the others stay in
	// flight and Stop counts them InFlight (they are not written to turns.jsonl).
	cancelTurns()
	go func() { turns.Wait(); close(results) }()
	for d := range results {
		if d.sent && d.r.Done < stopAt {
			complete(d, false)
		} else if d.sent {
			st.outstanding--
			loop.Sent(d.tr, d.r.Sent)
		}
	}
	loop.Stop(stopAt)
	if rn.out != nil {
		if err := rn.out.Flush(); err != nil && runErr == nil {
			runErr = fmt.Errorf("running variant %s: %w", name, err)
		}
	}
	v := loop.Variant()
	return &v, runErr
}

func (rn *runner) scrapeOnce(ctx context.Context, variant string) {
	samples, err := rn.scraper.Scrape(ctx, variant)
	for _, s := range samples {
		if rn.out != nil {
			if err := rn.out.WriteSample(s); err != nil {
				rn.note("%v", err)
			}
		}
		if rn.cfg.OnSample != nil {
			rn.cfg.OnSample(s)
		}
	}
	if err != nil && ctx.Err() == nil {
		for _, e := range splitJoined(err) {
			rn.note("variant %s: %v", variant, e)
		}
	}
}

func (rn *runner) scrapeLoop(ctx context.Context, variant string) {
	iv := rn.cfg.ScrapeInterval
	if iv <= 0 {
		iv = loadgen.DefaultScrapeInterval
	}
	t := time.NewTicker(max(rn.clock.WallDuration(iv), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rn.scrapeOnce(ctx, variant)
		}
	}
}

// splitJoined returns the errors of an errors.Join, or err itself.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// progressLine prints one status line: variant, stage, elapsed simulated time,
// sessions, turns ok/failed/in flight, sessions completed, and the stage's TTFB p50.
// Turns, sessions done and TTFB count the stage only, as summary.md does.
func (rn *runner) progressLine(loop *loadgen.Loop, st *variantStats, stage int, windows []loadgen.StageWindow, what string) {
	if rn.progress == io.Discard || stage >= len(windows) {
		return
	}
	w := windows[stage]
	el := max(rn.clock.Now()-w.Start, 0)
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
	fmt.Fprintf(rn.progress, "[%s] stage %d/%d (%d sessions)%s  t=%s/%s  sessions %d  turns ok %d failed %d outstanding %d  sessions done %d  TTFB p50 %s\n",
		loop.Name(), stage+1, len(windows), w.Sessions, what,
		el.Round(time.Second), (w.End - w.Start).Round(time.Second),
		loop.Active(), st.stageOK[stage], st.stageFailed[stage], st.outstanding, st.stageSessionsDone[stage], p50)
}
