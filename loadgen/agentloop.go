package loadgen

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/loadgen/agent"
	"github.com/lmwarden/warden/loadgen/trace"
)

// Agent-trace defaults (TraceSpec with format claude-code).
const (
	// DefaultAgentLive is the live session trees of an agent replay: the
	// reference measurement's 8-session stage.
	DefaultAgentLive = 8
	// DefaultAgentCap bounds a replay that plays every session once.
	DefaultAgentCap = 24 * time.Hour
)

// Over-length policies (TraceSpec.OverLength): what an agent replay does with
// a call whose scaled prompt plus output exceeds the fleet's max_model_len.
const (
	// OverLengthSkip does not send it; its recorded server time stands in for
	// it, and the session goes on.
	OverLengthSkip = "skip"
	// OverLengthSend sends it anyway (the server refuses it: a failed call).
	OverLengthSend = "send"
)

// AgentCall is a replayed call's place in its session tree (TraceTurn.Agent).
type AgentCall struct {
	Tree  int    `json:"tree"`            // play number within the variant, from 0
	File  string `json:"file"`            // the session's id (the file's "id", else its name)
	Agent string `json:"agent,omitempty"` // agent_id; "" for the parent
	Type  string `json:"type,omitempty"`  // subagent_type; "" for the parent
	Call  int    `json:"call"`            // position among its agent's calls, from 0
	Round int    `json:"round,omitempty"` // earlier plays of this file in the variant
}

// AgentReplay is what an agent replay records in the manifest (per variant).
type AgentReplay struct {
	Variant string `json:"variant"`
	Format  string `json:"format"`
	Files   int    `json:"files"` // sessions kept by the sample
	// Basis: files per timestamp basis (agent.Basis*).
	Basis      map[string]int `json:"basis"`
	TokenScale float64        `json:"token_scale"`
	// BlockSize: tokens per hash id after scaling (the synthesized block).
	BlockSize   int           `json:"block_size"`
	MaxGap      time.Duration `json:"max_gap_ns"`
	Speedup     float64       `json:"speedup"`
	Live        int           `json:"live"`
	Recycle     bool          `json:"recycle"`
	MaxModelLen int           `json:"max_model_len"`
	OverLength  string        `json:"over_length"`
	// Plays started and ended (every call done, skipped or not sent), and
	// sessions never started (the cap came first; playing each once only).
	Plays           int `json:"plays"`
	PlaysEnded      int `json:"plays_ended"`
	PlaysNotStarted int `json:"plays_not_started"`
	// Calls of the plays started: Sent, SkippedOverLength (not sent, over
	// max_model_len), NotSent (after a failure, or after the run's end).
	Calls             int `json:"calls"`
	Sent              int `json:"sent"`
	SkippedOverLength int `json:"skipped_over_length"`
	NotSent           int `json:"not_sent"`
	// SubagentsStarted: subagents of the plays whose first call was sent.
	SubagentsStarted int   `json:"subagents_started"`
	InputTokens      int64 `json:"input_tokens"`  // scaled, of the calls sent
	OutputTokens     int64 `json:"output_tokens"` // scaled, of the calls sent
	// CappedGaps: waits shortened by MaxGap; NegativeGaps: recorded gaps below
	// 0, replayed as 0; UnknownGaps: waits on a call without api_time.
	CappedGaps   int     `json:"capped_gaps"`
	NegativeGaps int     `json:"negative_gaps"`
	UnknownGaps  int     `json:"unknown_gaps"`
	LatenessP50S float64 `json:"lateness_p50_s"`
	LatenessP99S float64 `json:"lateness_p99_s"`
}

// AgentLoop is the dispatcher of one variant of an agent-session replay: a
// closed loop over session trees, each tree's calls sent as their waits end
// (agent.Step). Its trees come from a source: the session files of a trace
// (Live at a time over report windows of its own; a file is read when its
// play starts) or the generator of a scenario's shape agent (agent.Generate;
// the stages' levels, as Loop keeps sessions: a stage raises the level, running
// trees carry over, a tree that ends is replaced while fewer than the level
// run, after FailureBackoff when its parent call failed). It forgets a tree
// when its play ends, so it holds only the live trees. Pure: callers pass
// every instant.
type AgentLoop struct {
	spec    TraceSpec
	sc      *Scenario
	variant string
	start   time.Duration
	windows []StageWindow
	keys    bool
	src     treeSource
	// levels: live trees per window; target: the level of the last window
	// started. shape: synthesized sessions (Scenario.Shape agent), whose
	// windows are the stages and keep their level as Sessions.
	levels []int
	target int
	shape  bool

	plays   map[int]*treePlay
	byCall  map[int]stepRef
	nplay   int
	session int64
	index   int
	open    map[int]openTurn
	due     map[int]time.Duration
	late    *hdrhistogram.Histogram
	rep     AgentReplay
	err     error
	stopped bool
	ended   bool // every session played when it stopped
	stopAt  time.Duration
	bs      int
}

