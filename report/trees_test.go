package report

import (
	"bytes"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// agentCall is one hand-made call of a session tree.
type agentCall struct {
	tree             int
	file             string
	round            int
	agent            string // "" for the parent
	call             int
	last             bool
	replica          string
	sent, ttfb, done float64 // seconds
	prompt, cached   int
	failed           bool
	sessionInVariant int64
	variant, subtype string
}

func (c agentCall) result() loadgen.Result {
	r := okTurn(c.variant, c.sessionInVariant, c.call, c.replica, c.sent, c.ttfb, c.done, 100)
	r.LastTurn = c.last
	r.PromptTokens, r.CachedTokens = c.prompt, c.cached
	if c.failed {
		r.Status, r.Err, r.OutputTokens, r.FirstToken, r.LastToken = 500, "upstream error", 0, 0, 0
	}
	r.Trace = &loadgen.ResultTrace{InputLength: c.prompt, OutputLength: 100,
		Agent: &loadgen.AgentCall{Tree: c.tree, File: c.file, Agent: c.agent, Type: c.subtype, Call: c.call, Round: c.round}}
	return r
}

// agentRun is a two-variant agent replay made by hand (figures worked out in
// TestAgentSessionFigures).
//
// off, run [0 s, 600 s) in two 5-minute windows, 5 plays, 4 ended:
//
//	tree 0 (a): parent 0-10, 20-30, 60-100 (last); subagent s1 31-41, 42-50 (last): complete, 100 s
//	tree 1 (b): parent 5-15, then a call failing 20-25 before its last: cut (failure)
//	tree 2 (c): parent 100-200, 250-400 (no last call: one in flight 580-600 at the stop);
//	            background subagent bg 210-260, 270-580 (last): cut (stop)
//	tree 3 (d): parent 300-350 (last): complete, 50 s
//	tree 4 (a, round 1): parent 400-430, 440-470 (last): complete, 70 s
//
// on, run [700 s, 1000 s), 2 plays, both ended:
//
//	tree 0 (a): parent 700-710, 735-760 (last); subagent s1 712-720, 722-730 (last): complete, 60 s
//	tree 1 (b): parent 800-850, its last call skipped over max_model_len: complete, 50 s
func agentRun() (*loadgen.Manifest, []loadgen.Result, []loadgen.SeriesSample) {
	sc := testScenario([]int{4}, 3*time.Minute)
	sc.Name = "trace-claude-code"
	sc.Trace = &loadgen.TraceSpec{File: "sessions/", Format: loadgen.FormatClaudeCode, TokenScale: 0.125}
	m := &loadgen.Manifest{
		RunID: "agents", Mode: "virtual", Target: "virtual", Scenario: sc, Seed: 7, Replicas: []string{"r0", "r1", "r2", "r3"},
		Policy: "working-set",
		Variants: []loadgen.Variant{
			{Name: "off", Complete: true, Stages: []loadgen.StageWindow{
				{Sessions: 3, Start: 0, End: sec(300), Complete: true, Started: 11, Completed: 8, Failed: 1, InFlight: 2},
				{Sessions: 2, Start: sec(300), End: sec(600), Complete: true, CarriedIn: 2, Started: 4, Completed: 5, InFlight: 1,
					UnrecordedInFlight: sec(20)},
			}},
			{Name: "on", Affinity: true, Complete: true, Stages: []loadgen.StageWindow{
				{Sessions: 2, Start: sec(700), End: sec(1000), Complete: true, Started: 5, Completed: 5},
			}},
		},
		AgentTraces: []loadgen.AgentReplay{
			{Variant: "off", Format: loadgen.FormatClaudeCode, Files: 4, Plays: 5, PlaysEnded: 4, Calls: 18, Sent: 15,
				SkippedOverLength: 1, NotSent: 2, SubagentsStarted: 2, TokenScale: 0.125, BlockSize: 8, Live: 3},
			{Variant: "on", Format: loadgen.FormatClaudeCode, Files: 4, Plays: 2, PlaysEnded: 2, Calls: 6, Sent: 5,
				SkippedOverLength: 1, SubagentsStarted: 1, TokenScale: 0.125, BlockSize: 8, Live: 3},
		},
	}
	calls := []agentCall{
		{variant: "off", tree: 0, file: "a", call: 0, replica: "r0", sent: 0, ttfb: 1, done: 10, prompt: 1000, cached: 0},
		{variant: "off", tree: 0, file: "a", call: 1, replica: "r0", sent: 20, ttfb: 2, done: 30, prompt: 1000, cached: 800},
		{variant: "off", tree: 0, file: "a", agent: "s1", subtype: "Explore", call: 0, replica: "r1", sent: 31, ttfb: 0.5, done: 41, prompt: 500, cached: 0},
		{variant: "off", tree: 0, file: "a", agent: "s1", subtype: "Explore", call: 1, last: true, replica: "r1", sent: 42, ttfb: 0.5, done: 50, prompt: 500, cached: 400},
		{variant: "off", tree: 0, file: "a", call: 2, last: true, replica: "r1", sent: 60, ttfb: 4, done: 100, prompt: 1000, cached: 900},
		{variant: "off", tree: 1, file: "b", call: 0, replica: "r2", sent: 5, ttfb: 1, done: 15, prompt: 1000, cached: 0},
		{variant: "off", tree: 1, file: "b", call: 1, replica: "r2", sent: 20, ttfb: 1, done: 25, prompt: 1000, cached: 0, failed: true},
		{variant: "off", tree: 2, file: "c", call: 0, replica: "r3", sent: 100, ttfb: 3, done: 200, prompt: 1000, cached: 0},
		{variant: "off", tree: 2, file: "c", agent: "bg", call: 0, replica: "r0", sent: 210, ttfb: 0.5, done: 260, prompt: 500, cached: 0},
		{variant: "off", tree: 2, file: "c", call: 1, replica: "r3", sent: 250, ttfb: 3, done: 400, prompt: 1000, cached: 500},
		{variant: "off", tree: 2, file: "c", agent: "bg", call: 1, last: true, replica: "r2", sent: 270, ttfb: 1.5, done: 580, prompt: 500, cached: 100},
		{variant: "off", tree: 3, file: "d", call: 0, last: true, replica: "r0", sent: 300, ttfb: 2, done: 350, prompt: 1000, cached: 0},
		{variant: "off", tree: 4, file: "a", round: 1, call: 0, replica: "r1", sent: 400, ttfb: 1, done: 430, prompt: 1000, cached: 0},
		{variant: "off", tree: 4, file: "a", round: 1, call: 1, last: true, replica: "r1", sent: 440, ttfb: 1, done: 470, prompt: 1000, cached: 900},

		{variant: "on", tree: 0, file: "a", call: 0, replica: "r0", sent: 700, ttfb: 0.5, done: 710, prompt: 1000, cached: 0},
		{variant: "on", tree: 0, file: "a", agent: "s1", call: 0, replica: "r0", sent: 712, ttfb: 0.25, done: 720, prompt: 500, cached: 0},
		{variant: "on", tree: 0, file: "a", agent: "s1", call: 1, last: true, replica: "r0", sent: 722, ttfb: 0.25, done: 730, prompt: 500, cached: 400},
		{variant: "on", tree: 0, file: "a", call: 1, last: true, replica: "r0", sent: 735, ttfb: 0.5, done: 760, prompt: 1000, cached: 900},
		{variant: "on", tree: 1, file: "b", call: 0, replica: "r1", sent: 800, ttfb: 0.5, done: 850, prompt: 1000, cached: 0},
	}
	var results []loadgen.Result
	for _, c := range calls {
		c.sessionInVariant = int64(10*c.tree + len(c.agent))
		results = append(results, c.result())
	}
	// Counters of off only: r0 600 of 1,000 prompt tokens hit, r1 900 of 3,000.
	var series []loadgen.SeriesSample
	for _, ts := range []float64{0, 300, 600} {
		series = append(series, sample("r0", ts, 0, ts/600*1000, ts/600*600), sample("r1", ts, 0, ts/600*3000, ts/600*900))
	}
	return m, results, series
}

// near reports whether got is within 0.1 % of want (HDR histograms keep 3
// significant digits).
func near(got, want float64) bool { return math.Abs(got-want) <= 1e-3*math.Abs(want) }

// Every whole-run figure of the hand-made run, worked out by hand.
func TestAgentSessionFigures(t *testing.T) {
	dir := t.TempDir()
	m, results, series := agentRun()
	writeRunDir(t, dir, m, results, series)
	run, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	aggs, trees := SummarizeAgents(run)
	if len(aggs) != 2 || len(trees) != 7 {
		t.Fatalf("%d summaries, %d trees; want 2, 7", len(aggs), len(trees))
	}
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		a    *AgentSummary
		want AgentSummary
	}{
		{"off", &aggs[0], AgentSummary{
			Trees: 5, SessionsCompleted: 3, SessionsCut: 2, CutByFailure: 1, CutAtStop: 1,
			// Complete trees 0, 3, 4: 100, 50, 70 s; 5, 1, 2 calls.
			SessionP50S: 70, SessionP95S: 100, CallsPerSessionP50: 2,
			// 13 OK calls of 100 tokens in 10 minutes.
			OutputTokensPerMin: 130,
			ParentCalls:        10, SubagentCalls: 4,
			// Parent TTFBs 1,1,1,1,2,2,3,3,4; subagents 0.5,0.5,0.5,1.5 (nearest rank).
			ParentTTFBP50S: 2, ParentTTFBP95S: 4, SubagentTTFBP50S: 0.5, SubagentTTFBP95S: 1.5,
			// Parent 3,100 of 9,000 cached; subagents 500 of 2,000; counters 1,500 of 4,000.
			ParentCachedPct: 100 * 3100.0 / 9000, SubagentCachedPct: 25, PrefixHitsPct: 37.5,
			// Stayed: tree 0 parent call 1, s1 call 1, tree 2 parent call 1, tree 4 call 1;
			// moved: tree 0 parent call 2 (r1), bg call 1 (r2).
			StayedCalls: 4, MovedCalls: 2, StayedPct: 100 * 4.0 / 6,
			// Trees live 100 + 20 + 500 (tree 2 until the stop) + 50 + 70 s;
			// calls 813 s recorded + 20 s in flight at the stop.
			LiveTreesMean: 740.0 / 600, LiveCallsMean: 833.0 / 600,
			SkippedOverLength: 1, NotSent: 2, FailedCalls: 1, InFlightAtStop: 1,
		}},
		{"on", &aggs[1], AgentSummary{
			// Every play ended: tree 1, whose last call was skipped, is complete.
			Trees: 2, SessionsCompleted: 2, SessionP50S: 50, SessionP95S: 60, CallsPerSessionP50: 1,
			OutputTokensPerMin: 100, ParentCalls: 3, SubagentCalls: 2,
			ParentTTFBP50S: 0.5, ParentTTFBP95S: 0.5, SubagentTTFBP50S: 0.25, SubagentTTFBP95S: 0.25,
			ParentCachedPct: 30, SubagentCachedPct: 40, PrefixHitsPct: nan,
			StayedCalls: 2, StayedPct: 100, LiveTreesMean: 110.0 / 300, LiveCallsMean: 101.0 / 300,
			SkippedOverLength: 1,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, w := tc.a, tc.want
			ints := []struct {
				name      string
				got, want int
			}{
				{"trees", a.Trees, w.Trees}, {"sessions completed", a.SessionsCompleted, w.SessionsCompleted},
				{"sessions cut", a.SessionsCut, w.SessionsCut}, {"cut by failure", a.CutByFailure, w.CutByFailure},
				{"cut at stop", a.CutAtStop, w.CutAtStop}, {"parent calls", a.ParentCalls, w.ParentCalls},
				{"subagent calls", a.SubagentCalls, w.SubagentCalls}, {"stayed", a.StayedCalls, w.StayedCalls},
				{"moved", a.MovedCalls, w.MovedCalls}, {"skipped", a.SkippedOverLength, w.SkippedOverLength},
				{"not sent", a.NotSent, w.NotSent}, {"failed", a.FailedCalls, w.FailedCalls},
				{"in flight at the stop", a.InFlightAtStop, w.InFlightAtStop},
			}
			for _, c := range ints {
				if c.got != c.want {
					t.Errorf("%s %d, want %d", c.name, c.got, c.want)
				}
			}
			floats := []struct {
				name      string
				got, want float64
			}{
				{"session p50", a.SessionP50S, w.SessionP50S}, {"session p95", a.SessionP95S, w.SessionP95S},
				{"calls per session p50", a.CallsPerSessionP50, w.CallsPerSessionP50},
				{"out tok/min", a.OutputTokensPerMin, w.OutputTokensPerMin},
				{"parent TTFB p50", a.ParentTTFBP50S, w.ParentTTFBP50S}, {"parent TTFB p95", a.ParentTTFBP95S, w.ParentTTFBP95S},
				{"subagent TTFB p50", a.SubagentTTFBP50S, w.SubagentTTFBP50S}, {"subagent TTFB p95", a.SubagentTTFBP95S, w.SubagentTTFBP95S},
				{"parent cached", a.ParentCachedPct, w.ParentCachedPct}, {"subagent cached", a.SubagentCachedPct, w.SubagentCachedPct},
				{"prefix hits", a.PrefixHitsPct, w.PrefixHitsPct}, {"stayed %", a.StayedPct, w.StayedPct},
				{"live trees", a.LiveTreesMean, w.LiveTreesMean}, {"live calls", a.LiveCallsMean, w.LiveCallsMean},
			}
			for _, c := range floats {
				if math.IsNaN(c.want) != math.IsNaN(c.got) || (!math.IsNaN(c.want) && !near(c.got, c.want)) {
					t.Errorf("%s %v, want %v", c.name, c.got, c.want)
				}
			}
			if len(a.Notes) != 0 {
				t.Errorf("notes %q; the trees cut at the stop match the manifest's plays not ended", a.Notes)
			}
		})
	}
}

