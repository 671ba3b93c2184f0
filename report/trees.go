package report

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/lmwarden/warden/loadgen"
)

// TreesCSVFile is one row per session tree per variant of an agent-session
// replay (TreesCSVColumns), written beside results.csv.
const TreesCSVFile = "trees.csv"

// Why a tree is cut (TreeStats.Cut): not every call of it ended.
const (
	// CutFailure: a call failed before its agent's last call, so the replay
	// sent nothing more of that agent (of the whole tree, for the parent).
	CutFailure = "failure"
	// CutStop: the tree was live when the variant stopped.
	CutStop = "stop"
)

// TreeStats is one session tree (one play of a file) of one variant, from its
// calls in turns.jsonl (trace.agent.tree). Instants are since the variant's
// first window started.
type TreeStats struct {
	Variant string `json:"variant"`
	Tree    int    `json:"tree"` // loadgen.AgentCall.Tree: the play within the variant
	File    string `json:"file"`
	Round   int    `json:"round"`
	// Calls recorded (done OK or failed; calls skipped over max_model_len, not
	// sent or in flight at the stop have no record), ParentCalls of them the
	// parent's; Subagents: distinct agent ids among them.
	Calls       int `json:"calls"`
	ParentCalls int `json:"parent_calls"`
	Subagents   int `json:"subagents"`
	// FirstSent: the earliest Sent of its calls; LastDone: the latest Done,
	// background subagents included.
	FirstSent time.Duration `json:"first_sent_ns"`
	LastDone  time.Duration `json:"last_done_ns"`
	// Complete: every call ended (Cut ""); see SummarizeAgents.
	Complete    bool   `json:"complete"`
	Cut         string `json:"cut,omitempty"`
	FailedCalls int    `json:"failed_calls"`
	// ParentTTFBP50S: TTFB p50 of its OK parent calls (HDR histogram as
	// Summary.TTFBP50S); CachedPct: 100 * sum(cached_tokens) /
	// sum(prompt_tokens) over its OK calls reporting cached tokens.
	ParentTTFBP50S float64 `json:"parent_ttfb_p50_s"`
	CachedPct      float64 `json:"cached_pct"`
}

// Duration is the tree's completion time: first call sent to last call done.
func (t *TreeStats) Duration() time.Duration { return t.LastDone - t.FirstSent }

// AgentSummary is the whole-run figure set of one variant of an agent-session
// replay (manifest agent_traces), over the variant's run: its first window's
// start to its last window's end (the stop). report/doc.go, "Agent sessions",
// defines each figure.
type AgentSummary struct {
	Variant  string `json:"variant"`
	Affinity bool   `json:"affinity"`
	// RunStart, RunEnd: the variant's run, simulated time.
	RunStart time.Duration `json:"run_start_ns"`
	RunEnd   time.Duration `json:"run_end_ns"`

	// Plays started and ended, from the manifest; Trees: trees with a call
	// in turns.jsonl.
	Plays      int `json:"plays"`
	PlaysEnded int `json:"plays_ended"`
	Trees      int `json:"trees"`
	// SessionsCompleted: trees every call of which ended; SessionsCut the
	// others, by reason.
	SessionsCompleted int `json:"sessions_completed"`
	SessionsCut       int `json:"sessions_cut"`
	CutByFailure      int `json:"cut_by_failure"`
	CutAtStop         int `json:"cut_at_stop"`

	SessionP50S        float64 `json:"session_p50_s"`
	SessionP95S        float64 `json:"session_p95_s"`
	CallsPerSessionP50 float64 `json:"calls_per_session_p50"`
	OutputTokensPerMin float64 `json:"output_tokens_per_min"`

	// Calls recorded (OK or failed), the parent's and the subagents'.
	ParentCalls   int `json:"parent_calls"`
	SubagentCalls int `json:"subagent_calls"`

	ParentTTFBP50S   float64 `json:"parent_ttfb_p50_s"`
	ParentTTFBP95S   float64 `json:"parent_ttfb_p95_s"`
	SubagentTTFBP50S float64 `json:"subagent_ttfb_p50_s"`
	SubagentTTFBP95S float64 `json:"subagent_ttfb_p95_s"`

	ParentCachedPct   float64 `json:"parent_cached_pct"`
	SubagentCachedPct float64 `json:"subagent_cached_pct"`
	PrefixHitsPct     float64 `json:"prefix_hits_pct"`

	StayedCalls int     `json:"stayed_calls"`
	MovedCalls  int     `json:"moved_calls"`
	StayedPct   float64 `json:"stayed_pct"`

	LiveTreesMean float64 `json:"live_trees_mean"`
	LiveCallsMean float64 `json:"live_calls_mean"`

	// SkippedOverLength and NotSent from the manifest; FailedCalls from
	// turns.jsonl; InFlightAtStop: calls sent (manifest) less calls recorded.
	SkippedOverLength int `json:"skipped_over_length"`
	NotSent           int `json:"not_sent"`
	FailedCalls       int `json:"failed_calls"`
	InFlightAtStop    int `json:"in_flight_at_stop"`

	Notes []string `json:"notes,omitempty"`
}

