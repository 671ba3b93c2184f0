package loadgen

import (
	"bytes"
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

	"github.com/lmwarden/warden/loadgen/agent"
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
	File      string                        `yaml:"file" json:"file"`             // required; relative to the scenario file; a directory for claude-code
	Format    string                        `yaml:"format" json:"format"`         // "mooncake" or "claude-code"; default detected from File
	Mode      string                        `yaml:"mode" json:"mode"`             // mooncake: "timestamp" (default) or "session"
	BlockSize int                           `yaml:"block_size" json:"block_size"` // tokens per hash id; default 512 (mooncake), 64 (claude-code)
	Speedup   float64                       `yaml:"speedup" json:"speedup"`       // divide recorded times (claude-code: gaps) by it; default 1
	From      time.Duration                 `yaml:"from" json:"from"`             // mooncake: recorded window start; default 0
	To        time.Duration                 `yaml:"to" json:"to"`                 // mooncake: recorded window end, exclusive; default the end
	Sample    float64                       `yaml:"sample" json:"sample"`         // fraction of conversations (claude-code: session files) kept; default 1
	Window    time.Duration                 `yaml:"window" json:"window"`         // report window; default 5m
	Keys      bool                          `yaml:"keys" json:"keys,omitempty"`   // timestamp mode: send session keys (session mode always does, unless session_header is none)
	Salt      uint64                        `yaml:"salt" json:"salt,omitempty"`   // varies the synthesized text
	Path      string                        `yaml:"-" json:"-"`                   // File resolved (set by the caller)
	Opener    func() (io.ReadCloser, error) `yaml:"-" json:"-"`                   // opens the trace; default os.Open(Path) by the caller

	// Agent-session replay (format claude-code; AgentLoop).
	MaxGap     time.Duration `yaml:"max_gap" json:"max_gap,omitzero"`          // cap on every replayed gap; 0 = none
	TokenScale float64       `yaml:"token_scale" json:"token_scale,omitzero"`  // scales prompts and outputs; block_size x it must be whole; default 1
	Live       int           `yaml:"live" json:"live,omitzero"`                // live session trees (closed loop); default 8
	Recycle    bool          `yaml:"recycle" json:"recycle,omitempty"`         // start sessions over (a new cache-bust per play) until duration
	Duration   time.Duration `yaml:"duration" json:"duration,omitzero"`        // length of the replay; default 24h as a cap when playing each once
	OverLength string        `yaml:"over_length" json:"over_length,omitempty"` // "skip" (default) or "send" calls over max_model_len
}

// Trace formats (TraceSpec.Format).
const (
	FormatMooncake   = "mooncake"
	FormatClaudeCode = agent.FormatClaudeCode
)

