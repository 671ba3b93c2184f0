package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/lmwarden/warden/loadgen"
)

// Output files written by Generate into the results directory.
const (
	ResultsCSVFile  = "results.csv"
	ResultsJSONFile = "results.json"
	SummaryMDFile   = "summary.md"
)

// CSVColumns is the header of results.csv: one row per variant and stage, in
// manifest order. Units are in the names; a value that could not be computed is an
// empty cell. Definitions are those of the Summary fields:
//
//	variant                     variant name ("off", "on", ...)
//	sessions                    concurrent sessions held in the stage
//	sessions_per_h              sessions whose last turn was done OK in the window, per hour
//	output_tokens_per_min       server-counted output tokens of OK turns, per minute
//	ttfb_p50_s, ttfb_p95_s      client-side TTFB quantiles, seconds
//	replicas_busy               mean replicas with running > 0 per poll
//	prefix_hits_pct             100 * delta(prefix_cache_hits) / delta(prefix_cache_queries), all replicas
//	stayed_pct                  later turns served by the session's first replica, percent
//	usage_cached_pct            100 * sum(cached_tokens) / sum(prompt_tokens) from per-request usage
//	turns_ok, turns_failed      turns done in the window
//	prompt_tokens_mean          mean server-counted prompt tokens of OK turns
//	nominal_prompt_tokens_mean  mean generator (nominal) prompt tokens of the same turns
//	complete                    true if the stage ran to its end (false: cut short by Ctrl-C)
//	send_lag_p50_s, _p99_s      how late the harness sent turns after the closed loop wanted them, seconds
//	side_requests_ok, _failed   side requests done in the window (scenario side_requests; 0 without)
//	side_on_home_pct            share of the OK side requests served by their session's first replica
//	turns_no_output             OK turns that streamed no token (no TTFB; still in turns_ok and sessions_per_h)
//	turns_in_flight_mean        achieved concurrency, client side: time-average of turns in flight (Concurrency)
//	concurrency_pct             100 * turns_in_flight_mean / the level the closed loop can hold
//	engine_requests_mean        achieved concurrency, server side: running + waiting summed over replicas, mean per poll
//	held_turns, hold_p50_s, _p95_s  turns the router's admission gate held, and their hold, seconds
//	computed_cached_pct         100 * (P - delta prompt_computed_tokens) / P, P the usage prompt tokens of the turns whose first token fell in the window
//	conversation_p50_s, _p95_s  conversation completion time (first send to last turn's end), seconds
var CSVColumns = columnNames(filterColumns(func(*column) bool { return true }))

// csvFloat formats v with 4 decimals, or "" for NaN.
func csvFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// ResultsCSV renders sums as results.csv (see CSVColumns).
func ResultsCSV(sums []Summary) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(CSVColumns); err != nil {
		return nil, fmt.Errorf("encoding results.csv: %w", err)
	}
	for _, s := range sums {
		rec := make([]string, len(columns))
		for i := range columns {
			rec[i] = columns[i].csvCell(&s)
		}
		if err := w.Write(rec); err != nil {
			return nil, fmt.Errorf("encoding results.csv: %w", err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("encoding results.csv: %w", err)
	}
	return buf.Bytes(), nil
}

// StageDeltas holds the base -> candidate deltas of one stage.
type StageDeltas struct {
	Stage    int     `json:"stage"`
	Sessions int     `json:"sessions"`
	Base     string  `json:"base_variant"`
	Variant  string  `json:"variant"`
	Deltas   []Delta `json:"deltas"` // one per name in Metrics
}

// resultsJSON is the shape of results.json.
type resultsJSON struct {
	RunID     string        `json:"run_id"`
	Scenario  string        `json:"scenario"`
	Summaries []Summary     `json:"summaries"`
	Deltas    []StageDeltas `json:"deltas"` // off -> on per stage, when both exist
}

// ResultsJSON renders results.json: {"run_id", "scenario", "summaries": [Summary...],
// "deltas": [StageDeltas...]}, with NaN as null.
func ResultsJSON(m *loadgen.Manifest, sums []Summary) ([]byte, error) {
	out := resultsJSON{RunID: m.RunID, Summaries: sums, Deltas: []StageDeltas{}}
	if m.Scenario != nil {
		out.Scenario = m.Scenario.Name
	}
	if out.Summaries == nil {
		out.Summaries = []Summary{}
	}
	out.Deltas = pairDeltas(m, sums)
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding results.json: %w", err)
	}
	return append(b, '\n'), nil
}