// RunSeconds is the length of the variant's run in seconds.
func (a *AgentSummary) RunSeconds() float64 { return (a.RunEnd - a.RunStart).Seconds() }

func (a *AgentSummary) note(msg string) { a.Notes = append(a.Notes, msg) }

// SummarizeAgents computes the whole-run figures of every variant of an
// agent-session replay (one AgentSummary per variant with an agent_traces
// record and a window, in manifest order) and its trees (by variant, then
// tree); nil for a run without agent_traces.
//
// Completeness. turns.jsonl records calls done, not the calls of a tree, so a
// tree is read as cut (not every call ended) when (a) one of its calls failed
// without being its agent's last call (last_turn): the replay sends nothing
// more of that agent; or (b) the variant did not end every play it started
// (manifest plays_ended < plays) and the parent or a subagent of the tree has
// no record of its last call: the tree was live at the stop. A variant that
// ended every play has no tree cut at the stop. Rule (b) can misread a tree
// whose agent's last call was skipped over max_model_len (cut though ended)
// or whose background subagent had not started at the stop (complete though
// live); a note says when its count differs from the manifest's.
func SummarizeAgents(run *Run) ([]AgentSummary, []TreeStats) {
	m := &run.Manifest
	if len(m.AgentTraces) == 0 {
		return nil, nil
	}
	byVariant := make(map[string][]*loadgen.Result)
	for i := range run.Results {
		r := &run.Results[i]
		byVariant[r.Variant] = append(byVariant[r.Variant], r)
	}
	seriesByVariant := make(map[string][]loadgen.SeriesSample)
	for _, s := range run.Series {
		seriesByVariant[s.Variant] = append(seriesByVariant[s.Variant], s)
	}
	var sums []AgentSummary
	var trees []TreeStats
	for _, v := range m.Variants {
		i := slices.IndexFunc(m.AgentTraces, func(a loadgen.AgentReplay) bool { return a.Variant == v.Name })
		if i < 0 || len(v.Stages) == 0 {
			continue
		}
		a, ts := summarizeAgentVariant(v, &m.AgentTraces[i], byVariant[v.Name], groupSeries(seriesByVariant[v.Name]))
		sums = append(sums, a)
		trees = append(trees, ts...)
	}
	return sums, trees
}

// treeAcc gathers one tree's calls.
type treeAcc struct {
	st                   TreeStats
	ttfb                 *hdrhistogram.Histogram // OK parent calls
	cached, cachedPrompt int64
	lastSeen             map[string]bool // agent -> its last call recorded
	failedEarly          bool
}

// agentConv names one agent conversation of a variant: a tree's parent
// (agent "") or one of its subagents.
type agentConv struct {
	tree  int
	agent string
}

// variantAcc gathers one variant's calls (add), then its trees (finish).
type variantAcc struct {
	a                                            AgentSummary
	rep                                          *loadgen.AgentReplay
	start, end                                   time.Duration
	placed                                       map[agentConv]string // replica of each conversation's call 0
	parentH, subH                                *hdrhistogram.Histogram
	pCached, pPrompt, sCached, sPrompt, outToken int64
	busy                                         time.Duration // calls in flight, summed over the run
	trees                                        map[int]*treeAcc
	recorded                                     int
}

