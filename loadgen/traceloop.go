package loadgen

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/loadgen/trace"
)

// Trace replay modes (TraceSpec.Mode).
const (
	// TraceTimestamp sends every request at its recorded time (open loop).
	TraceTimestamp = "timestamp"
	// TraceSession sends a conversation's first turn at its recorded time and
	// every later turn at the previous turn's end plus the recorded gap between
	// the two turns' timestamps.
	TraceSession = "session"
)

// DefaultTraceWindow is the length of a trace replay's report window (one
// "stage" of the results).
const DefaultTraceWindow = 5 * time.Minute

// TraceSpec is a scenario's `trace:` section: replay a trace in the Mooncake
// format (package trace) instead of the synthetic sessions. Zero fields take
// the defaults given.
type TraceSpec struct {
	File      string                        `yaml:"file" json:"file"`             // required; relative to the scenario file
	Mode      string                        `yaml:"mode" json:"mode"`             // "timestamp" (default) or "session"
	BlockSize int                           `yaml:"block_size" json:"block_size"` // tokens per hash id; default 512
	Speedup   float64                       `yaml:"speedup" json:"speedup"`       // divide recorded times by it; default 1
	From      time.Duration                 `yaml:"from" json:"from"`             // recorded window start; default 0
	To        time.Duration                 `yaml:"to" json:"to"`                 // recorded window end, exclusive; default the end
	Sample    float64                       `yaml:"sample" json:"sample"`         // fraction of conversations kept; default 1
	Window    time.Duration                 `yaml:"window" json:"window"`         // report window; default 5m
	Keys      bool                          `yaml:"keys" json:"keys,omitempty"`   // timestamp mode: send session keys (session mode always does, unless session_header is none)
	Salt      uint64                        `yaml:"salt" json:"salt,omitempty"`   // varies the synthesized text
	Path      string                        `yaml:"-" json:"-"`                   // File resolved (set by the caller)
	Opener    func() (io.ReadCloser, error) `yaml:"-" json:"-"`                   // opens the trace; default os.Open(Path) by the caller
}

// Validate reports every bad field.
func (t *TraceSpec) Validate() error {
	var errs []error
	if t.File == "" && t.Opener == nil {
		errs = append(errs, errors.New("trace.file: required"))
	}
	if t.Mode != "" && t.Mode != TraceTimestamp && t.Mode != TraceSession {
		errs = append(errs, fmt.Errorf("trace.mode %q: want %q or %q", t.Mode, TraceTimestamp, TraceSession))
	}
	if t.BlockSize < 0 {
		errs = append(errs, fmt.Errorf("trace.block_size %d: want a positive number of tokens", t.BlockSize))
	}
	if t.Window < 0 {
		errs = append(errs, fmt.Errorf("trace.window %v is negative", t.Window))
	}
	if err := t.sliceOptions(0).Validate(); err != nil {
		// Each message starts with its option's name: "sample 1.5 is ...".
		for _, msg := range strings.Split(err.Error(), "\n") {
			errs = append(errs, errors.New("trace."+msg))
		}
	}
	return errors.Join(errs...)
}

// WithDefaults returns a copy with defaults applied.
func (t TraceSpec) WithDefaults() TraceSpec {
	if t.Mode == "" {
		t.Mode = TraceTimestamp
	}
	if t.BlockSize == 0 {
		t.BlockSize = trace.DefaultBlockSize
	}
	if t.Speedup == 0 {
		t.Speedup = 1
	}
	if t.Sample == 0 {
		t.Sample = 1
	}
	if t.Window == 0 {
		t.Window = DefaultTraceWindow
	}
	return t
}

func (t *TraceSpec) sliceOptions(seed uint64) trace.SliceOptions {
	return trace.SliceOptions{From: t.From, To: t.To, Speedup: t.Speedup, Sample: t.Sample, Seed: seed}
}

// TraceTurn is the trace request a TurnRequest replays.
type TraceTurn struct {
	Index   int // position in the whole trace (0-based)
	Request trace.Request
}