// pairVariants returns the variants the reference table compares: the first with
// affinity off as base and the first with affinity on as candidate. When one kind
// is missing, it returns the first variant alone.
func pairVariants(m *loadgen.Manifest) []string {
	off := slices.IndexFunc(m.Variants, func(v loadgen.Variant) bool { return !v.Affinity })
	on := slices.IndexFunc(m.Variants, func(v loadgen.Variant) bool { return v.Affinity })
	switch {
	case off >= 0 && on >= 0:
		return []string{m.Variants[off].Name, m.Variants[on].Name}
	case len(m.Variants) > 0:
		return []string{m.Variants[0].Name}
	}
	return nil
}

// stageRow is one row of the reference table: a stage and the summary of each
// compared variant at that stage (nil where a variant lacks the stage).
type stageRow struct {
	stage    int
	sessions int
	cells    []*Summary
}

// stageRows lines up the stages of variants by index (and concurrency level).
func stageRows(variants []string, sums []Summary) []stageRow {
	return stageRowsBy(variants, sums, false)
}

// stageRowsBy is stageRows; with byIndex the stages pair by index alone (report
// windows, whose sessions are the trees started in them: stageKeys).
func stageRowsBy(variants []string, sums []Summary, byIndex bool) []stageRow {
	find := func(variant string, stage int) *Summary {
		for i := range sums {
			if sums[i].Variant == variant && sums[i].Stage == stage {
				return &sums[i]
			}
		}
		return nil
	}
	var rows []stageRow
	for stage := 0; ; stage++ {
		row := stageRow{stage: stage, sessions: -1, cells: make([]*Summary, len(variants))}
		found := false
		for i, v := range variants {
			s := find(v, stage)
			if s == nil || (!byIndex && row.sessions >= 0 && s.Sessions != row.sessions) {
				continue
			}
			row.sessions = s.Sessions
			row.cells[i] = s
			found = true
		}
		if !found {
			return rows
		}
		rows = append(rows, row)
	}
}

func pairDeltas(m *loadgen.Manifest, sums []Summary) []StageDeltas {
	out := []StageDeltas{}
	vs := pairVariants(m)
	if len(vs) != 2 {
		return out
	}
	for _, row := range keysOf(m).rows(vs, sums) {
		if row.cells[0] == nil || row.cells[1] == nil {
			continue
		}
		sd := StageDeltas{Stage: row.stage, Sessions: row.sessions, Base: vs[0], Variant: vs[1]}
		for _, name := range Metrics {
			d, _ := NewDelta(name, row.cells[0], row.cells[1]) // names from Metrics are known
			sd.Deltas = append(sd.Deltas, d)
		}
		out = append(out, sd)
	}
	return out
}

// Display formatting: "n/a" for NaN.
func fmtPrec(prec int) func(float64) string {
	return func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "n/a"
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
}

// fmtThousands rounds v to an integer and groups digits by three: 5886.4 -> "5,886".
func fmtThousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	s := strconv.FormatFloat(math.Abs(math.Round(v)), 'f', 0, 64)
	var b strings.Builder
	if math.Round(v) < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// beyondNoise lists, stage by stage, the base -> candidate changes whose 95 %
// interval excludes 0 (only the metrics with a noise estimate: output tokens/min
// and TTFB), as relative changes: "Beyond noise, off -> on: 8 sessions: out
// tok/min +47.8 %, TTFB p50 -91.2 %; 16 sessions: none." It states what the
// data say, stage by stage; the table has the values.
func beyondNoise(pair []string, sums []Summary) string {
	return beyondNoiseBy(stageKeys{}, pair, sums)
}