type stepRef struct {
	treePlay *treePlay
	step     int
}

// Step states of a play.
const (
	stepPending uint8 = iota
	stepDue
	stepDone
	stepDropped
)

type treePlay struct {
	n, round int
	tree     *agent.Tree
	key      string
	salt     uint64
	kids     [][]int
	waits    []int
	ready    []time.Duration
	state    []uint8
	index    []int // step -> call index (TraceTurn.Index), -1 before dispatch
	sessions []*Session
	left     int  // steps not done or dropped
	rootDead bool // a parent call failed: the rest is not sent
}

// NewAgentLoop returns the dispatcher of variant starting at start: of
// sc.Trace (format claude-code), or of the synthesized sessions of a scenario
// of shape agent; maxModelLen (0: unknown) decides the over-length calls.
// Every trace file is read once to check it; errors name the file and the
// call.
func NewAgentLoop(sc *Scenario, variant string, start time.Duration, maxModelLen int) (*AgentLoop, error) {
	sc = sc.WithDefaults()
	if sc.Shape == ShapeAgent {
		return newShapeLoop(sc, variant, start, maxModelLen), nil
	}
	if sc.Trace == nil {
		return nil, errors.New("agent replay: scenario has no trace")
	}
	spec := sc.Trace.resolved()
	files, err := agentFiles(&spec, sc.Seed)
	if err != nil {
		return nil, err
	}
	l := newAgentLoop(sc, spec, variant, start, &fileSource{files: files, rounds: map[int]int{}, recycle: spec.Recycle})
	l.rep = AgentReplay{Variant: variant, Format: spec.Format, Files: len(files), Basis: map[string]int{},
		TokenScale: spec.TokenScale, BlockSize: l.bs, MaxGap: spec.MaxGap, Speedup: spec.Speedup,
		Live: spec.Live, Recycle: spec.Recycle, MaxModelLen: maxModelLen, OverLength: spec.OverLength}
	span := spec.Duration
	n := max(1, int((span+spec.Window-1)/spec.Window))
	for i := range n {
		l.windows = append(l.windows, StageWindow{
			Start: start + time.Duration(i)*spec.Window,
			End:   start + min(time.Duration(i+1)*spec.Window, span),
		})
		l.levels = append(l.levels, spec.Live)
	}
	return l, nil
}

// newAgentLoop returns a loop over src without windows.
func newAgentLoop(sc *Scenario, spec TraceSpec, variant string, start time.Duration, src treeSource) *AgentLoop {
	return &AgentLoop{
		spec: spec, sc: sc, variant: variant, start: start, src: src,
		keys:  sc.SessionHeader != SessionHeaderNone,
		plays: map[int]*treePlay{}, byCall: map[int]stepRef{},
		open: map[int]openTurn{}, due: map[int]time.Duration{},
		late: hdrhistogram.New(1, 24*3600*1000_000, 3),
		bs:   spec.SynthBlockSize(),
	}
}

// treeSource yields the session trees of a replay in play order.
type treeSource interface {
	// next returns the next tree and its round (its earlier plays in the
	// variant); false when none is left or on an error.
	next() (t *agent.Tree, round int, ok bool, err error)
	// exhausted reports whether no tree is left to start.
	exhausted() bool
	// notStarted returns the sessions never started (a source that plays
	// each once; else 0).
	notStarted() int
}

// fileSource plays session files in order, once or over and over.
type fileSource struct {
	files   []string // play order
	i       int      // next file to play
	rounds  map[int]int
	recycle bool
}