func summarizeAgentVariant(v loadgen.Variant, rep *loadgen.AgentReplay, results []*loadgen.Result, replicas []replicaSeries) (AgentSummary, []TreeStats) {
	start, end := v.Stages[0].Start, v.Stages[len(v.Stages)-1].End
	acc := &variantAcc{
		a: AgentSummary{Variant: v.Name, Affinity: v.Affinity, RunStart: start, RunEnd: end,
			Plays: rep.Plays, PlaysEnded: rep.PlaysEnded, SkippedOverLength: rep.SkippedOverLength, NotSent: rep.NotSent},
		rep: rep, start: start, end: end, placed: map[agentConv]string{},
		parentH: newTTFBHistogram(), subH: newTTFBHistogram(), trees: map[int]*treeAcc{},
	}
	for _, st := range v.Stages {
		acc.busy += st.UnrecordedInFlight
	}
	for _, r := range results {
		if ac := agentOf(r); ac != nil && ac.Call == 0 && r.Replica != "" {
			acc.placed[agentConv{ac.Tree, ac.Agent}] = r.Replica
		}
	}
	for _, r := range results {
		if !r.Side {
			acc.add(r)
		}
	}
	trees := acc.finishTrees()
	acc.finish(replicas)
	return acc.a, trees
}

// add counts one recorded call.
func (acc *variantAcc) add(r *loadgen.Result) {
	a := &acc.a
	acc.recorded++
	acc.busy += max(0, min(r.Done, acc.end)-max(r.Sent, acc.start))
	ac := agentOf(r)
	if ac == nil {
		return
	}
	t := acc.trees[ac.Tree]
	if t == nil {
		t = &treeAcc{st: TreeStats{Variant: a.Variant, Tree: ac.Tree, File: ac.File, Round: ac.Round, FirstSent: r.Sent, LastDone: r.Done},
			ttfb: newTTFBHistogram(), lastSeen: map[string]bool{}}
		acc.trees[ac.Tree] = t
	}
	t.st.Calls++
	t.st.FirstSent, t.st.LastDone = min(t.st.FirstSent, r.Sent), max(t.st.LastDone, r.Done)
	t.lastSeen[ac.Agent] = t.lastSeen[ac.Agent] || r.LastTurn
	parent := ac.Agent == ""
	if parent {
		t.st.ParentCalls++
		a.ParentCalls++
	} else {
		a.SubagentCalls++
	}
	if !r.OK() {
		t.st.FailedCalls++
		a.FailedCalls++
		t.failedEarly = t.failedEarly || !r.LastTurn
		return
	}
	acc.outToken += int64(r.OutputTokens)
	if parent {
		recordTTFB(acc.parentH, r)
		recordTTFB(t.ttfb, r)
	} else {
		recordTTFB(acc.subH, r)
	}
	if r.CachedTokens >= 0 {
		c, p := int64(r.CachedTokens), int64(r.PromptTokens)
		t.cached, t.cachedPrompt = t.cached+c, t.cachedPrompt+p
		if parent {
			acc.pCached, acc.pPrompt = acc.pCached+c, acc.pPrompt+p
		} else {
			acc.sCached, acc.sPrompt = acc.sCached+c, acc.sPrompt+p
		}
	}
	if ac.Call > 0 {
		first, ok := acc.placed[agentConv{ac.Tree, ac.Agent}]
		switch {
		case !ok || r.Replica == "":
			// Unknown placement or server: cannot say.
		case r.Replica == first:
			a.StayedCalls++
		default:
			a.MovedCalls++
		}
	}
}