// beyondNoiseBy is beyondNoise with the stages named and paired by keys.
func beyondNoiseBy(keys stageKeys, pair []string, sums []Summary) string {
	var parts []string
	for _, r := range keys.rows(pair, sums) {
		if len(r.cells) != 2 || r.cells[0] == nil || r.cells[1] == nil {
			continue
		}
		var changes []string
		for _, c := range metricColumns {
			if !c.hasNoise() {
				continue
			}
			if d, err := NewDelta(c.name, r.cells[0], r.cells[1]); err == nil && d.Noise == BeyondNoise && !math.IsNaN(d.RelPct) {
				changes = append(changes, fmt.Sprintf("%s %+.1f %%", strings.TrimSuffix(c.header, " (s)"), d.RelPct))
			}
		}
		if len(changes) == 0 {
			changes = []string{"none"}
		}
		parts = append(parts, fmt.Sprintf("%s: %s", keys.rowLabel(r), strings.Join(changes, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("**Beyond noise, %s -> %s** (out tok/min and TTFB, the columns with a noise estimate; relative change): %s.",
		pair[0], pair[1], strings.Join(parts, "; "))
}

// noiseMark is appended to a cell whose base -> candidate difference is within
// noise; unknownNoiseMark to a cell of a metric that normally has a noise
// estimate (output tokens/min, TTFB) when this stage has none (under two
// sub-windows), so an unmarked difference there is not read as significant.
const (
	noiseMark        = " *"
	unknownNoiseMark = " ?"
)

// referenceTable returns the header and rows of the reference-style table: one row
// per stage, each cell "base -> candidate".
func referenceTable(variants []string, sums []Summary) (header []string, rows [][]string) {
	return referenceTableBy(stageKeys{}, variants, sums)
}

// referenceTableBy is referenceTable with the stages named and paired by keys.
func referenceTableBy(keys stageKeys, variants []string, sums []Summary) (header []string, rows [][]string) {
	header = keys.header()
	for _, c := range metricColumns {
		header = append(header, c.header)
	}
	for _, r := range keys.rows(variants, sums) {
		row := keys.rowCells(r)
		for _, s := range r.cells {
			if s != nil && !s.Complete {
				row[0] += " (partial)" // cut short by Ctrl-C: the window ends at the stop
				break
			}
		}
		for _, c := range metricColumns {
			parts := make([]string, len(r.cells))
			for i, s := range r.cells {
				parts[i] = "n/a"
				if s != nil {
					v, _ := c.metric(s)
					parts[i] = c.format(v)
				}
			}
			cell := strings.Join(parts, " -> ")
			if len(r.cells) == 2 && r.cells[0] != nil && r.cells[1] != nil {
				switch d, _ := NewDelta(c.name, r.cells[0], r.cells[1]); {
				case d.Noise == WithinNoise:
					cell += noiseMark
				case d.Noise == NoiseUnknown && c.hasNoise():
					cell += unknownNoiseMark
				}
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	return header, rows
}

func mdRow(cells []string) string {
	esc := make([]string, len(cells))
	for i, c := range cells {
		esc[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return "| " + strings.Join(esc, " | ") + " |\n"
}

func mdTable(b *strings.Builder, header []string, rows [][]string) {
	b.WriteString(mdRow(header))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	b.WriteString(mdRow(sep))
	for _, r := range rows {
		b.WriteString(mdRow(r))
	}
}

func intList(stages []int) string {
	s := make([]string, len(stages))
	for i, n := range stages {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// SummaryMarkdown renders summary.md: run description, for an agent-session
// replay the whole-run table of agents (SummarizeAgents; nil otherwise), the
// reference-style table (one row per stage, cells "off -> on"), a per-variant
// table with turns, prompt sizes and accounting, the side requests (when any),
// the by-turn-index table (one row per stage and turn index, cells "off -> on";
// Summary.ByTurn; for an agent replay only in turns_by_index.csv), notes, and
// links to the figures named in figures. One function per section, in that
// order.
func SummaryMarkdown(m *loadgen.Manifest, sums []Summary, agents []AgentSummary, figures []Figure) []byte {
	var b strings.Builder
	pair := pairVariants(m)
	keys := keysOf(m)
	mdRunHeader(&b, m)
	mdAgentSection(&b, m, pair, agents)
	mdStageSection(&b, keys, pair, sums)
	mdVariantSection(&b, keys, sums)
	mdHeldSection(&b, keys, sums)
	traceSection(&b, m, sums)
	goodputSection(&b, m, keys, sums)
	mdSideSection(&b, sums)
	if keys.agent {
		fmt.Fprintf(&b, "\n## By call index\n\nBy 0-based call index within each agent conversation, per report window: `%s`.\n", TurnsByIndexCSVFile)
	} else {
		mdTurnsSection(&b, pair, sums)
	}
	mdFailuresSection(&b, keys, sums)
	mdNotesSection(&b, keys, sums)
	mdFiguresSection(&b, figures)
	return []byte(b.String())
}

// mdRunHeader writes the run description: scenario, target, replicas, variants, versions, notes.
func mdRunHeader(b *strings.Builder, m *loadgen.Manifest) {
	fmt.Fprintf(b, "# Benchmark run %s\n\n", m.RunID)
	mdScenarioLines(b, m)
	if m.Speed > 0 {
		fmt.Fprintf(b, "- mode: %s; target: %s; speed: %g simulated s per wall s\n", m.Mode, m.Target, m.Speed)
	} else {
		fmt.Fprintf(b, "- mode: %s; target: %s\n", m.Mode, m.Target)
	}
	fmt.Fprintf(b, "- replicas: %d (%s)", len(m.Replicas), strings.Join(m.Replicas, ", "))
	if m.Profile != "" {
		fmt.Fprintf(b, "; simulator profile: %s", m.Profile)
	}
	fmt.Fprintf(b, "; policy with affinity on: %s\n", m.Policy)
	if m.Admission.On() {
		// Off is the default and says nothing: the header of an off run stays as it was.
		fmt.Fprintf(b, "- admission with affinity on: %s\n", m.Admission)
	}
	var vs []string
	for _, v := range m.Variants {
		aff := "off"
		if v.Affinity {
			aff = "on"
		}
		vs = append(vs, fmt.Sprintf("%s (affinity %s)", v.Name, aff))
	}
	fmt.Fprintf(b, "- variants, in run order: %s\n", strings.Join(vs, ", "))
	if !m.Created.IsZero() {
		fmt.Fprintf(b, "- created: %s\n", m.Created.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if len(m.Versions) > 0 {
		fmt.Fprintf(b, "- versions: %s\n", versionList(m.Versions))
	}
	if m.Interrupted {
		b.WriteString("- **interrupted**: the run stopped early; incomplete stages are marked in the notes\n")
	}
	if st := m.Stopped; st != nil {
		fmt.Fprintf(b, "- **stopped**: %s (rule: %s)\n", st.Reason, st.Rule)
	}
	for _, n := range m.Notes {
		fmt.Fprintf(b, "- note: %s\n", n)
	}
	for _, n := range MissingColumns(m) {
		fmt.Fprintf(b, "- missing: %s\n", n)
	}
}

// mdScenarioLines writes the scenario's lines of the run description (none without a scenario).
func mdScenarioLines(b *strings.Builder, m *loadgen.Manifest) {
	sc := m.Scenario
	if sc == nil {
		return
	}
	if t := sc.Trace; t != nil && len(m.AgentTraces) > 0 {
		// Session trees: no mode, no recorded window.
		fmt.Fprintf(b, "- trace: `%s`, seed %d\n", t.File, m.Seed)
		b.WriteString(agentScenarioLine(m))
		if sc.API != "" || sc.SessionHeader != "" {
			fmt.Fprintf(b, "- API: %s; session id: %s\n", sc.API, sc.SessionHeader)
		}
		return
	}
	if t := sc.Trace; t != nil {
		// The trace replaces the scenario's sessions: its stages and sizes are unused.
		fmt.Fprintf(b, "- trace: `%s`, seed %d; mode %s, %s\n", t.File, m.Seed, t.WithDefaults().Mode, traceWindow(t.From, t.To))
		if sc.API != "" || sc.SessionHeader != "" {
			fmt.Fprintf(b, "- API: %s; session id: %s\n", sc.API, sc.SessionHeader)
		}
		return
	}
	if sc.Shape == loadgen.ShapeAgent && len(m.AgentTraces) > 0 {
		// Synthesized trees: no chain prompts, turns or think time.
		fmt.Fprintf(b, "- scenario: `%s`, seed %d; shape agent (synthesized session trees), stages %s live trees, %s each, warm-up %s\n",
			sc.Name, m.Seed, intList(sc.Stages), sc.StageDuration, sc.Warmup)
		b.WriteString(agentScenarioLine(m))
		if sc.API != "" || sc.SessionHeader != "" {
			fmt.Fprintf(b, "- API: %s; session id: %s\n", sc.API, sc.SessionHeader)
		}
		return
	}
	think := sc.ThinkTime.String()
	if r := sc.ThinkSpread; !r.IsFixed() {
		think = fmt.Sprintf("%s to %s (uniform)", r.Min, r.Max)
	}
	fmt.Fprintf(b, "- scenario: `%s`, seed %d; stages %s sessions, %s each, warm-up %s; think time %s\n",
		sc.Name, m.Seed, intList(sc.Stages), sc.StageDuration, sc.Warmup, think)
	fmt.Fprintf(b, "- prompts (nominal tokens): system %d, first turn %d, later turns %d, %d turns, max output %d\n",
		sc.SystemPromptTokens, sc.FirstTurnTokens, sc.TurnTokens, sc.Turns, sc.MaxOutputTokens)
	if sc.API != "" || sc.SessionHeader != "" {
		fmt.Fprintf(b, "- API: %s; session id: %s\n", sc.API, sc.SessionHeader)
	}
	if sr := sc.SideRequests; sr != nil {
		fmt.Fprintf(b, "- side requests beside turns %s (0-based): prompt %d, max output %d\n",
			intList(sr.Turns), sr.PromptTokens, sr.MaxOutputTokens)
	}
}

// versionList renders versions as "k v, k v" in key order.
func versionList(versions map[string]string) string {
	keys := make([]string, 0, len(versions))
	for k := range versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	kv := make([]string, len(keys))
	for i, k := range keys {
		kv[i] = k + " " + versions[k]
	}
	return strings.Join(kv, ", ")
}

// mdStageSection writes the reference-style table, one row per stage, cells "off -> on", and its legend.
func mdStageSection(b *strings.Builder, keys stageKeys, pair []string, sums []Summary) {
	if keys.windows {
		fmt.Fprintf(b, "\n## Per report window, %s\n\n", strings.Join(pair, " -> "))
	} else {
		fmt.Fprintf(b, "\n## Per stage, %s\n\n", strings.Join(pair, " -> "))
	}
	header, rows := referenceTableBy(keys, pair, sums)
	mdTable(b, header, rows)
	b.WriteString("\n")
	switch {
	case keys.agent:
		b.WriteString(windowLegend + "\n\n")
	case keys.windows:
		b.WriteString(traceWindowLegend + "\n\n")
	}
	if line := beyondNoiseBy(keys, pair, sums); len(pair) == 2 && line != "" {
		fmt.Fprintf(b, "%s\n\n", line)
	}
	if len(pair) == 2 {
		fmt.Fprintf(b, "`*` within noise: the 95 %% interval of the %s -> %s difference contains 0 "+
			"(normal approximation from %s sub-windows; only out tok/min and TTFB have one); "+
			"`?` no noise estimate (stage shorter than two sub-windows): the difference may be noise. ", pair[0], pair[1], SubWindow)
	}
	b.WriteString("`n/a`: could not be computed (see notes); never read as 0. " +
		"Prefix hits: vLLM counter deltas over the window, all replicas. " +
		"Usage cached: the same ratio from per-request usage (cached_tokens / prompt_tokens). " +
		"Conv: conversation completion time of the sessions done in the window, first send to last turn's end (holds and think time included).\n")
}

// windowLegend says what the per-window table of an agent replay shows.
const windowLegend = "Window: minutes since the variant's start (each variant starts its own windows); " +
	"trees started: session trees whose play started in the window; sessions/h: n/a (session trees are in the whole-run table); " +
	"conv: per agent conversation (the parent, or one subagent), not per tree."

// traceWindowLegend says what the per-window table of a request trace's
// replay shows.
const traceWindowLegend = "Window: minutes since the variant's start (each variant starts its own windows, so the same " +
	"trace minute has the same label in both); conversations started: trace conversations whose first request was sent in the " +
	"window (an open loop: the trace's arrivals, not a level held); sessions/h and conv: n/a (a trace marks no conversation's last turn); (drain): no conversation started in the " +
	"window, which holds the tail of the last ones (few turns: read its figures with care)."

// mdVariantSection writes the per-variant table: turns, prompt sizes, send lag, concurrency and accounting.
func mdVariantSection(b *strings.Builder, keys stageKeys, sums []Summary) {
	done := "sessions done"
	switch {
	case keys.agent:
		b.WriteString("\n## Per variant and report window\n\n")
		done = "agent conversations done"
	case keys.windows:
		b.WriteString("\n## Per variant and report window\n\n")
		done = "conversations done"
	default:
		b.WriteString("\n## Per variant and stage\n\n")
	}
	vh := append(append([]string{"variant"}, keys.header()...), "window (s)", done, "turns ok", "turns failed",
		"prompt tokens per turn, mean (server)", "prompt tokens per turn, mean (nominal)", "send lag p50 / p99 (ms)", "turns in flight, mean: client (% of target) / engines", "carried in + started = completed + failed + in flight")
	var vrows [][]string
	for _, s := range sums {
		a := s.Accounting
		acc := fmt.Sprintf("%d + %d = %d + %d + %d", a.CarriedIn, a.Started, a.Completed, a.Failed, a.InFlight)
		if !a.Balanced {
			acc = fmt.Sprintf("**%d + %d != %d + %d + %d**", a.CarriedIn, a.Started, a.Completed, a.Failed, a.InFlight)
		}
		vrows = append(vrows, append(append([]string{s.Variant}, keys.cells(&s)...),
			fmtPrec(0)(s.WindowSeconds()), sessionsDone(keys, &s),
			strconv.Itoa(s.TurnsOK), strconv.Itoa(s.TurnsFailed),
			fmtThousands(s.PromptTokensMean), fmtThousands(s.NominalPromptTokensMean),
			fmtPrec(1)(1000*s.SendLagP50S)+" / "+fmtPrec(1)(1000*s.SendLagP99S),
			fmtPrec(2)(s.Concurrency.TurnsInFlightMean)+" ("+fmtPrec(0)(s.Concurrency.Pct)+" %) / "+fmtPrec(2)(s.Concurrency.EngineRequestsMean), acc,
		))
	}
	mdTable(b, vh, vrows)
	if keys.windows && !keys.agent {
		b.WriteString("\nAccounting: carried in = turns in flight at the window's start, started = turns sent in the window; " +
			"completed and failed by their end instant. Turns in flight: client side the time-average over the window of the " +
			"turns sent and not done (turns.jsonl), no target (an open loop holds no level); engines: running + waiting summed " +
			"over replicas, mean per poll. Send lag: how late the harness sent requests after the trace's instants (sent - intended).\n")
		return
	}
	b.WriteString("\nAccounting: carried in = turns in flight at the window's start (the previous stage's in flight), " +
		"started = turns sent in the window; completed and failed by their end instant. ")
	b.WriteString("Turns in flight: client side the time-average over the window of the turns sent and not done (turns.jsonl), " +
		"as a share of what the closed loop can hold (sessions x turn / (turn + think time)), a note when under " +
		strconv.FormatFloat(loadgen.MinConcurrencyPct, 'f', 0, 64) + " %; engines: running + waiting summed over replicas, mean per poll. ")
	b.WriteString("Send lag: how late the harness sent turns after the closed loop wanted them (sent - intended); " +
		"a closed loop measures the latency of the sessions it holds, not of an arrival rate: when the server slows, sessions send less often.\n")
}

// sessionsDone is the "done" cell of s: n/a for a request trace (no
// conversation is marked ended).
func sessionsDone(keys stageKeys, s *Summary) string {
	if keys.windows && !keys.agent {
		return "n/a"
	}
	return strconv.Itoa(s.SessionsCompleted)
}

// mdHeldSection writes the turns the admission gate held, when any.
func mdHeldSection(b *strings.Builder, keys stageKeys, sums []Summary) {
	var heldRows [][]string
	for _, s := range sums {
		if s.HeldTurns > 0 {
			heldRows = append(heldRows, append(append([]string{s.Variant}, keys.cells(&s)...), strconv.Itoa(s.HeldTurns),
				strconv.Itoa(s.TurnsOK+s.TurnsFailed), fmtPrec(2)(s.HoldP50S), fmtPrec(2)(s.HoldP95S), fmtPrec(2)(s.HoldMaxS)))
		}
	}
	if len(heldRows) > 0 {
		b.WriteString("\n## Held at the router\n\nTurns the router's admission gate held before sending them upstream " +
			"(new conversations waiting for a replica with room for their working set); the hold is part of their TTFB.\n\n")
		mdTable(b, append(append([]string{"variant"}, keys.header()...), "held turns", "turns", "hold p50 (s)", "hold p95 (s)", "hold max (s)"), heldRows)
	}
}

// mdSideSection writes the side requests, when any.
func mdSideSection(b *strings.Builder, sums []Summary) {
	var side [][]string
	for _, s := range sums {
		if s.SideOK+s.SideFailed > 0 {
			side = append(side, []string{s.Variant, strconv.Itoa(s.Sessions), strconv.Itoa(s.SideOK), strconv.Itoa(s.SideFailed), fmtPrec(1)(s.SideOnHomePct)})
		}
	}
	if len(side) > 0 {
		b.WriteString("\n## Side requests\n\nShort requests sent beside turns with the session's id (scenario `side_requests`); not counted as turns. " +
			"On home: share served by the replica of the session's first turn.\n\n")
		mdTable(b, []string{"variant", "sessions", "ok", "failed", "on home %"}, side)
	}
}

// mdTurnsSection writes the by-turn-index table (Summary.ByTurn), when it has rows.
func mdTurnsSection(b *strings.Builder, pair []string, sums []Summary) {
	if header, rows := turnsTable(pair, sums); len(rows) > 0 {
		fmt.Fprintf(b, "\n## By turn index, %s\n\n", strings.Join(pair, " -> "))
		b.WriteString("Turns done in each stage's window, by 0-based turn index within the session " +
			"(every turn re-sends the whole history); side requests left out. TTFB over OK turns; " +
			"prompt tokens: mean server-counted; usage cached: sum(cached_tokens) / sum(prompt_tokens). " +
			"Per variant, with failed turns and mean cached tokens: `" + TurnsByIndexCSVFile + "`.\n\n")
		mdTable(b, header, rows)
	}
}

// mdNotesSection writes every summary's notes, when any.
func mdNotesSection(b *strings.Builder, keys stageKeys, sums []Summary) {
	var notes []string
	for _, s := range sums {
		for _, n := range s.Notes {
			notes = append(notes, fmt.Sprintf("- %s, %s: %s\n", s.Variant, keys.label(&s), n))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range notes {
			b.WriteString(n)
		}
	}
}

// mdFiguresSection links the figures, when any, each with its note (where
// its data came from, when not the usual source); a figure left out
// (Figure.Omitted) gets a line saying why instead.
func mdFiguresSection(b *strings.Builder, figures []Figure) {
	if len(figures) > 0 {
		b.WriteString("\n## Figures\n\n")
		for _, f := range figures {
			switch {
			case f.Omitted != "":
				fmt.Fprintf(b, "`%s` (%s): %s.\n\n", f.File, f.Title, f.Omitted)
			case f.Note != "":
				fmt.Fprintf(b, "![%s](%s)\n\n%s: %s.\n\n", f.Title, f.File, f.File, f.Note)
			default:
				fmt.Fprintf(b, "![%s](%s)\n\n", f.Title, f.File)
			}
		}
	}
}

// WriteTable prints the reference-style table (one row per stage, cells
// "off -> on") to w as a terminal table; for an agent-session replay, the
// whole-run table of agents (SummarizeAgents; nil otherwise) first.
func WriteTable(w io.Writer, m *loadgen.Manifest, sums []Summary, agents []AgentSummary) error {
	pair := pairVariants(m)
	keys := keysOf(m)
	header, rows := referenceTableBy(keys, pair, sums)
	scenario := ""
	if m.Scenario != nil {
		scenario = " scenario " + m.Scenario.Name + ","
		if t := m.Scenario.Trace; t != nil {
			scenario = " trace " + t.File + ","
		}
	}
	if _, err := fmt.Fprintf(w, "run %s:%s %s\n", m.RunID, scenario, strings.Join(pair, " -> ")); err != nil {
		return fmt.Errorf("printing table: %w", err)
	}
	if len(agents) > 0 {
		ah, ar := agentTable(pair, agents)
		if err := terminalTable(w, ah, ar); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "sessions are trees (parent + subagents); session time and calls over complete trees; cached %%: usage, counters cannot split parent from subagent; per tree: %s\nper report window (minutes since each variant's start):\n", TreesCSVFile); err != nil {
			return fmt.Errorf("printing table: %w", err)
		}
	}
	if err := terminalTable(w, header, rows); err != nil {
		return err
	}
	if len(pair) == 2 && keys.windows && !keys.agent {
		if _, err := fmt.Fprintf(w, "* within noise (95%% interval of the difference contains 0); ? no noise estimate (window under two sub-windows)\n"+
			"conversations started: trace conversations whose first request was sent in the window; sessions/h, conv: n/a for a trace\n"); err != nil {
			return fmt.Errorf("printing table: %w", err)
		}
		return nil
	}
	if len(pair) == 2 && keys.agent {
		if _, err := fmt.Fprintf(w, "* within noise (95%% interval of the difference contains 0); ? no noise estimate (window under two sub-windows)\n"+
			"trees started: session trees started in the window; conv: per agent conversation (parent or one subagent)\n"); err != nil {
			return fmt.Errorf("printing table: %w", err)
		}
		return nil
	}
	if len(pair) == 2 {
		if _, err := fmt.Fprintf(w, "* within noise (95%% interval of the difference contains 0); ? no noise estimate (stage under two sub-windows)\n"+
			"only out tok/min and TTFB carry a noise estimate; sessions/h counts whole sessions (one session = %s in the shortest stage window), so read its changes with care\n",
			sessionStep(sums)); err != nil {
			return fmt.Errorf("printing table: %w", err)
		}
	}
	return nil
}

// terminalTable renders header and rows as a terminal table, cells right-aligned.
func terminalTable(w io.Writer, header []string, rows [][]string) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	t.Header(toAny(header)...)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return fmt.Errorf("printing table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("printing table: %w", err)
	}
	return nil
}

// sessionStep is what one completed session adds to sessions/h in the shortest
// measured window of sums, e.g. "20/h" for 3-minute stages.
func sessionStep(sums []Summary) string {
	shortest := time.Duration(0)
	for _, s := range sums {
		if w := s.WindowEnd - s.WindowStart; w > 0 && (shortest == 0 || w < shortest) {
			shortest = w
		}
	}
	if shortest == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f/h", time.Hour.Seconds()/shortest.Seconds())
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