// DetectFormat names the format of the trace at path: a directory or a file
// that is one JSON object holds Claude Code sessions, anything else is read as
// Mooncake JSON Lines.
func DetectFormat(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	if st.IsDir() {
		return FormatClaudeCode, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	var head [4096]byte
	n, _ := io.ReadFull(f, head[:])
	b := bytes.TrimSpace(head[:n])
	if strings.HasSuffix(path, ".json") && len(b) > 0 && b[0] == '{' && !bytes.Contains(b, []byte("\n{")) &&
		(bytes.Contains(b, []byte(`"requests"`)) || bytes.Contains(b, []byte(`"block_size"`))) {
		return FormatClaudeCode, nil
	}
	return FormatMooncake, nil
}

// Agent reports whether the spec replays agent sessions (format claude-code;
// a spec without a format is one when it sets an agent-only field).
func (t *TraceSpec) Agent() bool {
	return t.Format == FormatClaudeCode || (t.Format == "" && t.agentFields())
}

// SynthBlockSize is the tokens per hash id of the synthesized prompts: the
// block size times TokenScale for agent sessions.
func (t TraceSpec) SynthBlockSize() int {
	t = t.WithDefaults()
	if !t.Agent() {
		return t.BlockSize
	}
	return int(math.Round(float64(t.BlockSize) * t.TokenScale))
}

// Validate reports every bad field.
func (t *TraceSpec) Validate() error {
	var errs []error
	if t.File == "" && t.Opener == nil {
		errs = append(errs, errors.New("trace.file: required"))
	}
	if t.Format != "" && t.Format != FormatMooncake && t.Format != FormatClaudeCode {
		errs = append(errs, fmt.Errorf("trace.format %q: want %q or %q", t.Format, FormatMooncake, FormatClaudeCode))
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
	if d := t.WithDefaults(); d.Agent() {
		errs = append(errs, t.validateAgent()...)
	} else if t.agentFields() {
		errs = append(errs, errors.New("trace: max_gap, token_scale, live, recycle, duration and over_length apply to format claude-code only"))
	}
	return errors.Join(errs...)
}

// agentFields reports whether a field of format claude-code only is set.
func (t *TraceSpec) agentFields() bool {
	return t.MaxGap != 0 || t.TokenScale != 0 || t.Live != 0 || t.Recycle || t.Duration != 0 || t.OverLength != ""
}

func (t *TraceSpec) validateAgent() []error {
	var errs []error
	if t.Mode != "" || t.From != 0 || t.To != 0 || t.Keys {
		errs = append(errs, errors.New("trace: mode, from, to and keys apply to format mooncake only (claude-code sessions always carry their session id)"))
	}
	if t.MaxGap < 0 || t.Duration < 0 {
		errs = append(errs, fmt.Errorf("trace.max_gap %v and trace.duration %v must not be negative", t.MaxGap, t.Duration))
	}
	if t.Live < 0 {
		errs = append(errs, fmt.Errorf("trace.live %d: want a positive number of session trees", t.Live))
	}
	if t.Recycle && t.Duration == 0 {
		errs = append(errs, errors.New("trace.recycle: needs trace.duration (how long to go on)"))
	}
	if t.OverLength != "" && t.OverLength != OverLengthSkip && t.OverLength != OverLengthSend {
		errs = append(errs, fmt.Errorf("trace.over_length %q: want %q or %q", t.OverLength, OverLengthSkip, OverLengthSend))
	}
	d := t.WithDefaults()
	if f := float64(d.BlockSize) * d.TokenScale; t.TokenScale < 0 || f < 1 || math.Abs(f-math.Round(f)) > 1e-9 {
		errs = append(errs, fmt.Errorf("trace.token_scale %g: block_size %d x token_scale must be a whole number of tokens, at least 1 (e.g. 0.25 -> 16)", d.TokenScale, d.BlockSize))
	}
	return errs
}

// WithDefaults returns a copy with defaults applied.
func (t TraceSpec) WithDefaults() TraceSpec {
	if t.Format == "" {
		t.Format = FormatMooncake
		if t.agentFields() {
			t.Format = FormatClaudeCode
		}
	}
	if t.Mode == "" && !t.Agent() {
		t.Mode = TraceTimestamp
	}
	if t.BlockSize == 0 {
		t.BlockSize = trace.DefaultBlockSize
		if t.Agent() {
			t.BlockSize = agent.DefaultBlockSize
		}
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
	if t.Agent() {
		if t.TokenScale == 0 {
			t.TokenScale = 1
		}
		if t.Live == 0 {
			t.Live = DefaultAgentLive
		}
		if t.Duration == 0 {
			t.Duration = DefaultAgentCap
		}
		if t.OverLength == "" {
			t.OverLength = OverLengthSkip
		}
	}
	return t
}

func (t *TraceSpec) sliceOptions(seed uint64) trace.SliceOptions {
	return trace.SliceOptions{From: t.From, To: t.To, Speedup: t.Speedup, Sample: t.Sample, Seed: seed}
}

// TraceTurn is the trace request a TurnRequest replays.
type TraceTurn struct {
	Index   int // position in the whole trace (0-based); an agent replay's call count
	Request trace.Request
	// Agent: the call's place in its session tree (agent replays only).
	Agent *AgentCall
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
	return uuidFrom(mix(l.sc.Seed, hashString(l.variant)^uint64(conv)*0x9e3779b97f4a7c15), uint64(conv))
}

// uuidFrom formats a version-4 UUID from h and mix(h, x).
func uuidFrom(h, x uint64) string {
	var b [16]byte
	g := mix(h, x)
	for i := range 8 {
		b[i], b[8+i] = byte(h>>(8*i)), byte(g>>(8*i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x16 := hex.EncodeToString(b[:])
	return x16[0:8] + "-" + x16[8:12] + "-" + x16[12:16] + "-" + x16[16:20] + "-" + x16[20:32]
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
	bookFinish(l.windows, o.window, max(l.WindowIndex(now), o.window), r.OK())
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
// the requests the slice keeps (agent sessions: the session files kept); an error names the file and line, so a
// harness can refuse a bad trace before it writes anything.
func CheckTrace(sc *Scenario) (int, error) {
	if sc.Trace == nil {
		return 0, nil
	}
	spec := sc.Trace.resolved()
	if spec.Agent() {
		files, err := agentFiles(&spec, sc.WithDefaults().Seed)
		return len(files), err
	}
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
	if sc.Shape == ShapeAgent && n > 0 {
		spec := shapeSpec(sc.WithDefaults())
		return agentSample(sc, &spec, n)
	}
	if sc.Trace == nil || n <= 0 {
		return nil, nil
	}
	spec := sc.Trace.resolved()
	if spec.Agent() {
		return agentSample(sc, &spec, n)
	}
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
