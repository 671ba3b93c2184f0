package simhttp

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/sim"
)

// errShuttingDown is what a request still in an engine gets when its server closes.
var errShuttingDown = errors.New("engine is shutting down")

// minStep is the smallest simulated step the driver accepts from an engine. It only
// guards against a step that ends at or before the instant it started (an engine bug),
// which would otherwise spin the driver forever.
const minStep = time.Microsecond

// Engine drives one sim.Engine (one DP rank) on the scaled clock: one goroutine steps
// it at the exact simulated instants it asks for (StepResult.NextAt), and hands each
// step's events to the HTTP handlers waiting on them. All access to the sim.Engine goes
// through Engine's mutex, which is never held across network I/O.
type Engine struct {
	server, rank int
	label        string // the /metrics engine label: the DP rank "0".."N-1"
	clock        *simclock.Scaled
	cfg          sim.EngineConfig // effective configuration (defaults filled)
	created      time.Time        // wall time the engine started (for _created samples)

	mu     sync.Mutex
	eng    *sim.Engine
	nextAt time.Duration      // end of the scheduled batch, valid when eng.Busy()
	live   map[string]*stream // requests submitted and not finished or aborted
	closed bool
	ttft   histogram // vllm:time_to_first_token_seconds, simulated seconds

	finishing map[string]sim.Event // scratch for stepLocked
	stops     int64                // finished requests whose reason is "stop" (the rest are "length")

	wake chan struct{} // cap 1: a Submit changed the schedule

	fe       *frontend // nil: events are written at the step's end
	feTokens []int     // scratch for stepLocked, per API-server process
	feSeen   []bool
	feAt     []time.Duration
}

// newEngine builds the engine; run must be started by the owner.
func newEngine(server, rank int, cfg sim.EngineConfig, clock *simclock.Scaled) (*Engine, error) {
	eng, err := sim.NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	return &Engine{
		server:    server,
		rank:      rank,
		label:     strconv.Itoa(rank),
		clock:     clock,
		cfg:       eng.Config(),
		created:   time.Now(),
		eng:       eng,
		live:      map[string]*stream{},
		finishing: map[string]sim.Event{},
		ttft:      newHistogram(vllmmetrics.TTFTBuckets),
		wake:      make(chan struct{}, 1),
	}, nil
}

// Server is the index of the server (port) the engine belongs to.
func (d *Engine) Server() int { return d.server }

// Rank is the engine's DP rank within its server (0 without data parallelism).
func (d *Engine) Rank() int { return d.rank }

// Config returns the engine's effective configuration.
func (d *Engine) Config() sim.EngineConfig { return d.cfg }

// Stats returns the engine's state and counters as of the current simulated instant.
func (d *Engine) Stats() sim.Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.advanceLocked(d.clock.Now())
	}
	return d.eng.Stats()
}

// Live returns the number of requests the HTTP side is waiting on.
func (d *Engine) Live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.live)
}

// ResetPrefixCache drops the engine's idle cached blocks; false when blocks are in use
// (vLLM then refuses, see sim.Engine.ResetPrefixCache).
func (d *Engine) ResetPrefixCache() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.advanceLocked(d.clock.Now())
	}
	return d.eng.ResetPrefixCache()
}

// scrape returns the stats, the TTFT histogram and the count of "stop" finishes in
// one consistent read.
func (d *Engine) scrape() (sim.Stats, histogram, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.advanceLocked(d.clock.Now())
	}
	return d.eng.Stats(), d.ttft.clone(), d.stops
}

// run steps the engine until ctx is done, then fails every live request.
func (d *Engine) run(ctx context.Context) {
	defer d.shutdown()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		d.mu.Lock()
		d.advanceLocked(d.clock.Now())
		busy, next := d.eng.Busy(), d.nextAt
		d.mu.Unlock()
		if !busy {
			select {
			case <-ctx.Done():
				return
			case <-d.wake:
			}
			continue
		}
		wait := time.Until(d.clock.Wall(next))
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-d.wake:
			timer.Stop()
		}
	}
}

// advanceLocked runs every batch that ends at or before now, each at its exact end
// instant, so simulated time stays exact however late the goroutine wakes.
func (d *Engine) advanceLocked(now time.Duration) {
	for d.eng.Busy() && d.nextAt <= now {
		t := d.nextAt
		d.stepLocked(t)
	}
}