// finishTrees decides which trees are complete (SummarizeAgents), fills the
// session quantiles and the live trees' time, and returns the trees by
// number, their instants since the variant's start.
func (acc *variantAcc) finishTrees() []TreeStats {
	a := &acc.a
	allEnded := acc.rep.PlaysEnded >= acc.rep.Plays
	var durations, calls []float64
	var live time.Duration
	var out []TreeStats
	for _, t := range acc.trees {
		st := t.st
		st.Subagents = len(t.lastSeen)
		if _, ok := t.lastSeen[""]; ok {
			st.Subagents--
		}
		switch {
		case t.failedEarly:
			st.Cut = CutFailure
			a.CutByFailure++
		case !allEnded && !everyLastSeen(t.lastSeen):
			st.Cut = CutStop
			a.CutAtStop++
		}
		st.Complete = st.Cut == ""
		liveEnd := st.LastDone
		if st.Cut == CutStop {
			liveEnd = acc.end
		}
		live += max(0, min(liveEnd, acc.end)-max(st.FirstSent, acc.start))
		if st.Complete {
			a.SessionsCompleted++
			durations = append(durations, st.Duration().Seconds())
			calls = append(calls, float64(st.Calls))
		}
		st.ParentTTFBP50S = quantileS(t.ttfb, 50)
		st.CachedPct = pct(float64(t.cached), float64(t.cachedPrompt))
		st.FirstSent -= acc.start
		st.LastDone -= acc.start
		out = append(out, st)
	}
	slices.SortFunc(out, func(x, y TreeStats) int { return cmp.Compare(x.Tree, y.Tree) })
	a.Trees = len(out)
	a.SessionsCut = a.CutByFailure + a.CutAtStop
	a.SessionP50S, a.SessionP95S = nearestRank(durations, 50), nearestRank(durations, 95)
	a.CallsPerSessionP50 = nearestRank(calls, 50)
	a.LiveTreesMean = math.NaN()
	if w := a.RunSeconds(); w > 0 {
		a.LiveTreesMean = live.Seconds() / w
	}
	return out
}

// finish fills the run's rates and shares and the notes.
func (acc *variantAcc) finish(replicas []replicaSeries) {
	a, rep := &acc.a, acc.rep
	nan := math.NaN()
	a.InFlightAtStop = max(0, rep.Sent-acc.recorded)
	a.ParentTTFBP50S, a.ParentTTFBP95S = quantileS(acc.parentH, 50), quantileS(acc.parentH, 95)
	a.SubagentTTFBP50S, a.SubagentTTFBP95S = quantileS(acc.subH, 50), quantileS(acc.subH, 95)
	a.ParentCachedPct = pct(float64(acc.pCached), float64(acc.pPrompt))
	a.SubagentCachedPct = pct(float64(acc.sCached), float64(acc.sPrompt))
	a.StayedPct = pct(float64(a.StayedCalls), float64(a.StayedCalls+a.MovedCalls))
	a.OutputTokensPerMin, a.LiveCallsMean = nan, nan
	if w := a.RunSeconds(); w > 0 {
		a.OutputTokensPerMin = float64(acc.outToken) * 60 / w
		a.LiveCallsMean = acc.busy.Seconds() / w
	}
	run := Summary{WindowStart: acc.start, WindowEnd: acc.end}
	summarizeSeries(&run, replicas)
	a.PrefixHitsPct = run.PrefixHitsPct

	if rep.PlaysEnded < rep.Plays && a.CutAtStop != rep.Plays-rep.PlaysEnded {
		a.note(fmt.Sprintf("%d trees read as live at the stop (an agent's last call not in %s), the manifest has %d plays not ended: "+
			"a last call skipped over max_model_len, or a background subagent not started at the stop, is not told apart from turns.jsonl",
			a.CutAtStop, TurnsFile, rep.Plays-rep.PlaysEnded))
	}
	if n := rep.Plays - a.Trees; n > 0 {
		a.note(fmt.Sprintf("%d of %d plays started have no call in %s (every call skipped over max_model_len, or the first in flight at the stop): "+
			"in no session figure", n, rep.Plays, TurnsFile))
	}
	if a.SessionsCompleted == 0 {
		a.note("no tree completed: session times and calls per session n/a")
	}
}

// nearestRank returns the q-th percentile of v by the rank hdrhistogram-go's
// ValueAtQuantile uses, exactly: the value of rank round(q/100 * n), at least
// 1, in sorted order (a run has few trees: no histogram needed); NaN for none.
// It sorts v.
func nearestRank(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	rank := int(q/100*float64(len(v)) + 0.5)
	return v[min(max(rank, 1), len(v))-1]
}

