package study

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// Files Write puts in the study directory.
const (
	CSVFile      = "study.csv"
	MarkdownFile = "study.md"
	SignalsFile  = "signals.md"
)

// TableMetrics are the columns of the terminal and Markdown tables.
var TableMetrics = []string{"ttfb_p50_s", "ttfb_p95_s", "output_tokens_per_min", "prefix_hits_pct", "usage_cached_pct",
	"bound_hits_pct", "replicas_busy", "live_spread", "preemptions", "fit_ratio"}

var shortTitle = map[string]string{
	"ttfb_p50_s": "p50 s", "ttfb_p95_s": "p95 s", "output_tokens_per_min": "out tok/min",
	"prefix_hits_pct": "hits %", "usage_cached_pct": "usage %", "bound_hits_pct": "bound %",
	"replicas_busy": "busy", "live_spread": "spread", "preemptions": "preempt", "fit_ratio": "ws/KV",
	"stayed_pct": "stayed %", "idle_replicas": "idle",
}

// Write writes the study's files into dir: study.csv (every metric of every row:
// mean, sd, min, max, seeds), study.md (the table per setup and the acceptance
// check), one figure per setup and FigureMetrics entry (fig-<setup>-<metric>.png),
// the traces of Options.TraceSeed, and SignalsFile when Options.Signals.
func Write(dir string, o Options, runs []*RunResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing study: %w", err)
	}
	rows := Aggregate(runs)
	if err := writeFile(filepath.Join(dir, CSVFile), rowsCSV(rows)); err != nil {
		return err
	}
	var md bytes.Buffer
	writeMarkdown(&md, o, rows)
	if err := writeFile(filepath.Join(dir, MarkdownFile), md.Bytes()); err != nil {
		return err
	}
	arms := make([]string, 0, len(o.Arms))
	for _, a := range o.Arms {
		arms = append(arms, a.Name)
	}
	if !o.NoFigures {
		setups := make([]string, 0, len(o.Setups))
		for _, s := range o.Setups {
			setups = append(setups, s.Name)
		}
		if err := writeFigures(dir, setups, arms, rows); err != nil {
			return err
		}
	}
	for _, s := range o.Setups {
		if o.TraceSeed == 0 {
			break
		}
		bin := time.Minute
		if s.Scenario.StageDuration < 5*time.Minute {
			bin = 15 * time.Second
		}
		p, err := hitsOverTimeFigure(s.Name, runs, arms, bin)
		if err != nil {
			return fmt.Errorf("writing study: %w", err)
		}
		if err := savePlot(p, filepath.Join(dir, "hits-over-time-"+s.Name+".png")); err != nil {
			return err
		}
	}
	var sig bytes.Buffer
	for _, r := range runs {
		if r.Trace != nil {
			kv := 0.0
			if len(r.Stages) > 0 && len(r.Trace.Replicas) > 0 {
				kv = r.Stages[0].FleetKVTokens / float64(len(r.Trace.Replicas))
			}
			b, err := traceFigure(fmt.Sprintf("%s, %s, seed %d", r.Setup, r.Arm, r.Seed), r.Trace, kv)
			if err != nil {
				return fmt.Errorf("writing study: drawing trace: %w", err)
			}
			if err := writeFile(tracePath(dir, r.Setup, r.Arm), b); err != nil {
				return err
			}
		}
		if o.Signals && r.Trace != nil && len(r.Placements) > 0 {
			WriteSignals(&sig, r)
		}
	}
	if sig.Len() > 0 {
		if err := writeFile(filepath.Join(dir, SignalsFile), sig.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// writeFigures draws fig-<setup>-<metric>.png for every setup and FigureMetrics
// entry (arms in the given order) and frontier-<setup>.png where the rows have
// the frontier's arms.
func writeFigures(dir string, setups, arms []string, rows []Row) error {
	for _, s := range setups {
		for _, key := range FigureMetrics {
			m, _ := MetricByKey(key)
			p, err := metricFigure(s, m, rows, arms)
			if err != nil {
				return fmt.Errorf("writing study: %w", err)
			}
			if err := savePlot(p, filepath.Join(dir, "fig-"+s+"-"+key+".png")); err != nil {
				return err
			}
		}
	}
	return writeFrontier(dir, setups, rows)
}

// Redraw draws the figures of an existing study directory again from its
// study.csv, running nothing (after a change to how figures are drawn): the
// fig-*.png and frontier-*.png Write would draw, with setups and arms in the
// order the CSV lists them. Traces (trace-*, hits-over-time-*) need the runs and
// are not redrawn. Errors: no or unreadable study.csv (ReadCSV), a failed figure.
func Redraw(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, CSVFile))
	if err != nil {
		return fmt.Errorf("redrawing study: %w", err)
	}
	rows, err := ReadCSV(b)
	if err != nil {
		return fmt.Errorf("redrawing study: %s: %w", filepath.Join(dir, CSVFile), err)
	}
	var setups, arms []string
	for _, r := range rows {
		if !slices.Contains(setups, r.Setup) {
			setups = append(setups, r.Setup)
		}
		if !slices.Contains(arms, r.Arm) {
			arms = append(arms, r.Arm)
		}
	}
	return writeFigures(dir, setups, arms, rows)
}