// TraceReplay is what a trace replay records in the manifest (per variant).
type TraceReplay struct {
	Variant string `json:"variant"`
	Mode    string `json:"mode"`
	// Requests kept by the slice; Sent of them were sent, NotSent were not
	// (recorded after the run's end, or a later turn of a conversation whose
	// earlier turn failed).
	Requests int `json:"requests"`
	Sent     int `json:"sent"`
	NotSent  int `json:"not_sent"`
	// Conversations: first turns kept; ContinuedFirst: later turns whose earlier
	// turn fell outside the slice, sent as first turns (session mode).
	Conversations  int `json:"conversations"`
	ContinuedFirst int `json:"continued_first"`
	// TurnsPerConversation: conversation length in turns -> conversations.
	TurnsPerConversation map[int]int `json:"turns_per_conversation"`
	InputTokens          int64       `json:"input_tokens"`
	OutputTokens         int64       `json:"output_tokens"`
	// CeilingPct: hit % of an unbounded prefix cache shared by all replicas;
	// SharedLRUPct: of one LRU cache of SharedLRUTokens (the fleet's KV; 0 when
	// the fleet's KV is not known, and SharedLRUPct is then 0 too), both
	// over the kept requests in order, from the block ids alone (trace.LRU).
	CeilingPct      float64 `json:"reuse_ceiling_pct"`
	SharedLRUPct    float64 `json:"shared_lru_pct"`
	SharedLRUTokens int64   `json:"shared_lru_tokens"`
	// LatenessP50/P99/Max: how late sends were against the intended instant
	// (timestamp mode: the recorded time; session mode: the previous turn's end
	// plus the gap), seconds.
	// Windows: the same two hit rates per report window, over the requests
	// recorded in it (in window order, as the manifest's stages).
	Windows      []TraceWindow `json:"windows,omitempty"`
	LatenessP50S float64       `json:"lateness_p50_s"`
	LatenessP99S float64       `json:"lateness_p99_s"`
	LatenessMaxS float64       `json:"lateness_max_s"`
}

// TraceWindow is one report window's share of a TraceReplay: requests recorded
// in it and the hit % the block ids allow them (reuse ceiling, shared LRU of
// the fleet's KV; 0 when the fleet's KV is unknown).
type TraceWindow struct {
	Requests     int     `json:"requests"`
	CeilingPct   float64 `json:"reuse_ceiling_pct"`
	SharedLRUPct float64 `json:"shared_lru_pct"`
}

// TraceLoop is the dispatcher of one variant of a trace replay, in the role
// Loop plays for synthetic sessions (the same methods, the same accounting of
// windows): it reads the trace window by window (at a window's start, the
// requests recorded in it), so it holds only a window's requests and the
// conversations' ends. Pure: callers pass every instant.
type TraceLoop struct {
	spec    TraceSpec
	sc      *Scenario
	variant string
	start   time.Duration
	windows []StageWindow
	keys    bool

	rd     *trace.Reader
	closer io.Closer
	slicer *trace.Slicer
	peek   *TraceTurn
	peekT  trace.Turn
	eof    bool
	err    error

	// Conversation state by trace index: a kept request's end (or failure),
	// and later turns waiting for an earlier turn to end.
	ended   map[int]endInfo
	waiting map[int][]TurnRequest
	kept    map[int]bool // trace indices kept by the slice so far
	convLen map[int]int  // conversation (first index) -> turns kept
	open    map[int]openTurn
	due     map[int]time.Duration

	ceiling, shared *trace.HitCounter
	win             []windowHits // per window: requests read in it and their hits
	late            *hdrhistogram.Histogram
	rep             TraceReplay
	stopped         bool
	stopAt          time.Duration
}

type windowHits struct {
	requests                int
	prompt, ceiling, shared int64
}

type endInfo struct {
	at time.Duration
	ok bool
	ts time.Duration // the request's (sliced) recorded timestamp
}