func agentOf(r *loadgen.Result) *loadgen.AgentCall {
	if r.Trace == nil {
		return nil
	}
	return r.Trace.Agent
}

// everyLastSeen reports whether the parent and every subagent seen have
// their last call recorded.
func everyLastSeen(last map[string]bool) bool {
	if !last[""] {
		return false
	}
	for _, ok := range last {
		if !ok {
			return false
		}
	}
	return true
}

// TreesCSVColumns is the header of trees.csv: one row per tree per variant,
// variants in manifest order, trees by number. Times in seconds since the
// variant's first window started; an empty cell could not be computed.
//
//	variant             variant name
//	tree                the play within the variant (trace.agent.tree)
//	file                the session's file id; round: earlier plays of it in the variant
//	calls               calls recorded (OK or failed); parent_calls: the parent's
//	subagents           distinct subagents among them
//	first_sent_s        earliest Sent of its calls
//	last_done_s         latest Done of its calls, background subagents included
//	duration_s          last_done_s - first_sent_s
//	complete            every call ended (SummarizeAgents); cut: why not (failure, stop)
//	failed_calls        calls that failed
//	parent_ttfb_p50_s   TTFB p50 of its OK parent calls
//	cached_pct          100 * sum(cached_tokens) / sum(prompt_tokens), its OK calls (usage)
var TreesCSVColumns = []string{"variant", "tree", "file", "round", "calls", "parent_calls", "subagents",
	"first_sent_s", "last_done_s", "duration_s", "complete", "cut", "failed_calls", "parent_ttfb_p50_s", "cached_pct"}

// TreesCSV renders trees as trees.csv (TreesCSVColumns).
func TreesCSV(trees []TreeStats) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(TreesCSVColumns); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", TreesCSVFile, err)
	}
	for i := range trees {
		t := &trees[i]
		if err := w.Write([]string{t.Variant, strconv.Itoa(t.Tree), t.File, strconv.Itoa(t.Round),
			strconv.Itoa(t.Calls), strconv.Itoa(t.ParentCalls), strconv.Itoa(t.Subagents),
			csvFloat(t.FirstSent.Seconds()), csvFloat(t.LastDone.Seconds()), csvFloat(t.Duration().Seconds()),
			strconv.FormatBool(t.Complete), t.Cut, strconv.Itoa(t.FailedCalls),
			csvFloat(t.ParentTTFBP50S), csvFloat(t.CachedPct)}); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", TreesCSVFile, err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", TreesCSVFile, err)
	}
	return buf.Bytes(), nil
}

// agentRow is one row of the whole-run table: a figure of AgentSummary.
type agentRow struct {
	label  string
	value  func(a *AgentSummary) float64
	format func(float64) string
}