func (s *fileSource) next() (*agent.Tree, int, bool, error) {
	if s.i >= len(s.files) {
		if !s.recycle {
			return nil, 0, false, nil
		}
		s.i = 0
	}
	fi := s.i
	s.i++
	t, err := readTree(s.files[fi])
	if err != nil {
		return nil, 0, false, err
	}
	round := s.rounds[fi]
	s.rounds[fi]++
	return t, round, true, nil
}

func (s *fileSource) exhausted() bool { return !s.recycle && s.i >= len(s.files) }

func (s *fileSource) notStarted() int {
	if s.recycle {
		return 0
	}
	return len(s.files) - s.i
}

// agentFiles lists the session files of spec (a file, or every *.json of a
// directory, by name), keeps the sample and orders them by a seeded shuffle,
// reading each once to check it.
func agentFiles(spec *TraceSpec, seed uint64) ([]string, error) {
	path := spec.Path
	if path == "" {
		path = spec.File
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("agent replay: %w", err)
	}
	var files []string
	if st.IsDir() {
		ms, _ := filepath.Glob(filepath.Join(path, "*.json"))
		files = ms
		if len(files) == 0 {
			return nil, fmt.Errorf("agent replay: %s holds no *.json session file", path)
		}
	} else {
		files = []string{path}
	}
	sort.Strings(files)
	var kept []string
	for _, f := range files {
		if spec.Sample < 1 && float64(mix(seed, hashString(filepath.Base(f)))>>11)/(1<<53) >= spec.Sample {
			continue
		}
		if _, err := readTree(f); err != nil {
			return nil, err
		}
		kept = append(kept, f)
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("agent replay: sample %g of %d sessions in %s keeps none", spec.Sample, len(files), path)
	}
	order := make([]uint64, len(kept))
	for i, f := range kept {
		order[i] = mix(seed^0xa5a5, hashString(filepath.Base(f)))
	}
	idx := make([]int, len(kept))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return order[idx[a]] < order[idx[b]] })
	out := make([]string, len(kept))
	for i, k := range idx {
		out[i] = kept[k]
	}
	return out, nil
}

func readTree(path string) (*agent.Tree, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent replay: %w", err)
	}
	defer f.Close()
	t, err := agent.Read(f, filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("agent replay: %w", err)
	}
	return t, nil
}

// Name returns the variant name.
func (l *AgentLoop) Name() string { return l.variant }

// Err returns the first error reading a session file.
func (l *AgentLoop) Err() error { return l.err }

// Done reports whether every session was played and ended (never when
// recycling): the variant can end now.
func (l *AgentLoop) Done() bool {
	return l.src.exhausted() && len(l.plays) == 0
}

// StartStage raises the level to window i's live trees at now (a trace
// replay's level is the same in every window) and starts the trees that reach
// it. Running trees carry over.
func (l *AgentLoop) StartStage(i int, now time.Duration) []TurnRequest {
	if l.stopped || i < 0 || i >= len(l.windows) {
		return nil
	}
	l.target = l.levels[i]
	return l.fill(now, 0, nil)
}

// fill starts trees at now (their first calls delay later) while fewer than
// the level run.
func (l *AgentLoop) fill(now, delay time.Duration, out []TurnRequest) []TurnRequest {
	for len(l.plays) < l.target {
		trs, ok := l.startPlay(now, delay)
		if !ok {
			break
		}
		out = append(out, trs...)
	}
	return out
}

// startPlay starts the next session at now, its first calls delay later;
// false when none is left.
func (l *AgentLoop) startPlay(now, delay time.Duration) ([]TurnRequest, bool) {
	if l.err != nil || now >= l.start+l.spec.Duration {
		return nil, false
	}
	t, round, ok, err := l.src.next()
	if err != nil {
		l.err = err
	}
	if !ok {
		return nil, false
	}
	if len(t.Steps) == 0 { // nothing of it would ever end: say so, not hang
		l.err = fmt.Errorf("%s: session tree has no calls", t.Name)
		return nil, false
	}
	id := t.ID
	if id == "" {
		id = t.Name
	}
	p := &treePlay{n: l.nplay, round: round, tree: t, salt: playSalt(&l.spec, id, round),
		kids: make([][]int, len(t.Steps)), waits: make([]int, len(t.Steps)), ready: make([]time.Duration, len(t.Steps)),
		state: make([]uint8, len(t.Steps)), index: make([]int, len(t.Steps)), left: len(t.Steps)}
	l.nplay++
	p.key = l.treeKey(p.n)
	for _, a := range t.Agents {
		l.session++
		p.sessions = append(p.sessions, &Session{ID: l.session - 1, Key: p.key, Agent: a.ID, Turns: a.Calls})
	}
	for i, st := range t.Steps {
		p.index[i] = -1
		p.waits[i] = len(st.Deps)
		for _, d := range st.Deps {
			p.kids[d.Step] = append(p.kids[d.Step], i)
		}
	}
	l.plays[p.n] = p
	l.rep.Plays++
	l.rep.Basis[t.Basis]++
	s := t.Stats()
	l.rep.Calls += s.Calls
	l.rep.NegativeGaps += s.NegativeGaps
	l.rep.UnknownGaps += s.UnknownGaps
	if !l.shape {
		// A trace replay's window counts the plays started in it; a
		// stage keeps its level.
		l.windows[l.WindowIndex(now)].Sessions++
	}
	var out []TurnRequest
	for i, st := range t.Steps {
		if len(st.Deps) == 0 {
			out = l.ready(p, i, now+delay+l.gap(st.Offset), now, out)
		}
	}
	return out, true
}