// NewTraceLoop returns the dispatcher of variant for sc.Trace starting at the
// simulated instant start; fleetKVTokens sizes the shared-LRU column. It reads
// the trace once to find its span (windows), and errors name the line.
func NewTraceLoop(sc *Scenario, variant string, start time.Duration, fleetKVTokens int64) (*TraceLoop, error) {
	sc = sc.WithDefaults()
	if sc.Trace == nil {
		return nil, errors.New("trace replay: scenario has no trace")
	}
	spec := sc.Trace.resolved()
	// Pass 1: the span of the slice.
	last, _, err := traceSpan(&spec, sc.Seed)
	if err != nil {
		return nil, err
	}
	rc, err := spec.Opener()
	if err != nil {
		return nil, fmt.Errorf("trace replay: opening %s: %w", spec.File, err)
	}
	sl, _ := trace.NewSlicer(spec.sliceOptions(sc.Seed), spec.BlockSize)
	l := &TraceLoop{
		spec: spec, sc: sc, variant: variant, start: start,
		keys:    (spec.Mode == TraceSession || spec.Keys) && sc.SessionHeader != SessionHeaderNone,
		rd:      trace.NewReader(rc, spec.File, spec.BlockSize),
		closer:  rc,
		slicer:  sl,
		ended:   map[int]endInfo{},
		waiting: map[int][]TurnRequest{},
		kept:    map[int]bool{},
		convLen: map[int]int{},
		open:    map[int]openTurn{},
		due:     map[int]time.Duration{},
		ceiling: trace.NewHitCounter(math.MaxInt, spec.BlockSize),
		late:    hdrhistogram.New(1, 24*3600*1000_000, 3),
		rep:     TraceReplay{Variant: variant, Mode: spec.Mode, TurnsPerConversation: map[int]int{}, SharedLRUTokens: fleetKVTokens},
	}
	if fleetKVTokens > 0 {
		l.shared = trace.NewHitCounter(int(min(fleetKVTokens, math.MaxInt32*int64(spec.BlockSize))), spec.BlockSize)
	}
	// Windows cover the span, plus one to drain (session mode shifts turns later).
	n := int(last/spec.Window) + 2
	l.win = make([]windowHits, n)
	for i := range n {
		l.windows = append(l.windows, StageWindow{
			Start: start + time.Duration(i)*spec.Window,
			End:   start + time.Duration(i+1)*spec.Window,
		})
	}
	return l, nil
}