// agentRows are the whole-run table's rows, in order (report/doc.go, "Agent
// sessions").
var agentRows = []agentRow{
	{"sessions done (complete trees)", func(a *AgentSummary) float64 { return float64(a.SessionsCompleted) }, fmtThousands},
	{"sessions cut", func(a *AgentSummary) float64 { return float64(a.SessionsCut) }, fmtThousands},
	{"session time p50 (s)", func(a *AgentSummary) float64 { return a.SessionP50S }, fmtPrec(1)},
	{"session time p95 (s)", func(a *AgentSummary) float64 { return a.SessionP95S }, fmtPrec(1)},
	{"calls per session p50", func(a *AgentSummary) float64 { return a.CallsPerSessionP50 }, fmtThousands},
	{"out tok/min", func(a *AgentSummary) float64 { return a.OutputTokensPerMin }, fmtThousands},
	{"calls done, parent", func(a *AgentSummary) float64 { return float64(a.ParentCalls) }, fmtThousands},
	{"calls done, subagent", func(a *AgentSummary) float64 { return float64(a.SubagentCalls) }, fmtThousands},
	{"TTFB p50, parent (s)", func(a *AgentSummary) float64 { return a.ParentTTFBP50S }, fmtPrec(2)},
	{"TTFB p95, parent (s)", func(a *AgentSummary) float64 { return a.ParentTTFBP95S }, fmtPrec(2)},
	{"TTFB p50, subagent (s)", func(a *AgentSummary) float64 { return a.SubagentTTFBP50S }, fmtPrec(2)},
	{"TTFB p95, subagent (s)", func(a *AgentSummary) float64 { return a.SubagentTTFBP95S }, fmtPrec(2)},
	{"usage cached %, parent", func(a *AgentSummary) float64 { return a.ParentCachedPct }, fmtPrec(1)},
	{"usage cached %, subagent", func(a *AgentSummary) float64 { return a.SubagentCachedPct }, fmtPrec(1)},
	{"prefix hits % (counters)", func(a *AgentSummary) float64 { return a.PrefixHitsPct }, fmtPrec(1)},
	{"stayed %", func(a *AgentSummary) float64 { return a.StayedPct }, fmtPrec(1)},
	{"live trees (mean)", func(a *AgentSummary) float64 { return a.LiveTreesMean }, fmtPrec(2)},
	{"live calls (mean)", func(a *AgentSummary) float64 { return a.LiveCallsMean }, fmtPrec(2)},
	{"calls skipped over max_model_len", func(a *AgentSummary) float64 { return float64(a.SkippedOverLength) }, fmtThousands},
	{"calls not sent", func(a *AgentSummary) float64 { return float64(a.NotSent) }, fmtThousands},
	{"calls failed", func(a *AgentSummary) float64 { return float64(a.FailedCalls) }, fmtThousands},
	{"calls in flight at the stop", func(a *AgentSummary) float64 { return float64(a.InFlightAtStop) }, fmtThousands},
}

// agentTable returns the whole-run table: one row per figure, one cell
// "off -> on" over the compared variants (n/a where one has no summary).
func agentTable(pair []string, aggs []AgentSummary) (header []string, rows [][]string) {
	header = []string{"whole run", strings.Join(pair, " -> ")}
	for _, row := range agentRows {
		parts := make([]string, len(pair))
		for i, name := range pair {
			parts[i] = "n/a"
			if k := slices.IndexFunc(aggs, func(a AgentSummary) bool { return a.Variant == name }); k >= 0 {
				parts[i] = row.format(row.value(&aggs[k]))
			}
		}
		rows = append(rows, []string{row.label, strings.Join(parts, " -> ")})
	}
	return header, rows
}

// agentLegend defines the whole-run table's rows in a paragraph.
const agentLegend = "A session is one tree: the parent agent and its subagents (docs/traces.md, \"Agent sessions\"). " +
	"Over each variant's whole run, first window's start to its stop; one value per run, no noise estimate (compare seeds). " +
	"Session time: first call sent to last call done, background subagents included, over the complete trees (every call ended); " +
	"cut: trees not complete (a failed call stopped an agent, or live at the stop). " +
	"TTFB: OK calls, split by the parent's and the subagents' calls. " +
	"Usage cached: sum(cached_tokens) / sum(prompt_tokens) from the responses' usage, split the same way: " +
	"the engines' counters do not say which request a hit belongs to; prefix hits (counters): their deltas over the run, every request. " +
	"Stayed: later calls of each agent conversation (the parent, each subagent) served by the replica of its first call. " +
	"Live trees and calls: time-averaged over the run (trees first call sent to last call done, or to the stop when cut there; calls sent to done). " +
	"Skipped and not sent from the manifest (agent_traces); per tree: `" + TreesCSVFile + "`."