// ReadCSV reads rows back from a study.csv body (rowsCSV's format: one line per
// row and metric; an empty number is NaN, as written). Rows come in the order
// they first appear. Errors name the line: a wrong header, a short line, a
// number that does not parse.
func ReadCSV(b []byte) ([]Row, error) {
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, err
	}
	header := []string{"setup", "arm", "stage", "sessions", "seeds", "metric", "mean", "sd", "min", "max", "n"}
	if len(recs) == 0 || !slices.Equal(recs[0], header) {
		return nil, fmt.Errorf("line 1: header is not %q", strings.Join(header, ","))
	}
	type key struct {
		setup, arm string
		stage      int
	}
	index := map[key]int{}
	var rows []Row
	for i, rec := range recs[1:] {
		line := i + 2
		num := func(col int) (float64, error) {
			if rec[col] == "" {
				return math.NaN(), nil
			}
			v, err := strconv.ParseFloat(rec[col], 64)
			if err != nil {
				return 0, fmt.Errorf("line %d: %s %q: %w", line, header[col], rec[col], err)
			}
			return v, nil
		}
		var ints [3]int
		for j, col := range []int{2, 3, 4} {
			if ints[j], err = strconv.Atoi(rec[col]); err != nil {
				return nil, fmt.Errorf("line %d: %s %q: %w", line, header[col], rec[col], err)
			}
		}
		n, err := strconv.Atoi(rec[10])
		if err != nil {
			return nil, fmt.Errorf("line %d: n %q: %w", line, rec[10], err)
		}
		var c Cell
		c.N = n
		for j, dst := range []*float64{&c.Mean, &c.SD, &c.Min, &c.Max} {
			if *dst, err = num(6 + j); err != nil {
				return nil, err
			}
		}
		k := key{rec[0], rec[1], ints[0]}
		at, ok := index[k]
		if !ok {
			at = len(rows)
			index[k] = at
			rows = append(rows, Row{Setup: rec[0], Arm: rec[1], Stage: ints[0], Sessions: ints[1], Seeds: ints[2], Cells: map[string]Cell{}})
		}
		rows[at].Cells[rec[5]] = c
	}
	return rows, nil
}

func rowsCSV(rows []Row) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"setup", "arm", "stage", "sessions", "seeds", "metric", "mean", "sd", "min", "max", "n"})
	for _, r := range rows {
		for _, m := range Metrics {
			c := r.Cells[m.Key]
			_ = w.Write([]string{r.Setup, r.Arm, strconv.Itoa(r.Stage), strconv.Itoa(r.Sessions), strconv.Itoa(r.Seeds), m.Key,
				csvNum(c.Mean), csvNum(c.SD), csvNum(c.Min), csvNum(c.Max), strconv.Itoa(c.N)})
		}
	}
	w.Flush()
	return b.Bytes()
}

func csvNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// fmtCell formats a cell as "mean ±sd" with a precision suited to the metric.
func fmtCell(key string, c Cell) string {
	if c.N == 0 || math.IsNaN(c.Mean) {
		return "n/a"
	}
	prec := 1
	switch key {
	case "ttfb_p50_s", "ttfb_p95_s", "replicas_busy", "live_spread", "fit_ratio", "idle_replicas":
		prec = 2
	case "output_tokens_per_min", "preemptions":
		prec = 0
	}
	s := strconv.FormatFloat(c.Mean, 'f', prec, 64)
	if c.N > 1 {
		s += " ±" + strconv.FormatFloat(c.SD, 'f', prec, 64)
	}
	return s
}