// treeKey is a UUID derived from (seed, variant, play).
func (l *AgentLoop) treeKey(n int) string {
	if !l.keys {
		return ""
	}
	return uuidFrom(mix(l.sc.Seed, hashString(l.variant)^uint64(n)*0x9e3779b97f4a7c15), uint64(n))
}

// gap scales a recorded gap: divided by Speedup, at most MaxGap.
func (l *AgentLoop) gap(g time.Duration) time.Duration {
	g = time.Duration(float64(g) / l.spec.Speedup)
	if l.spec.MaxGap > 0 && g > l.spec.MaxGap {
		l.rep.CappedGaps++
		return l.spec.MaxGap
	}
	return g
}

// scaled returns a call's prompt and output after TokenScale: whole blocks
// stay whole (len(hash_ids) blocks of the scaled block size bs), the partial
// tail and the output are scaled and rounded (output at least 1).
func scaled(spec *TraceSpec, bs int, c *agent.Call) (in, out int) {
	f := spec.TokenScale
	tail := c.In - len(c.HashIDs)*spec.BlockSize
	in = len(c.HashIDs)*bs + int(math.Round(float64(tail)*f))
	return max(1, in), max(1, int(math.Round(float64(c.Out)*f)))
}

// request is the trace request call c replays: scaled, its block ids salted
// by the play (a cache-bust per play) but for the global ones (Tree.Global:
// a synthesized head, the same text in every session), sent as they are.
// Salted ids are never negative, global ones always are (agent.GlobalIDs).
func request(spec *TraceSpec, bs int, salt uint64, global agent.IDRange, c *agent.Call) trace.Request {
	in, o := scaled(spec, bs, c)
	ids := make([]int64, len(c.HashIDs))
	for j, id := range c.HashIDs {
		if global.Contains(id) {
			ids[j] = id
			continue
		}
		ids[j] = int64(mix(salt, uint64(id)) >> 1)
	}
	return trace.Request{Timestamp: c.T, InputLength: in, OutputLength: o, HashIDs: ids}
}

// playSalt is the salt of round round of the session id: ids are local to a
// file (hash_id_scope "local"), and each play reads as new text.
func playSalt(spec *TraceSpec, id string, round int) uint64 {
	return mix(spec.Salt^hashString(id), uint64(round))
}

// ready dispatches step i of p, its waits over, intended at at (not before
// now); over-length calls are skipped here.
func (l *AgentLoop) ready(p *treePlay, i int, at, now time.Duration, out []TurnRequest) []TurnRequest {
	if p.state[i] != stepPending {
		return out
	}
	st := &p.tree.Steps[i]
	if p.rootDead || (st.Agent != 0 && p.sessions[st.Agent].failed) {
		return l.drop(p, i, now, out)
	}
	at = max(at, now)
	req := request(&l.spec, l.bs, p.salt, p.tree.Global, &st.Call)
	if mm := l.rep.MaxModelLen; mm > 0 && req.InputLength+req.OutputLength > mm && l.spec.OverLength != OverLengthSend {
		l.rep.SkippedOverLength++
		p.state[i] = stepDone
		p.left--
		end := at + time.Duration(float64(max(0, st.Call.APITime))/l.spec.Speedup)
		return l.resolve(p, i, end, now, out)
	}
	p.state[i] = stepDue
	k := l.index
	l.index++
	p.index[i] = k
	l.byCall[k] = stepRef{treePlay: p, step: i}
	a := p.tree.Agents[st.Agent]
	if st.Index == 0 && st.Agent != 0 {
		l.rep.SubagentsStarted++
	}
	// Last marks the tree's end (its parent's last call), not a subagent's:
	// a session completed is a tree (report SessionsCompleted).
	tr := TurnRequest{
		Session: p.sessions[st.Agent], Turn: st.Index, Intended: at, Variant: l.variant, Last: st.Last && st.Agent == 0,
		NominalPromptTokens: req.InputLength,
		Trace: &TraceTurn{Index: k, Request: req,
			Agent: &AgentCall{Tree: p.n, File: fileID(p.tree), Agent: a.ID, Type: a.Type, Call: st.Index, Round: p.round}},
	}
	l.due[k] = at
	return append(out, tr)
}