// mdAgentSection writes summary.md's whole-run section of an agent replay
// (nothing without one): the table, its legend, the replay's accounting and
// the notes.
func mdAgentSection(b *strings.Builder, m *loadgen.Manifest, pair []string, aggs []AgentSummary) {
	if len(aggs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Agent sessions, whole run, %s\n\n", strings.Join(pair, " -> "))
	header, rows := agentTable(pair, aggs)
	mdTable(b, header, rows)
	b.WriteString("\n" + agentLegend + "\n\n")
	var acc [][]string
	for _, t := range m.AgentTraces {
		acc = append(acc, []string{t.Variant, Thousands(float64(t.Files)), fmt.Sprintf("%d (%d ended, %d not started)", t.Plays, t.PlaysEnded, t.PlaysNotStarted),
			Thousands(float64(t.Calls)), Thousands(float64(t.Sent)), Thousands(float64(t.SkippedOverLength)), Thousands(float64(t.NotSent)),
			Thousands(float64(t.SubagentsStarted)), Thousands(float64(t.CappedGaps)), fmt.Sprintf("%.2f / %.2f", t.LatenessP50S, t.LatenessP99S)})
	}
	b.WriteString("Replay (manifest `agent_traces`): calls of the plays started, sent or not; gaps capped at max_gap; lateness: send instant minus intended.\n\n")
	mdTable(b, []string{"variant", "files", "plays", "calls", "sent", "skipped over max_model_len", "not sent", "subagents started", "gaps capped", "lateness p50 / p99 (s)"}, acc)
	var notes []string
	for _, a := range aggs {
		for _, n := range a.Notes {
			notes = append(notes, fmt.Sprintf("- %s: %s\n", a.Variant, n))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			b.WriteString(n)
		}
	}
}

// agentScenarioLine describes an agent replay in summary.md's header.
func agentScenarioLine(m *loadgen.Manifest) string {
	t := m.AgentTraces[0]
	gap := "no cap"
	if t.MaxGap > 0 {
		gap = "max gap " + t.MaxGap.String()
	}
	plays := "each session played once"
	if t.Recycle {
		plays = "sessions played again until the duration"
	}
	rule := m.Subagents
	if rule == "" {
		rule = "keep (the parent's key)"
	}
	if t.Files == 0 {
		// Synthesized trees (shape agent): no files, the stages set the live trees.
		return fmt.Sprintf("- agent sessions: format %s, token scale %g (%d-token blocks), %s, over max_model_len %d: %s; subagents: %s\n",
			t.Format, t.TokenScale, t.BlockSize, gap, t.MaxModelLen, t.OverLength, rule)
	}
	return fmt.Sprintf("- agent sessions: format %s, %d files, token scale %g (%d-token blocks), %s, speedup %g, %d live trees, %s; "+
		"over max_model_len %d: %s; subagents: %s\n",
		t.Format, t.Files, t.TokenScale, t.BlockSize, gap, t.Speedup, t.Live, plays, t.MaxModelLen, t.OverLength, rule)
}

// SessionTimeFigureFile is the session completion time CDF of an agent replay.
const SessionTimeFigureFile = "session_time_cdf.png"

// sessionTimeFigure draws, per variant, the empirical CDF of the completion
// time of its complete trees (TreeStats.Duration), log x.
func sessionTimeFigure(m *loadgen.Manifest, trees []TreeStats) (*plot.Plot, error) {
	colours := variantColours(m)
	p := newPlot("Session completion time (first call sent to last call done), complete trees",
		"session completion time (s, log scale)", "share of sessions <= x")
	var curves []curve
	entries, longest := 0, 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range m.Variants {
		var d []float64
		for i := range trees {
			if t := &trees[i]; t.Variant == v.Name && t.Complete {
				d = append(d, max(t.Duration().Seconds(), minLogTTFB))
			}
		}
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		pts := make(plotter.XYs, len(d))
		for n, x := range d {
			pts[n] = plotter.XY{X: x, Y: float64(n+1) / float64(len(d))}
		}
		lo, hi = min(lo, d[0]), max(hi, d[len(d)-1])
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		ln.StepStyle = plotter.PostStep
		ln.Color = colours[v.Name]
		ln.Width = vg.Points(2)
		label := fmt.Sprintf("%s (%d sessions)", variantLabel(v), len(d))
		p.Add(ln)
		p.Legend.Add(label, ln)
		curves = append(curves, curve{pts: pts})
		entries++
		longest = max(longest, len(label))
	}
	if !math.IsInf(lo, 1) {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = LogTicks{}
		p.X.Min, p.X.Max = lo/1.6, hi*1.6
	}
	p.Y.Min, p.Y.Max = 0, 1
	placeLegend(p, curves, entries, longest, figWidth, figHeight)
	return p, nil
}