// trees.csv: one row per tree per variant, as worked out in agentRun.
func TestTreesCSV(t *testing.T) {
	dir := t.TempDir()
	m, results, series := agentRun()
	writeRunDir(t, dir, m, results, series)
	if err := Generate(dir, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, TreesCSVFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != strings.Join(TreesCSVColumns, ",") {
		t.Fatalf("header %v", recs[0])
	}
	// variant, tree, file, round, calls, parent_calls, subagents, first_sent_s,
	// last_done_s, duration_s, complete, cut, failed_calls, parent_ttfb_p50_s, cached_pct
	want := [][]string{
		{"off", "0", "a", "0", "5", "3", "1", "0", "100", "100", "true", "", "0", "2", "52.5"},      // 2,100 / 4,000 cached
		{"off", "1", "b", "0", "2", "2", "0", "5", "25", "20", "false", "failure", "1", "1", "0"},   // the failed call is in no TTFB or share
		{"off", "2", "c", "0", "4", "2", "1", "100", "580", "480", "false", "stop", "0", "3", "20"}, // 600 / 3,000
		{"off", "3", "d", "0", "1", "1", "0", "300", "350", "50", "true", "", "0", "2", "0"},
		{"off", "4", "a", "1", "2", "2", "0", "400", "470", "70", "true", "", "0", "1", "45"},
		{"on", "0", "a", "0", "4", "2", "1", "0", "60", "60", "true", "", "0", "0.5", "43.3333"}, // 1,300 / 3,000
		{"on", "1", "b", "0", "1", "1", "0", "100", "150", "50", "true", "", "0", "0.5", "0"},
	}
	if len(recs)-1 != len(want) {
		t.Fatalf("%d rows, want %d:\n%v", len(recs)-1, len(want), recs)
	}
	numeric := map[int]bool{7: true, 8: true, 9: true, 13: true, 14: true}
	for i, w := range want {
		got := recs[i+1]
		for k := range w {
			if numeric[k] {
				g, err1 := strconv.ParseFloat(got[k], 64)
				x, _ := strconv.ParseFloat(w[k], 64)
				if err1 != nil || (x == 0 && g != 0) || (x != 0 && !near(g, x)) {
					t.Errorf("row %d %s = %q, want %s", i, TreesCSVColumns[k], got[k], w[k])
				}
				continue
			}
			if got[k] != w[k] {
				t.Errorf("row %d %s = %q, want %q", i, TreesCSVColumns[k], got[k], w[k])
			}
		}
	}
}

// summary.md and the terminal table put the whole-run table of trees first,
// then the per-window table, whose first column is the window in minutes
// since each variant's start and whose trees-started column pairs the
// variants by index; no closed-loop note; the CDF figure is drawn in both
// variants' colours.
func TestAgentReportLayout(t *testing.T) {
	dir := t.TempDir()
	m, results, series := agentRun()
	writeRunDir(t, dir, m, results, series)
	var out bytes.Buffer
	if err := Generate(dir, &out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, SummaryMDFile))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	first := strings.Index(md, "\n## ")
	if first < 0 || !strings.HasPrefix(md[first:], "\n## Agent sessions, whole run, off -> on") {
		t.Errorf("summary.md's first section is not the agents' table:\n%s", md)
	}
	for _, want := range []string{
		"| sessions done (complete trees) | 3 -> 2 |",
		"| sessions cut | 2 -> 0 |",
		"| session time p50 (s) | 70.0 -> 50.0 |",
		"| calls done, subagent | 4 -> 2 |",
		"| prefix hits % (counters) | 37.5 -> n/a |",
		"| calls in flight at the stop | 1 -> 0 |",
		"| window (min) | trees started | sessions/h |",
		"| 0-5 | 3 -> 2 |",
		"| 5-10 | 2 -> n/a |",
		"the engines' counters do not say which request a hit belongs to",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "the loop can hold") || strings.Contains(md, "## By turn index") {
		t.Errorf("summary.md of an agent replay has a closed-loop note or the by-turn table:\n%s", md)
	}
	table := out.String()
	whole, window := strings.Index(table, "whole run"), strings.Index(table, "window (min)")
	if whole < 0 || window < whole || !strings.Contains(table, "100.0 -> 60.0") {
		t.Errorf("terminal output lacks the whole-run table before the window table:\n%s", table)
	}
	img := decodePNG(t, filepath.Join(dir, SessionTimeFigureFile))
	if bnd := img.Bounds(); bnd.Dx() != 768 || bnd.Dy() != 480 {
		t.Errorf("%s is %v", SessionTimeFigureFile, bnd)
	}
	if _, found := colourStats(img, colourOff, colourOn); !found[0] || !found[1] {
		t.Errorf("%s lacks a variant's colour (off %v, on %v)", SessionTimeFigureFile, found[0], found[1])
	}
}

// A run that is not an agent replay gets no trees.csv and no session figure.
func TestNoTreeFilesWithoutAgents(t *testing.T) {
	dir, table := generated(t)
	for _, f := range []string{TreesCSVFile, SessionTimeFigureFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s written for a closed-loop run (stat: %v)", f, err)
		}
	}
	if strings.Contains(table, "whole run") {
		t.Errorf("closed-loop table has the agents' table:\n%s", table)
	}
}