// stepLocked calls Step(t) and delivers its events.
func (d *Engine) stepLocked(t time.Duration) {
	res := d.eng.Step(t)
	if res.Busy {
		d.nextAt = max(res.NextAt, t+minStep)
	}
	// A step emits at most one token per request, so a request that finishes in this
	// step gets its last token and its completion in one critical section: a handler
	// never sees the last token without the finish (it sends them in one event).
	for _, ev := range res.Events {
		if ev.Kind == sim.EventFinished {
			d.finishing[ev.ReqID] = ev
		}
	}
	var due []time.Duration // per API-server process: when this step's outputs are written
	if d.fe != nil {
		n := d.fe.processes()
		d.feTokens = append(d.feTokens[:0], make([]int, n)...)
		d.feSeen = append(d.feSeen[:0], make([]bool, n)...)
		for _, ev := range res.Events {
			if s := d.live[ev.ReqID]; s != nil {
				d.feSeen[s.proc] = true
				if ev.Kind == sim.EventFirstToken || ev.Kind == sim.EventToken {
					d.feTokens[s.proc]++
				}
			}
		}
		d.feAt = d.fe.emit(t, d.feTokens, d.feSeen, d.feAt)
		due = d.feAt
	}
	dueOf := func(s *stream) time.Duration {
		if due == nil {
			return 0
		}
		return due[s.proc]
	}
	for _, ev := range res.Events {
		s := d.live[ev.ReqID]
		if s == nil {
			continue
		}
		switch ev.Kind {
		case sim.EventFirstToken, sim.EventToken:
			if ev.Kind == sim.EventFirstToken {
				d.ttft.observe((t - s.arrival).Seconds())
			}
			fin, finishing := d.finishing[ev.ReqID]
			if finishing {
				delete(d.finishing, ev.ReqID)
				d.retire(s, fin)
			}
			at := dueOf(s)
			s.deliver(func() {
				s.due = max(s.due, at)
				if ev.Kind == sim.EventFirstToken {
					s.begin(ev)
				}
				s.tokens = append(s.tokens, ev.Token)
				if finishing {
					s.complete(fin)
				}
			})
		case sim.EventPreempted:
			s.deliver(func() { s.preemptions++ })
		}
	}
	// Completions without a token in this step (not produced by sim.Engine today).
	for id, fin := range d.finishing {
		delete(d.finishing, id)
		if s := d.live[id]; s != nil {
			d.retire(s, fin)
			at := dueOf(s)
			s.deliver(func() {
				s.due = max(s.due, at)
				if !s.started {
					s.begin(fin)
				}
				s.complete(fin)
			})
		}
	}
}

// retire forgets a finished request and counts how it finished.
func (d *Engine) retire(s *stream, fin sim.Event) {
	delete(d.live, fin.ReqID)
	if s.finish == "stop" {
		d.stops++
	}
}

// submit queues a request at the current simulated instant and returns the stream its
// events will arrive on. It returns sim.ErrPromptTooLong or errShuttingDown.
// proc is the API-server process that handles the request's outputs (0 without
// Config.APIServers).
func (d *Engine) submit(id string, prompt []uint32, maxTokens int, finish string, proc int) (*stream, error) {
	s := &stream{id: id, finish: finish, proc: proc, notify: make(chan struct{}, 1)}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errShuttingDown
	}
	now := d.clock.Now()
	d.advanceLocked(now)
	s.arrival = now
	if err := d.eng.Submit(&sim.Request{ID: id, Prompt: prompt, MaxTokens: maxTokens}, now); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.live[id] = s
	if !d.eng.Busy() {
		d.stepLocked(now) // idle engine: schedule the new request's first batch now
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return s, nil
}

// abort removes a request whose client went away; finished requests are ignored.
func (d *Engine) abort(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.live[id]; !ok || d.closed {
		return
	}
	d.advanceLocked(d.clock.Now())
	if _, ok := d.live[id]; !ok {
		return // finished while catching up
	}
	delete(d.live, id)
	d.eng.Abort(id)
}

// shutdown refuses new requests and fails the live ones.
func (d *Engine) shutdown() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for id, s := range d.live {
		delete(d.live, id)
		s.deliver(func() { s.err = errShuttingDown })
	}
}

// stream is one request's mailbox between the engine goroutine and its HTTP handler.
// The engine side appends under mu and signals notify (never blocks), so a slow client
// cannot stall the engine; the handler drains whatever accumulated.
type stream struct {
	id      string
	finish  string        // finish_reason the request will end with: "length" or "stop"
	arrival time.Duration // simulated instant of Submit
	proc    int           // API-server process (Config.APIServers)
	notify  chan struct{} // cap 1

	mu           sync.Mutex
	tokens       []uint32 // output tokens not yet taken by the handler
	started      bool     // the first token was produced
	promptTokens int
	cachedTokens int
	finished     bool
	outputTokens int
	preemptions  int
	err          error
	due          time.Duration // when the API server writes what is pending (0: at once)
}

// begin records the first token's facts; the caller holds s.mu.
func (s *stream) begin(ev sim.Event) {
	s.started = true
	s.promptTokens, s.cachedTokens = ev.PromptTokens, ev.CachedTokens
}

// complete records completion; the caller holds s.mu.
func (s *stream) complete(ev sim.Event) {
	s.finished = true
	s.outputTokens = ev.OutputTokens
}

func (s *stream) deliver(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// update is what a handler takes from a stream in one go.
type update struct {
	tokens       []uint32
	started      bool
	promptTokens int
	cachedTokens int
	finished     bool
	outputTokens int
	err          error
	due          time.Duration // simulated instant the API server writes it (0: now)
}

// take returns and clears the pending tokens along with the stream's state.
func (s *stream) take(buf []uint32) update {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := update{
		tokens:       append(buf[:0], s.tokens...),
		started:      s.started,
		promptTokens: s.promptTokens,
		cachedTokens: s.cachedTokens,
		finished:     s.finished,
		outputTokens: s.outputTokens,
		err:          s.err,
		due:          s.due,
	}
	s.tokens = s.tokens[:0]
	return u
}

// histogram is a Prometheus-style histogram with fixed upper bounds.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; len(bounds)+1 (last is +Inf)
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.count++
}

func (h histogram) clone() histogram {
	c := h
	c.counts = append([]uint64(nil), h.counts...)
	return c
}

// cumulative returns the buckets as client_golang's const histograms want them.
func (h histogram) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(h.bounds))
	var acc uint64
	for i, b := range h.bounds {
		acc += h.counts[i]
		m[b] = acc
	}
	return m
}