func tableOf(rows []Row, setup string) ([]string, [][]string) {
	header := []string{"sessions", "arm"}
	for _, k := range TableMetrics {
		header = append(header, shortTitle[k])
	}
	var out [][]string
	for _, r := range rows {
		if r.Setup != setup {
			continue
		}
		line := []string{strconv.Itoa(r.Sessions), r.Arm}
		for _, k := range TableMetrics {
			line = append(line, fmtCell(k, r.Cells[k]))
		}
		out = append(out, line)
	}
	return header, out
}

// WriteTable prints one terminal table per setup (mean ±sd across seeds).
func WriteTable(w io.Writer, runs []*RunResult) error {
	rows := Aggregate(runs)
	var setups []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Setup] {
			seen[r.Setup] = true
			setups = append(setups, r.Setup)
		}
	}
	for _, s := range setups {
		header, lines := tableOf(rows, s)
		fmt.Fprintf(w, "setup %s (mean ±sd over samples: seeds, times stage durations if given)\n", s)
		t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAlignment(tw.AlignRight))
		hdr := make([]any, len(header))
		for i, h := range header {
			hdr[i] = h
		}
		t.Header(hdr...)
		for _, l := range lines {
			if err := t.Append(l); err != nil {
				return fmt.Errorf("printing study table: %w", err)
			}
		}
		if err := t.Render(); err != nil {
			return fmt.Errorf("printing study table: %w", err)
		}
	}
	return nil
}

func writeMarkdown(b *bytes.Buffer, o Options, rows []Row) {
	fmt.Fprintf(b, "# Routing policy study\n\n")
	seeds := make([]string, len(o.Seeds))
	for i, s := range o.Seeds {
		seeds[i] = strconv.FormatUint(s, 10)
	}
	samples := fmt.Sprintf("seeds %s; cells are mean ±sd across seeds", strings.Join(seeds, ", "))
	if len(o.StageDurations) > 0 {
		durs := make([]string, len(o.StageDurations))
		for i, d := range o.StageDurations {
			durs[i] = d.String()
		}
		samples = fmt.Sprintf("seeds %s, each with stage durations %s (%d samples per cell: the window's phase varies "+
			"with the duration); cells are mean ±sd across samples", strings.Join(seeds, ", "), strings.Join(durs, ", "),
			len(o.Seeds)*len(o.StageDurations))
	}
	fmt.Fprintf(b, "Virtual time, %s. Columns: TTFB p50/p95 (s, client side), "+
		"output tokens/min, prefix hits %% from the engines' counters (delta over the stage), the same from per-request "+
		"usage (cached_tokens / prompt_tokens), the unlimited-cache bound of the hit rate over the same turns, replicas "+
		"busy, spread of live conversations across replicas (max - min, mean over the stage), preemptions in the stage, "+
		"and the live working set over the fleet's KV cache (< 1: it fits).\n\n", samples)
	for _, s := range o.Setups {
		fmt.Fprintf(b, "## %s\n\n%d replicas of %s, scenario %s.\n\n", s.Name, s.Replicas, s.Profile.Name, s.Scenario.Name)
		header, lines := tableOf(rows, s.Name)
		fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, l := range lines {
			fmt.Fprintf(b, "| %s |\n", strings.Join(l, " | "))
		}
		b.WriteString("\n")
		for _, key := range FigureMetrics {
			if !o.NoFigures {
				fmt.Fprintf(b, "![%s](fig-%s-%s.png)\n", key, s.Name, key)
			}
		}
		if o.TraceSeed != 0 {
			fmt.Fprintf(b, "![hits over time](hits-over-time-%s.png)\n", s.Name)
		}
		b.WriteString("\n")
		if checks := Acceptance(rows, s.Name, ArmWorkingSet, []string{ArmShortestQueue, ArmSticky}, s.Replicas); len(checks) > 0 {
			fmt.Fprintf(b, "### Acceptance checks (%s vs the better of %s and %s)\n\n", ArmWorkingSet, ArmShortestQueue, ArmSticky)
			b.WriteString("| sessions | check | value | target | met |\n|---|---|---|---|---|\n")
			for _, c := range checks {
				met := "yes"
				if !c.Met {
					met = "**no**"
				}
				fmt.Fprintf(b, "| %d | %s | %s | %s | %s |\n", c.Sessions, c.What, c.Value, c.Target, met)
			}
			b.WriteString("\n")
		}
	}
}