func fileID(t *agent.Tree) string {
	if t.ID != "" {
		return t.ID
	}
	return strings.TrimSuffix(t.Name, ".json")
}

// resolve applies the end of step i at end to the steps waiting for it.
func (l *AgentLoop) resolve(p *treePlay, i int, end, now time.Duration, out []TurnRequest) []TurnRequest {
	for _, k := range p.kids[i] {
		for _, d := range p.tree.Steps[k].Deps {
			if d.Step == i {
				p.ready[k] = max(p.ready[k], end+l.gap(d.Gap))
			}
		}
		p.waits[k]--
		if p.waits[k] == 0 {
			out = l.ready(p, k, p.ready[k], now, out)
		}
	}
	return l.endPlay(p, now, out)
}

// drop marks step i not sent: its agent's later calls and the subagents it
// would spawn are dropped too; a join on it is released at now.
func (l *AgentLoop) drop(p *treePlay, i int, now time.Duration, out []TurnRequest) []TurnRequest {
	if p.state[i] != stepPending {
		return out
	}
	p.state[i] = stepDropped
	p.left--
	l.rep.NotSent++
	return l.resolve(p, i, now, now, out)
}

// endPlay ends p when nothing of it is left and starts the next session.
func (l *AgentLoop) endPlay(p *treePlay, now time.Duration, out []TurnRequest) []TurnRequest {
	if p.left > 0 || l.plays[p.n] != p {
		return out
	}
	delete(l.plays, p.n)
	l.rep.PlaysEnded++
	delay := time.Duration(0)
	if l.shape && p.rootDead {
		// As Loop replaces a failed session: never at once, or a server
		// that fails at once would spin the loop at one instant.
		delay = l.sc.FailureBackoff
	}
	return l.fill(now, delay, out)
}

// Sent records that a call was written at now.
func (l *AgentLoop) Sent(tr TurnRequest, now time.Duration) {
	if l.stopped || tr.Trace == nil {
		return
	}
	k := tr.Trace.Index
	if _, ok := l.open[k]; ok {
		return
	}
	at, ok := l.due[k]
	if !ok {
		return
	}
	delete(l.due, k)
	l.open[k] = openTurn{window: l.WindowIndex(now), sent: now}
	l.late.RecordValue(max(0, int64((now-at)/time.Microsecond)))
	l.rep.Sent++
	l.rep.InputTokens += int64(tr.Trace.Request.InputLength)
	l.rep.OutputTokens += int64(tr.Trace.Request.OutputLength)
}

// Finish records a call's end at now and returns the calls that waited for
// it. A failed parent call ends its tree (the rest is not sent); a failed
// subagent call ends that subagent, and its join is released.
func (l *AgentLoop) Finish(r *Result, now time.Duration) []TurnRequest {
	if l.stopped || r.Side || r.Trace == nil {
		return nil
	}
	k := r.Trace.Index
	ref, ok := l.byCall[k]
	if !ok {
		return nil
	}
	o, ok := l.open[k]
	if !ok {
		o = openTurn{window: l.WindowIndex(r.Sent), sent: r.Sent}
		if _, due := l.due[k]; due {
			delete(l.due, k)
			l.rep.Sent++
		}
	}
	delete(l.open, k)
	delete(l.byCall, k)
	bookFinish(l.windows, o.window, max(l.WindowIndex(now), o.window), r.OK())
	p, i := ref.treePlay, ref.step
	p.state[i] = stepDone
	p.left--
	if !r.OK() {
		if a := p.tree.Steps[i].Agent; a == 0 {
			p.rootDead = true
		} else {
			p.sessions[a].failed = true
		}
	}
	return l.resolve(p, i, now, now, nil)
}