func traceSpan(spec *TraceSpec, seed uint64) (last time.Duration, kept int, err error) {
	rc, err := spec.Opener()
	if err != nil {
		return 0, 0, fmt.Errorf("trace replay: opening %s: %w", spec.File, err)
	}
	defer rc.Close()
	sl, err := trace.NewSlicer(spec.sliceOptions(seed), spec.BlockSize)
	if err != nil {
		return 0, 0, fmt.Errorf("trace replay: %w", err)
	}
	err = trace.Each(trace.NewReader(rc, spec.File, spec.BlockSize), func(r trace.Request) error {
		if _, ok := sl.Keep(&r); ok {
			kept++
			last = r.Timestamp
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("trace replay: %w", err)
	}
	if kept == 0 {
		return 0, 0, fmt.Errorf("trace replay %s: the slice (from %v to %v, sample %g) keeps no request", spec.File, spec.From, spec.To, spec.Sample)
	}
	return last, kept, nil
}

// resolved returns the spec with defaults and an Opener (os.Open of Path, or
// of File when Path is unset).
func (t *TraceSpec) resolved() TraceSpec {
	spec := t.WithDefaults()
	if spec.Opener == nil {
		path := spec.Path
		if path == "" {
			path = spec.File
		}
		spec.Opener = func() (io.ReadCloser, error) { return os.Open(path) }
	}
	return spec
}

// Name returns the variant name.
func (l *TraceLoop) Name() string { return l.variant }

// Err returns the first error reading the trace (nil at its end).
func (l *TraceLoop) Err() error { return l.err }

// next returns the next kept request, or false at the end or on error.
func (l *TraceLoop) next() (*TraceTurn, trace.Turn, bool) {
	if l.peek != nil {
		p, t := l.peek, l.peekT
		l.peek = nil
		return p, t, true
	}
	for !l.eof {
		r, err := l.rd.Next()
		if err == io.EOF {
			l.eof = true
			break
		}
		if err != nil {
			l.err, l.eof = fmt.Errorf("trace replay: %w", err), true
			break
		}
		if t, ok := l.slicer.Keep(&r); ok {
			return &TraceTurn{Index: t.Index, Request: r}, t, true
		}
	}
	return nil, trace.Turn{}, false
}

// sessionKey is a UUID derived from (seed, variant, conversation), or the
// trace's own session id.
func (l *TraceLoop) sessionKey(conv int, recorded string) string {
	if !l.keys {
		return ""
	}
	if recorded != "" {
		return recorded
	}
	var b [16]byte
	h := mix(l.sc.Seed, hashString(l.variant)^uint64(conv)*0x9e3779b97f4a7c15)
	g := mix(h, uint64(conv))
	for i := range 8 {
		b[i], b[8+i] = byte(h>>(8*i)), byte(g>>(8*i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// StartStage returns the requests recorded in window i (intended at their
// recorded time; in session mode, later turns whose earlier turn already
// ended are intended at its end plus the gap, the others wait for it).
func (l *TraceLoop) StartStage(i int, now time.Duration) []TurnRequest {
	if l.stopped || i < 0 || i >= len(l.windows) {
		return nil
	}
	end := l.windows[i].End - l.start
	var out []TurnRequest
	for {
		tt, t, ok := l.next()
		if !ok {
			break
		}
		if tt.Request.Timestamp >= end && i < len(l.windows)-1 {
			l.peek, l.peekT = tt, t
			break
		}
		l.rep.Requests++
		l.rep.InputTokens += int64(tt.Request.InputLength)
		l.rep.OutputTokens += int64(tt.Request.OutputLength)
		l.win[i].prompt += int64(tt.Request.InputLength)
		l.win[i].ceiling += int64(l.ceiling.Add(&tt.Request))
		if l.shared != nil {
			l.win[i].shared += int64(l.shared.Add(&tt.Request))
		}
		l.win[i].requests++
		first := t.Parent < 0 || !l.kept[t.Parent]
		l.kept[t.Index] = true
		l.convLen[t.Conversation]++
		tr := TurnRequest{
			Session:             &Session{ID: int64(t.Conversation), Key: l.sessionKey(t.Conversation, tt.Request.SessionID), Turns: math.MaxInt32},
			Turn:                t.Number,
			Intended:            l.start + tt.Request.Timestamp,
			Variant:             l.variant,
			NominalPromptTokens: tt.Request.InputLength,
			Trace:               tt,
		}
		if first {
			l.rep.Conversations++
			if t.Parent >= 0 {
				l.rep.ContinuedFirst++
			}
			l.windows[i].Sessions++
		} else if l.spec.Mode == TraceSession {
			e, done := l.ended[t.Parent]
			switch {
			case done && !e.ok:
				l.rep.NotSent++
				l.ended[t.Index] = endInfo{} // its own later turns are not sent either
				continue
			case done:
				tr.Intended = max(now, e.at+tt.Request.Timestamp-e.ts)
			default:
				l.waiting[t.Parent] = append(l.waiting[t.Parent], tr)
				continue
			}
		}
		out = append(out, tr)
		l.due[t.Index] = tr.Intended
	}
	return out
}

// Sent records that a request was written at now.
func (l *TraceLoop) Sent(tr TurnRequest, now time.Duration) {
	if l.stopped || tr.Trace == nil {
		return
	}
	k := tr.Trace.Index
	if _, ok := l.open[k]; ok {
		return
	}
	if _, ok := l.due[k]; !ok {
		return
	}
	delete(l.due, k)
	l.open[k] = openTurn{window: l.WindowIndex(now), sent: now}
	l.late.RecordValue(max(0, int64((now-tr.Intended)/time.Microsecond)))
	l.rep.Sent++
}

// Finish records a request's end at now and returns the later turns that
// waited for it (session mode).
func (l *TraceLoop) Finish(r *Result, now time.Duration) []TurnRequest {
	if l.stopped || r.Side || r.Trace == nil {
		return nil
	}
	k := r.Trace.Index
	o, ok := l.open[k]
	if !ok {
		if _, due := l.due[k]; !due {
			return nil
		}
		o = openTurn{window: l.WindowIndex(r.Sent), sent: r.Sent}
		delete(l.due, k)
		l.rep.Sent++
	}
	delete(l.open, k)
	ws, wd := o.window, max(l.WindowIndex(now), o.window)
	l.windows[ws].Started++
	for i := ws; i < wd; i++ {
		l.windows[i].InFlight++
		l.windows[i+1].CarriedIn++
	}
	if r.OK() {
		l.windows[wd].Completed++
	} else {
		l.windows[wd].Failed++
	}
	ts := r.Trace.Timestamp
	l.ended[k] = endInfo{at: now, ok: r.OK(), ts: ts}
	kids := l.waiting[k]
	delete(l.waiting, k)
	var out []TurnRequest
	for _, tr := range kids {
		if !r.OK() {
			l.rep.NotSent++
			l.ended[tr.Trace.Index] = endInfo{}
			continue
		}
		tr.Intended = now + tr.Trace.Request.Timestamp - ts
		l.due[tr.Trace.Index] = tr.Intended
		out = append(out, tr)
	}
	return out
}

// Stop closes the variant at now: requests in flight count InFlight, requests
// handed out and not sent, waiting, or not yet read count NotSent.
func (l *TraceLoop) Stop(now time.Duration) {
	if l.stopped {
		return
	}
	last := l.WindowIndex(now)
	for _, o := range l.open {
		countOpenAtStop(l.windows, o.window, last)
	}
	l.rep.NotSent += len(l.due)
	for _, kids := range l.waiting {
		l.rep.NotSent += len(kids)
	}
	for {
		if _, _, ok := l.next(); !ok {
			break
		}
		l.rep.Requests++
		l.rep.NotSent++
	}
	l.closer.Close()
	l.due, l.waiting = map[int]time.Duration{}, map[int][]TurnRequest{}
	for _, n := range l.convLen {
		l.rep.TurnsPerConversation[n]++
	}
	for _, w := range l.win[:l.WindowIndex(now)+1] {
		tw := TraceWindow{Requests: w.requests}
		if w.prompt > 0 {
			tw.CeilingPct = 100 * float64(w.ceiling) / float64(w.prompt)
			tw.SharedLRUPct = 100 * float64(w.shared) / float64(w.prompt)
		}
		l.rep.Windows = append(l.rep.Windows, tw)
	}
	l.rep.CeilingPct = l.ceiling.HitPct()
	if l.shared != nil && l.shared.Requests > 0 {
		l.rep.SharedLRUPct = l.shared.HitPct()
	}
	l.rep.LatenessP50S = float64(l.late.ValueAtQuantile(50)) / 1e6
	l.rep.LatenessP99S = float64(l.late.ValueAtQuantile(99)) / 1e6
	l.rep.LatenessMaxS = float64(l.late.Max()) / 1e6
	l.stopped, l.stopAt = true, now
}

// Replay returns the replay's record (complete after Stop).
func (l *TraceLoop) Replay() TraceReplay { return l.rep }

// WindowIndex returns the window containing t, clamped to the first and last.
func (l *TraceLoop) WindowIndex(t time.Duration) int {
	if t < l.start {
		return 0
	}
	return min(int((t-l.start)/l.spec.Window), len(l.windows)-1)
}

// Windows returns the windows with the accounting so far (see Loop.Windows).
func (l *TraceLoop) Windows() []StageWindow {
	ws := slices.Clone(l.windows)
	if !l.stopped {
		return ws
	}
	last := l.WindowIndex(l.stopAt)
	ws = ws[:last+1]
	for i := range ws {
		ws[i].Complete = ws[i].End <= l.stopAt
		ws[i].End = min(ws[i].End, l.stopAt)
	}
	return ws
}

// Variant returns the variant record for the manifest.
func (l *TraceLoop) Variant() Variant {
	return variantRecord(l.variant, l.Windows(), l.stopped, len(l.windows))
}

// CheckTrace reads sc.Trace's file once (no-op without a trace) and returns
// the requests the slice keeps; an error names the file and line, so a
// harness can refuse a bad trace before it writes anything.
func CheckTrace(sc *Scenario) (int, error) {
	if sc.Trace == nil {
		return 0, nil
	}
	spec := sc.Trace.resolved()
	_, kept, err := traceSpan(&spec, sc.WithDefaults().Seed)
	return kept, err
}

// Active returns the conversations with a request in flight or due (the
// progress line's "sessions").
func (l *TraceLoop) Active() int { return len(l.open) + len(l.due) }

// InFlightAt returns the requests sent and not finished, or due at or before
// now (see Loop.InFlightAt).
func (l *TraceLoop) InFlightAt(now time.Duration) int {
	due, _ := countDue(l.due, now)
	return len(l.open) + due
}

// Waiting returns the requests handed out and due after now, plus the later
// turns waiting for an earlier turn to end.
func (l *TraceLoop) Waiting(now time.Duration) int {
	_, n := countDue(l.due, now)
	for _, kids := range l.waiting {
		n += len(kids)
	}
	return n
}

// TraceCalibration is how a trace replay's prompt text was fitted to the
// server's tokenizer, as recorded in the manifest: the tokens per synthesized
// word and the chat template's own tokens, measured through Endpoint, and the
// prompt-token error of Samples requests of the slice against their
// input_length (|tokens - input_length| / input_length). Endpoint "none" means
// the server has no tokenize endpoint: the default ratio (1 token per word)
// was used and the error is unknown (NaN is not written: ErrP50Pct and
// ErrMaxPct are then -1).
type TraceCalibration struct {
	Endpoint       string  `json:"endpoint"`
	TokensPerWord  float64 `json:"tokens_per_word"`
	OverheadTokens int     `json:"overhead_tokens"`
	Samples        int     `json:"samples"`
	ErrP50Pct      float64 `json:"prompt_token_error_p50_pct"`
	ErrMaxPct      float64 `json:"prompt_token_error_max_pct"`
	Note           string  `json:"note,omitempty"`
}

// TraceSample returns up to n requests of sc.Trace's slice, spread evenly over
// the first 10n kept (for calibration).
func TraceSample(sc *Scenario, n int) ([]TraceTurn, error) {
	if sc.Trace == nil || n <= 0 {
		return nil, nil
	}
	spec := sc.Trace.resolved()
	rc, err := spec.Opener()
	if err != nil {
		return nil, fmt.Errorf("trace replay: opening %s: %w", spec.File, err)
	}
	defer rc.Close()
	sl, err := trace.NewSlicer(spec.sliceOptions(sc.WithDefaults().Seed), spec.BlockSize)
	if err != nil {
		return nil, err
	}
	var out []TraceTurn
	kept := 0
	errStop := errors.New("enough")
	err = trace.Each(trace.NewReader(rc, spec.File, spec.BlockSize), func(r trace.Request) error {
		t, ok := sl.Keep(&r)
		if !ok {
			return nil
		}
		if kept%10 == 0 {
			out = append(out, TraceTurn{Index: t.Index, Request: r})
		}
		kept++
		if len(out) >= n {
			return errStop
		}
		return nil
	})
	if err != nil && err != errStop {
		return nil, fmt.Errorf("trace replay: %w", err)
	}
	return out, nil
}
