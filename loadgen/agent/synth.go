package agent

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Synthesized agent sessions (a scenario's shape: agent): Generate builds a
// session tree from SynthParams, a seed and a session index, through the same
// items and planner as Read, so one replay (loadgen's AgentLoop) serves both.
//
// Sources of the defaults. "Traces": measured on the 69 Claude Code sessions of
// ../shared/fixtures/traces/claude-code/ (a subset of callanjfox/kv-cache-tester
// traces/, Apache-2.0) by Measure, with nearest-rank quantiles; the test
// TestDefaultsMatchTraces re-derives every one from the files. A distribution
// fitted to a p50 and a p90 is the lognormal through both (Dist). Published
// figures are named where they are used (docs/traces.md, "Synthesized agent
// sessions", compares both sets).

// Defaults of SynthParams.
const (
	// DefaultToolTokens and DefaultSystemTokens: the parent's head, p50 of
	// the traces' tool_tokens and system_tokens.
	DefaultToolTokens   = 12_439
	DefaultSystemTokens = 2_771
	// DefaultResumeShare: sessions whose first call already holds an earlier
	// conversation (first prompt minus head over ResumeThreshold): 23 of the
	// 69 traces.
	DefaultResumeShare = 23.0 / 69
	// DefaultToolShare: parent calls followed by a tool-loop gap (stop
	// tool_use) among those with a measured gap: 3,981 of 4,212.
	DefaultToolShare = 3981.0 / 4212
	// DefaultFanOut: spawn events per parent call, 21 in 4,533.
	DefaultFanOut = 21.0 / 4533
	// DefaultSubagentHeadTokens: p50 of the subagents' tool_tokens +
	// system_tokens (35 subagents).
	DefaultSubagentHeadTokens = 8_475
	// DefaultContextWindow: the window of the traces' models (Claude,
	// 200,000 tokens; the traces' README).
	DefaultContextWindow = 200_000
	// DefaultCompactAt: Claude Code compacts near 167k of a 200k window (the
	// traces' README): 0.835.
	DefaultCompactAt = 0.835
	// ResumeThreshold splits the traces' first messages into fresh ones (at
	// most this; the largest is 11,874) and resumed contexts (the smallest is
	// 20,404).
	ResumeThreshold = 16_384
	// synthModel is a synthesized call's Call.Model.
	synthModel = "synth"
)

// DefaultWidths are the weights of fan-out widths 1, 2, 3: the traces' 21
// spawns, 11 of one subagent, 6 of two, 4 of three.
func DefaultWidths() []float64 { return []float64{11, 6, 4} }

// DefaultSubagentTypes are the traces' 35 subagents by subagent_type.
func DefaultSubagentTypes() []SubagentType {
	return []SubagentType{{Name: "Explore", Weight: 29}, {Name: "general-purpose", Weight: 4}, {Name: "Plan", Weight: 2}}
}

// z90 is the standard normal's 0.9-quantile.
const z90 = 1.2815515655446004

// Dist is a lognormal distribution given by its median P50 and its 90th
// percentile P90, each draw rounded to T's unit and clamped to [Min, Max] (0:
// no bound). P90 0 (or equal to P50) is the fixed value P50. YAML: {p50: 280,
// p90: 3305, max: 11000}; durations as Go duration strings.
type Dist[T int | time.Duration] struct {
	P50 T `yaml:"p50" json:"p50"`
	P90 T `yaml:"p90" json:"p90,omitempty"`
	Min T `yaml:"min" json:"min,omitempty"`
	Max T `yaml:"max" json:"max,omitempty"`
}

// IsZero reports whether d is unset (the default applies).
func (d Dist[T]) IsZero() bool { return d == Dist[T]{} }

// Sigma returns the lognormal's sigma, ln(P90/P50) / z90; 0 when fixed.
func (d Dist[T]) Sigma() float64 {
	if d.P90 <= d.P50 || d.P50 <= 0 {
		return 0
	}
	return math.Log(float64(d.P90)/float64(d.P50)) / z90
}

// Draw returns one draw from r.
func (d Dist[T]) Draw(r *rand.Rand) T {
	v := d.P50
	if s := d.Sigma(); s > 0 {
		v = T(math.Round(float64(d.P50) * math.Exp(s*r.NormFloat64())))
	}
	if d.Min > 0 {
		v = max(v, d.Min)
	}
	if d.Max > 0 {
		v = min(v, d.Max)
	}
	return v
}

func (d Dist[T]) or(def Dist[T]) Dist[T] {
	if d.IsZero() {
		return def
	}
	return d
}

// SubagentType is one kind of subagent (Claude Code's subagent_type) and its
// weight among the spawned ones. Each type has a head of its own (the same
// text for every subagent of the type, in every session).
type SubagentType struct {
	Name   string  `yaml:"name" json:"name"`
	Weight float64 `yaml:"weight" json:"weight"`
}

// SynthParams are the parameters of synthesized agent sessions, a scenario's
// `agent:` section. A zero field takes its default (WithDefaults), given with
// its source; the shares are pointers so that 0 can be asked for. Tokens are
// Claude Code's own (a 200k window); the replay scales them for a smaller
// fleet (loadgen's agent.token_scale).
type SynthParams struct {
	// BlockSize: tokens per hash id; default 64 (the traces' block_size).
	BlockSize int `yaml:"block_size" json:"block_size"`
	// ToolTokens + SystemTokens: the parent's head, the same text in every
	// session (Claude Code's tools and system prompt do not change between
	// sessions of one version); default 12,439 + 2,771 (traces, p50).
	ToolTokens   int `yaml:"tool_tokens" json:"tool_tokens"`
	SystemTokens int `yaml:"system_tokens" json:"system_tokens"`
	// FirstTurnTokens: a fresh session's first user message, unique; default
	// p50 3,482, p90 6,206 (traces: the 46 first messages under
	// ResumeThreshold).
	FirstTurnTokens Dist[int] `yaml:"first_turn_tokens" json:"first_turn_tokens"`
	// ResumeShare: sessions that start from an earlier conversation (claude
	// --continue), whose first prompt is the head plus ResumeTokens of their
	// own; default 23/69 (traces). ResumeTokens: default p50 110,272, p90
	// 183,676 (traces: the 16 of those 23 whose first prompt fits the
	// 200,000-token window; the others ran on 1M-token models), at most what
	// stays under CompactAt.
	ResumeShare  *float64  `yaml:"resume_share" json:"resume_share,omitempty"`
	ResumeTokens Dist[int] `yaml:"resume_tokens" json:"resume_tokens"`
	// Calls: the parent's calls per session, summary calls included; default
	// p50 34, p90 163, 1 to 400 (traces; the longest has 395). A draw below 1
	// is 1 (so is one of SubagentCalls): a session without calls never ends.
	Calls Dist[int] `yaml:"calls" json:"calls"`
	// NewInputTokens: what a parent call adds after the previous prompt and
	// output (tool results, a user message); default p50 280, p90 3,305 (traces),
	// at most 11,000: the cap brings the mean to the traces' 1,190 (uncapped
	// 1,790), so prompts grow as fast as recorded.
	NewInputTokens Dist[int] `yaml:"new_input_tokens" json:"new_input_tokens"`
	// OutputTokens: per parent call; default p50 242, p90 907 (traces), 1 to
	// 16,000 (the longest recorded is 15,390).
	OutputTokens Dist[int] `yaml:"output_tokens" json:"output_tokens"`
	// ToolShare: parent calls that end on a tool call, followed by a ToolGap;
	// the others end the turn and wait a HumanGap. Gaps run from a call's end
	// to the next call's start. Defaults (traces): 3,981/4,212; tool gaps p50
	// 9.70 s, p90 82.76 s; human gaps p50 244.71 s, p90 2,521.22 s (TraceLab,
	// uw-syfi/TraceLab, reports human waits of p50 ~86 s, p90 ~21 min).
	ToolShare *float64            `yaml:"tool_share" json:"tool_share,omitempty"`
	ToolGap   Dist[time.Duration] `yaml:"tool_gap" json:"tool_gap"`
	HumanGap  Dist[time.Duration] `yaml:"human_gap" json:"human_gap"`
	// FanOut: the chance that a parent call (not the last, not a summary)
	// spawns subagents; Widths: the weights of 1, 2, 3, ... subagents per
	// spawn, which run in parallel and are joined by the next parent call.
	// Defaults (traces): 21/4,533; 11, 6, 4. SpawnGap: from the spawning
	// call's end to each subagent's first call, default p50 0.62 s, p90 0.92
	// s; JoinGap: from the last subagent's end to the next parent call,
	// default p50 23.22 s, p90 93.48 s (traces).
	FanOut   *float64            `yaml:"fan_out" json:"fan_out,omitempty"`
	Widths   []float64           `yaml:"fan_out_widths" json:"fan_out_widths"`
	SpawnGap Dist[time.Duration] `yaml:"spawn_gap" json:"spawn_gap"`
	JoinGap  Dist[time.Duration] `yaml:"join_gap" json:"join_gap"`
	// SubagentTypes: each subagent's type is drawn by weight; default
	// Explore 29, general-purpose 4, Plan 2 (traces).
	SubagentTypes []SubagentType `yaml:"subagent_types" json:"subagent_types"`
	// A subagent: its type's head (default 8,475 tokens), a unique task
	// (default p50 1,873, p90 3,323), its calls (default p50 10, p90 16, 1 to
	// 24), new input (p50 2,351, p90 15,836, at most 72,034) and output (p50
	// 229, p90 1,042, 1 to 10,000) per call, tool-loop gaps (p50 3.91 s, p90
	// 27.82 s); all from the traces' 35 subagents.
	SubagentHeadTokens     int                 `yaml:"subagent_head_tokens" json:"subagent_head_tokens"`
	SubagentTaskTokens     Dist[int]           `yaml:"subagent_task_tokens" json:"subagent_task_tokens"`
	SubagentCalls          Dist[int]           `yaml:"subagent_calls" json:"subagent_calls"`
	SubagentNewInputTokens Dist[int]           `yaml:"subagent_new_input_tokens" json:"subagent_new_input_tokens"`
	SubagentOutputTokens   Dist[int]           `yaml:"subagent_output_tokens" json:"subagent_output_tokens"`
	SubagentGap            Dist[time.Duration] `yaml:"subagent_gap" json:"subagent_gap"`
	// Compaction: when a prompt reaches CompactAt of ContextWindow, that call
	// is a summary call whose output (SummaryTokens) is the summary; the
	// agent's next prompt starts over from its head, the summary and
	// RestoreTokens (the files Claude Code re-reads after a compaction).
	// Defaults: 200,000 and 0.835 (the traces' README); summary p50 2,000,
	// p90 4,200, at most 20,000 (an assumption: the traces record no summary
	// call; Claude Code caps the summary at 20,000 tokens,
	// MAX_OUTPUT_TOKENS_FOR_SUMMARY in its services/compact/autoCompact.ts);
	// restore p50 25,000, p90 50,000 (the traces' prompts after a compaction
	// hold p50 27,093, p90 52,771 tokens beyond the head, less the summary).
	// No prompt exceeds the window less SummaryTokens.Max (but the one of a
	// summary call), no prompt plus output the window.
	ContextWindow int       `yaml:"context_window" json:"context_window"`
	CompactAt     float64   `yaml:"compact_at" json:"compact_at"`
	SummaryTokens Dist[int] `yaml:"summary_tokens" json:"summary_tokens"`
	RestoreTokens Dist[int] `yaml:"restore_tokens" json:"restore_tokens"`
}

func sec(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// DefaultParams returns the parameters with every default.
func DefaultParams() SynthParams { return SynthParams{}.WithDefaults() }

// WithDefaults returns a copy with every zero field at its default.
func (p SynthParams) WithDefaults() SynthParams {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	share := func(v **float64, d float64) {
		if *v == nil {
			*v = &d
		} else {
			x := **v
			*v = &x
		}
	}
	def(&p.BlockSize, DefaultBlockSize)
	def(&p.ToolTokens, DefaultToolTokens)
	def(&p.SystemTokens, DefaultSystemTokens)
	p.FirstTurnTokens = p.FirstTurnTokens.or(Dist[int]{P50: 3_482, P90: 6_206, Min: 1})
	share(&p.ResumeShare, DefaultResumeShare)
	p.ResumeTokens = p.ResumeTokens.or(Dist[int]{P50: 110_272, P90: 183_676, Min: 1})
	p.Calls = p.Calls.or(Dist[int]{P50: 34, P90: 163, Min: 1, Max: 400})
	p.NewInputTokens = p.NewInputTokens.or(Dist[int]{P50: 280, P90: 3_305, Max: 11_000})
	p.OutputTokens = p.OutputTokens.or(Dist[int]{P50: 242, P90: 907, Min: 1, Max: 16_000})
	share(&p.ToolShare, DefaultToolShare)
	p.ToolGap = p.ToolGap.or(Dist[time.Duration]{P50: sec(9.70), P90: sec(82.76)})
	p.HumanGap = p.HumanGap.or(Dist[time.Duration]{P50: sec(244.71), P90: sec(2521.22)})
	share(&p.FanOut, DefaultFanOut)
	if len(p.Widths) == 0 {
		p.Widths = DefaultWidths()
	} else {
		p.Widths = slices.Clone(p.Widths)
	}
	p.SpawnGap = p.SpawnGap.or(Dist[time.Duration]{P50: sec(0.62), P90: sec(0.92)})
	p.JoinGap = p.JoinGap.or(Dist[time.Duration]{P50: sec(23.22), P90: sec(93.48)})
	if len(p.SubagentTypes) == 0 {
		p.SubagentTypes = DefaultSubagentTypes()
	} else {
		p.SubagentTypes = slices.Clone(p.SubagentTypes)
	}
	def(&p.SubagentHeadTokens, DefaultSubagentHeadTokens)
	p.SubagentTaskTokens = p.SubagentTaskTokens.or(Dist[int]{P50: 1_873, P90: 3_323, Min: 1})
	p.SubagentCalls = p.SubagentCalls.or(Dist[int]{P50: 10, P90: 16, Min: 1, Max: 24})
	p.SubagentNewInputTokens = p.SubagentNewInputTokens.or(Dist[int]{P50: 2_351, P90: 15_836, Max: 72_034})
	p.SubagentOutputTokens = p.SubagentOutputTokens.or(Dist[int]{P50: 229, P90: 1_042, Min: 1, Max: 10_000})
	p.SubagentGap = p.SubagentGap.or(Dist[time.Duration]{P50: sec(3.91), P90: sec(27.82)})
	def(&p.ContextWindow, DefaultContextWindow)
	if p.CompactAt == 0 {
		p.CompactAt = DefaultCompactAt
	}
	p.SummaryTokens = p.SummaryTokens.or(Dist[int]{P50: 2_000, P90: 4_200, Min: 1, Max: 20_000})
	p.RestoreTokens = p.RestoreTokens.or(Dist[int]{P50: 25_000, P90: 50_000})
	return p
}

// Problem is one bad parameter: Field is its YAML path under agent: (e.g.
// "calls.p90").
type Problem struct {
	Field, Text string
}

// Validate returns every bad parameter of p (defaults applied first).
func (p SynthParams) Validate() []Problem {
	p = p.WithDefaults()
	var out []Problem
	bad := func(field, format string, args ...any) {
		out = append(out, Problem{Field: field, Text: fmt.Sprintf(format, args...)})
	}
	positive := func(field string, v int) {
		if v < 1 {
			bad(field, "must be at least 1, got %d", v)
		}
	}
	positive("block_size", p.BlockSize)
	if p.ToolTokens < 0 || p.SystemTokens < 0 || p.SubagentHeadTokens < 0 {
		bad("tool_tokens", "tool_tokens %d, system_tokens %d and subagent_head_tokens %d must not be negative", p.ToolTokens, p.SystemTokens, p.SubagentHeadTokens)
	}
	tokens := []struct {
		field string
		d     Dist[int]
	}{
		{"first_turn_tokens", p.FirstTurnTokens}, {"resume_tokens", p.ResumeTokens}, {"calls", p.Calls},
		{"new_input_tokens", p.NewInputTokens}, {"output_tokens", p.OutputTokens},
		{"subagent_task_tokens", p.SubagentTaskTokens}, {"subagent_calls", p.SubagentCalls},
		{"subagent_new_input_tokens", p.SubagentNewInputTokens}, {"subagent_output_tokens", p.SubagentOutputTokens},
		{"summary_tokens", p.SummaryTokens}, {"restore_tokens", p.RestoreTokens},
	}
	for _, t := range tokens {
		checkDist(t.field, t.d, bad)
	}
	for _, t := range []struct {
		field string
		d     Dist[time.Duration]
	}{{"tool_gap", p.ToolGap}, {"human_gap", p.HumanGap}, {"spawn_gap", p.SpawnGap}, {"join_gap", p.JoinGap}, {"subagent_gap", p.SubagentGap}} {
		checkDist(t.field, t.d, bad)
	}
	for _, s := range []struct {
		field string
		v     float64
	}{{"resume_share", *p.ResumeShare}, {"tool_share", *p.ToolShare}, {"fan_out", *p.FanOut}} {
		if !(s.v >= 0 && s.v <= 1) {
			bad(s.field, "%g is not a share in [0, 1]", s.v)
		}
	}
	sum := 0.0
	for i, w := range p.Widths {
		if !(w >= 0) || math.IsInf(w, 0) {
			bad(fmt.Sprintf("fan_out_widths[%d]", i), "weight %g must be a finite number >= 0", w)
		}
		sum += w
	}
	if !(sum > 0) {
		bad("fan_out_widths", "the weights of widths 1, 2, ... sum to %g: give at least one positive weight", sum)
	}
	sum = 0
	names := map[string]bool{}
	for i, st := range p.SubagentTypes {
		f := fmt.Sprintf("subagent_types[%d]", i)
		if st.Name == "" {
			bad(f+".name", "required")
		} else if names[st.Name] {
			bad(f+".name", "type %q given twice", st.Name)
		}
		names[st.Name] = true
		if !(st.Weight >= 0) || math.IsInf(st.Weight, 0) {
			bad(f+".weight", "%g must be a finite number >= 0", st.Weight)
		}
		sum += st.Weight
	}
	if !(sum > 0) {
		bad("subagent_types", "the weights sum to %g: give at least one positive weight", sum)
	}
	if !(p.CompactAt > 0 && p.CompactAt <= 1) {
		bad("compact_at", "%g is not a share of the window in (0, 1]", p.CompactAt)
	}
	head := max(p.ToolTokens+p.SystemTokens, p.SubagentHeadTokens)
	if lim := p.promptLimit(); p.ContextWindow < 1 || p.compactAt() <= head || lim <= head {
		bad("context_window", "%d x compact_at %g = %d tokens, less the summary's cap %d (summary_tokens.max): leaves no room after a head of %d tokens",
			p.ContextWindow, p.CompactAt, p.compactAt(), p.SummaryTokens.Max, head)
	}
	return out
}

func checkDist[T int | time.Duration](field string, d Dist[T], bad func(string, string, ...any)) {
	switch {
	case d.P50 < 0 || d.P90 < 0 || d.Min < 0 || d.Max < 0:
		bad(field, "p50 %v, p90 %v, min %v and max %v must not be negative", d.P50, d.P90, d.Min, d.Max)
	case d.P50 == 0 && d.P90 > 0:
		bad(field+".p50", "must be positive when p90 is given (a lognormal through p50 and p90)")
	case d.P90 != 0 && d.P90 < d.P50:
		bad(field+".p90", "%v is below p50 %v", d.P90, d.P50)
	case d.Max != 0 && d.Min > d.Max:
		bad(field+".min", "%v is above max %v", d.Min, d.Max)
	}
}

// compactAt returns the prompt size at which a call is a summary call.
func (p *SynthParams) compactAt() int {
	return int(math.Round(float64(p.ContextWindow) * p.CompactAt))
}

// promptLimit returns the largest prompt: the window less the summary's cap.
func (p *SynthParams) promptLimit() int { return p.ContextWindow - p.SummaryTokens.Max }

// GlobalIDs is the range of the hash ids Generate gives the heads (every
// negative id): shared by all sessions, where every other id is the tree's
// own (Tree.Global).
var GlobalIDs = IDRange{Lo: math.MinInt64, Hi: 0}

// headID is block j of the head named kind: a negative id, the same in every
// session.
func headID(kind uint64, j int) int64 {
	return -1 - int64(splitmix(kind^uint64(j)*0x9e3779b97f4a7c15)>>1)
}

// splitmix is the SplitMix64 finaliser (Steele, Lea, Flood 2014).
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func hashName(s string) uint64 {
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// parentHead names the parent's head (headID).
var parentHead = hashName("claude-code parent tools+system")

// stream is one agent's conversation as full blocks: its head's global ids,
// then ids of its own as blocks complete.
type stream struct {
	bs, tokens int
	head       []int64 // the head's full blocks
	headTokens int
	ids        []int64
	next       *int64 // the tree's next local id
}

func newStream(bs, headTokens int, kind uint64, next *int64) *stream {
	s := &stream{bs: bs, headTokens: headTokens, next: next}
	s.head = make([]int64, headTokens/bs)
	for j := range s.head {
		s.head[j] = headID(kind, j)
	}
	s.restart()
	return s
}

// restart drops everything after the head (a compaction).
func (s *stream) restart() {
	s.ids = slices.Clone(s.head)
	s.tokens = 0
	s.add(s.headTokens)
}

// add appends n tokens; a block that completes gets the next local id (the
// block that holds the head's end holds own text too).
func (s *stream) add(n int) {
	s.tokens += n
	for len(s.ids) < s.tokens/s.bs {
		if len(s.ids) < len(s.head) {
			s.ids = append(s.ids, s.head[len(s.ids)])
			continue
		}
		s.ids = append(s.ids, *s.next)
		*s.next++
	}
}

// blocks returns the ids of the prompt so far; a later add does not change
// them (append past their length only).
func (s *stream) blocks() []int64 { return s.ids[:len(s.ids):len(s.ids)] }

// gen builds one tree.
type gen struct {
	p       *SynthParams
	r       *rand.Rand
	t       *Tree
	next    int64 // next local hash id
	joins   map[int]time.Duration
	widthCD []float64
	typeCD  []float64
}

// SessionID names session idx of seed's population (Tree.ID).
func SessionID(seed uint64, idx int) string {
	return "synth-" + strconv.FormatUint(seed, 10) + "-" + strconv.Itoa(idx)
}

// Generate returns session idx of the population (p, seed), planned like a
// read trace: the same arguments give the same tree. p is used with defaults
// and must be valid (Validate). Every call's APITime is 0: its gaps are the
// waits from its end (the replay measures the server time); a join waits the
// drawn JoinGap after every subagent it gates.
func Generate(p SynthParams, seed uint64, idx int) *Tree {
	p = p.WithDefaults()
	id := SessionID(seed, idx)
	g := &gen{
		p: &p, r: rand.New(rand.NewPCG(seed, splitmix(uint64(idx)))),
		t: &Tree{ID: id, Name: id, BlockSize: p.BlockSize, ToolTokens: p.ToolTokens, SystemTokens: p.SystemTokens,
			Basis: BasisNone, Agents: []*Agent{{}}, Global: GlobalIDs},
		joins:   map[int]time.Duration{},
		widthCD: cumulative(p.Widths),
	}
	ws := make([]float64, len(p.SubagentTypes))
	for i, st := range p.SubagentTypes {
		ws[i] = st.Weight
	}
	g.typeCD = cumulative(ws)
	items := g.parent()
	pl := &planner{t: g.t}
	pl.agentSeq(0, items, -1)
	// A join waits JoinGap after each subagent it gates (the planner's gaps
	// hold the drawn timeline's slack between the subagents' ends).
	for i := range g.t.Steps {
		st := &g.t.Steps[i]
		if jg, ok := g.joins[st.Index]; ok && st.Agent == 0 {
			for k := range st.Deps {
				st.Deps[k].Gap = jg
			}
		}
	}
	if len(g.t.Agents) > 1 {
		g.t.Basis = BasisAbsolute
	}
	return g.t
}

func cumulative(ws []float64) []float64 {
	out := make([]float64, len(ws))
	sum := 0.0
	for i, w := range ws {
		sum += w
		out[i] = sum
	}
	return out
}

// pick draws an index by the cumulative weights cd.
func (g *gen) pick(cd []float64) int {
	x := g.r.Float64() * cd[len(cd)-1]
	for i, c := range cd {
		if x < c {
			return i
		}
	}
	return len(cd) - 1
}

// call is the agent's next call at t on s, its output at most what the
// window leaves.
func (g *gen) call(s *stream, t time.Duration, out int, stop, path string) *Call {
	out = max(1, min(out, g.p.ContextWindow-s.tokens))
	return &Call{Path: path, T: t, APITime: 0, In: s.tokens, Out: out, HashIDs: s.blocks(), Model: synthModel, Stop: stop}
}

// grow moves s past a call of output out: a compaction after a summary call,
// else the output and a draw of newInput (at most what the window allows). It
// returns whether the next call is a summary call.
func (g *gen) grow(s *stream, out int, summary bool, newInput Dist[int]) bool {
	if summary {
		s.restart()
		s.add(out)
		s.add(min(g.p.RestoreTokens.Draw(g.r), max(0, g.p.promptLimit()-s.tokens)))
		return false
	}
	s.add(out)
	s.add(min(newInput.Draw(g.r), max(0, g.p.promptLimit()-s.tokens)))
	return s.tokens >= g.p.compactAt()
}

// parent returns the parent's items.
func (g *gen) parent() []item {
	p := g.p
	n := max(1, p.Calls.Draw(g.r))
	s := newStream(p.BlockSize, p.ToolTokens+p.SystemTokens, parentHead, &g.next)
	first := p.FirstTurnTokens.Draw(g.r)
	if g.r.Float64() < *p.ResumeShare {
		first = min(p.ResumeTokens.Draw(g.r), p.compactAt()-s.tokens-1)
	}
	s.add(max(1, first))
	var items []item
	var now time.Duration
	summary := false
	for k := range n {
		out := p.OutputTokens.Draw(g.r)
		stop := "end_turn"
		if summary {
			out = p.SummaryTokens.Draw(g.r)
		} else if g.r.Float64() < *p.ToolShare {
			stop = "tool_use"
		}
		path := fmt.Sprintf("requests[%d]", len(items))
		c := g.call(s, now, out, stop, path)
		items = append(items, item{call: c, think: -1})
		if k == n-1 {
			break
		}
		switch {
		case !summary && g.r.Float64() < *p.FanOut:
			c.Stop = "tool_use" // the Task tool
			w := g.pick(g.widthCD) + 1
			var last time.Duration
			for range w {
				sub, end := g.subagent(now, len(items))
				items = append(items, sub)
				last = max(last, end)
			}
			jg := p.JoinGap.Draw(g.r)
			g.joins[k+1] = jg
			now = last + jg
		case summary || stop == "tool_use":
			// The loop goes on after a tool call and after a compaction.
			now += p.ToolGap.Draw(g.r)
		default:
			now += p.HumanGap.Draw(g.r)
		}
		summary = g.grow(s, c.Out, summary, p.NewInputTokens)
	}
	return items
}

// subagent returns one subagent spawned at the end of a parent call at t
// (item position pos) and its last call's start.
func (g *gen) subagent(t time.Duration, pos int) (item, time.Duration) {
	p := g.p
	ti := g.pick(g.typeCD)
	st := p.SubagentTypes[ti]
	a := &Agent{ID: fmt.Sprintf("agent_%03d", len(g.t.Agents)), Type: st.Name, Status: "completed",
		Path: fmt.Sprintf("requests[%d]", pos), ToolTokens: p.SubagentHeadTokens}
	g.t.Agents = append(g.t.Agents, a)
	sub := &subagent{agent: len(g.t.Agents) - 1}
	s := newStream(p.BlockSize, p.SubagentHeadTokens, hashName("claude-code subagent "+st.Name), &g.next)
	s.add(p.SubagentTaskTokens.Draw(g.r))
	n := max(1, p.SubagentCalls.Draw(g.r))
	now := t + p.SpawnGap.Draw(g.r)
	summary := false
	for k := range n {
		out := p.SubagentOutputTokens.Draw(g.r)
		stop := "tool_use"
		if summary {
			out, stop = p.SummaryTokens.Draw(g.r), "end_turn"
		} else if k == n-1 {
			stop = "end_turn"
		}
		c := g.call(s, now, out, stop, fmt.Sprintf("%s.requests[%d]", a.Path, k))
		sub.items = append(sub.items, item{call: c, think: -1})
		if k == n-1 {
			break
		}
		now += p.SubagentGap.Draw(g.r)
		summary = g.grow(s, c.Out, summary, p.SubagentNewInputTokens)
	}
	return item{sub: sub}, now
}