// bookFinish counts a turn sent in window ws and ended in window wd.
func bookFinish(windows []StageWindow, ws, wd int, ok bool) {
	windows[ws].Started++
	for i := ws; i < wd; i++ {
		windows[i].InFlight++
		windows[i+1].CarriedIn++
	}
	if ok {
		windows[wd].Completed++
	} else {
		windows[wd].Failed++
	}
}

// Stop closes the variant at now: calls in flight count InFlight; due,
// waiting and unstarted calls of live plays count NotSent.
func (l *AgentLoop) Stop(now time.Duration) {
	if l.stopped {
		return
	}
	last := l.WindowIndex(now)
	for _, o := range l.open {
		countOpenAtStop(l.windows, o.window, last)
	}
	for _, p := range l.plays {
		for i, s := range p.state {
			if _, due := l.due[p.index[i]]; s == stepPending || (s == stepDue && due) {
				l.rep.NotSent++
			}
		}
	}
	l.rep.PlaysNotStarted = l.src.notStarted()
	l.rep.LatenessP50S = float64(l.late.ValueAtQuantile(50)) / 1e6
	l.rep.LatenessP99S = float64(l.late.ValueAtQuantile(99)) / 1e6
	l.ended = l.Done()
	l.plays, l.due = map[int]*treePlay{}, map[int]time.Duration{}
	l.stopped, l.stopAt = true, now
}

// Replay returns the replay's record (complete after Stop).
func (l *AgentLoop) Replay() AgentReplay { return l.rep }

// WindowIndex returns the window containing t, clamped to the first and last.
func (l *AgentLoop) WindowIndex(t time.Duration) int {
	if t < l.start {
		return 0
	}
	return min(int((t-l.start)/l.spec.Window), len(l.windows)-1)
}

// Windows returns the windows with the accounting so far; after Stop they end
// at the stop instant.
func (l *AgentLoop) Windows() []StageWindow {
	ws := slices.Clone(l.windows)
	if !l.stopped {
		return ws
	}
	ws = ws[:l.WindowIndex(l.stopAt)+1]
	for i := range ws {
		// A replay that played every session ends complete in its last,
		// shorter window.
		ws[i].Complete = ws[i].End <= l.stopAt || l.ended
		ws[i].End = min(ws[i].End, l.stopAt)
	}
	return ws
}

// Variant returns the variant record for the manifest.
func (l *AgentLoop) Variant() Variant {
	ws := l.Windows()
	planned := len(l.windows)
	if l.ended {
		planned = len(ws)
	}
	return variantRecord(l.variant, ws, l.stopped, planned)
}

// Active returns the live session trees.
func (l *AgentLoop) Active() int { return len(l.plays) }

// InFlightAt returns the calls sent and not finished, or due at or before now.
func (l *AgentLoop) InFlightAt(now time.Duration) int {
	due, _ := countDue(l.due, now)
	return len(l.open) + due
}

// Waiting returns the calls handed out and due after now.
func (l *AgentLoop) Waiting(now time.Duration) int {
	_, n := countDue(l.due, now)
	return n
}

// agentSample returns up to n calls of the first sessions in play order
// (every tenth call), as first plays replay them, for calibration.
func agentSample(sc *Scenario, spec *TraceSpec, n int) ([]TraceTurn, error) {
	seed := sc.WithDefaults().Seed
	var src treeSource
	if sc.Shape == ShapeAgent {
		src = newSynthSource(sc)
	} else {
		files, err := agentFiles(spec, seed)
		if err != nil {
			return nil, err
		}
		src = &fileSource{files: files, rounds: map[int]int{}}
	}
	bs := spec.SynthBlockSize()
	var out []TraceTurn
	k := 0
	for {
		t, _, ok, err := src.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		salt := playSalt(spec, fileID(t), 0)
		for i := range t.Steps {
			if k%10 == 0 {
				out = append(out, TraceTurn{Index: k, Request: request(spec, bs, salt, t.Global, &t.Steps[i].Call)})
				if len(out) >= n {
					return out, nil
				}
			}
			k++
		}
	}
}
