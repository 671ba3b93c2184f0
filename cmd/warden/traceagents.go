package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/atomicfile"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/agent"
	"github.com/lmwarden/warden/report"
)

// defaultSynth is trace agents' --synth: enough sessions that the
// synthesized column's p90 of a per-session figure moves by a few percent
// between seeds, where 69 would move it by tens.
const defaultSynth = 2000

func traceAgentsHelp() string {
	var b strings.Builder
	b.WriteString(`Reads Claude Code session trees (kv-cache-tester format: a directory of *.json,
one session each, or one file), synthesizes --synth sessions (agent.Generate:
sessions 0..N-1 of --seed, the population a scenario of shape agent replays) from
the defaults or a scenario's agent: section, measures both the same way
(agent.Measure) and prints one row per figure: the traces' p50, p90 and max (or
one value: a count, a share, a mean), the same for the synthesized sessions, and
synth / trace of each. Tokens are Claude Code's own (a scenario's token_scale is
applied by the replay, not here); gaps are seconds; quantiles are nearest-rank.
--csv writes the same rows with the sample counts. See docs/traces.md,
"Synthesized agent sessions".

Rows:
`)
	for _, d := range agent.FigureDefs() {
		fmt.Fprintf(&b, "  %-24s %s (%s)\n", d.Name, d.Help, d.Unit)
	}
	b.WriteString(`
Example:
  warden trace agents ../shared/fixtures/traces/claude-code/ --csv agents.csv`)
	return b.String()
}

func newTraceAgentsCmd() *cobra.Command {
	var (
		n            int
		seed         uint64
		scenario, cv string
	)
	cmd := &cobra.Command{
		Use:   "agents DIR|FILE",
		Short: "Compare Claude Code session traces with synthesized agent sessions, figure by figure",
		Long:  traceAgentsHelp(),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return fmt.Errorf("--synth %d: want at least 1 session", n)
			}
			p, sSeed, err := synthParams(scenario)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("seed") || scenario == "" {
				sSeed = seed
			}
			trees, err := readAgentTrees(args[0])
			if err != nil {
				return err
			}
			tf := agent.Measure(trees)
			var sf agent.Figures
			for i := range n {
				sf.Add(agent.Generate(p, sSeed, i))
			}
			rows := agent.Compare(&tf, &sf)
			if cv != "" {
				if err := atomicfile.Write(cv, agentRowsCSV(rows)); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%d trace sessions (%s) vs %d synthesized (seed %d)\n", len(trees), args[0], n, sSeed)
			if err := agentRowsTable(w, rows); err != nil {
				return err
			}
			if cv != "" {
				fmt.Fprintf(w, "wrote %s\n", cv)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "synth", defaultSynth, "synthesized sessions")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the synthesized sessions (with --scenario and no --seed: the scenario's seed)")
	cmd.Flags().StringVar(&scenario, "scenario", "", "take the synthesized sessions' parameters from this scenario's agent: section (shape agent)")
	cmd.Flags().StringVar(&cv, "csv", "", "also write the rows to this CSV file")
	return cmd
}

// synthParams returns the parameters and seed of the scenario at path, or
// the defaults and 0 for "".
func synthParams(path string) (agent.SynthParams, uint64, error) {
	if path == "" {
		return agent.DefaultParams(), 0, nil
	}
	sc, err := loadgen.LoadScenario(path)
	if err != nil {
		return agent.SynthParams{}, 0, err
	}
	sc = sc.WithDefaults()
	if sc.Shape != loadgen.ShapeAgent {
		return agent.SynthParams{}, 0, fmt.Errorf("--scenario %s: shape %q, want %q (synthesized agent sessions, an agent: section)", path, sc.Shape, loadgen.ShapeAgent)
	}
	var p agent.SynthParams
	if sc.Agent != nil {
		p = sc.Agent.SynthParams
	}
	return p.WithDefaults(), sc.Seed, nil
}

// readAgentTrees reads path: every *.json of a directory, by name, or one
// file; errors name the file (agent.Read).
func readAgentTrees(path string) ([]*agent.Tree, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading traces: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.json"))
		if len(files) == 0 {
			return nil, fmt.Errorf("%s holds no *.json session file (Claude Code traces, kv-cache-tester format)", path)
		}
		sort.Strings(files)
	}
	trees := make([]*agent.Tree, 0, len(files))
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("reading traces: %w", err)
		}
		t, err := agent.Read(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
		trees = append(trees, t)
	}
	return trees, nil
}

// fmtFigure formats v of unit; "" for NaN.
func fmtFigure(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return ""
	case unit == agent.UnitShare:
		return fmt.Sprintf("%.2f %%", 100*v)
	case unit == agent.UnitMean:
		return fmt.Sprintf("%.3f", v)
	case unit == agent.UnitSeconds && math.Abs(v) < 1000:
		return fmt.Sprintf("%.2f", v)
	}
	return report.Thousands(v)
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// sides returns a summary's p50, p90 and max, or "", "" and the value.
func sides(s agent.Summary, r agent.FigureRow) []string {
	if r.Single {
		return []string{"", "", fmtFigure(s.Value, r.Unit)}
	}
	return []string{fmtFigure(s.P50, r.Unit), fmtFigure(s.P90, r.Unit), fmtFigure(s.Max, r.Unit)}
}

func agentRowsTable(w io.Writer, rows []agent.FigureRow) error {
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAlignment(tw.AlignRight))
	t.Header("figure", "unit", "trace p50", "trace p90", "trace max|value", "synth p50", "synth p90", "synth max|value",
		"ratio p50", "ratio p90", "ratio max|value")
	for _, r := range rows {
		a, b, c := r.Ratios()
		line := append([]string{r.Name, r.Unit}, sides(r.Trace, r)...)
		line = append(line, sides(r.Synth, r)...)
		line = append(line, fmtRatio(a), fmtRatio(b), fmtRatio(c))
		if err := t.Append(line); err != nil {
			return fmt.Errorf("printing table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("printing table: %w", err)
	}
	return nil
}

// agentRowsCSV returns rows as CSV: figure, unit, then per side n, p50, p90,
// max, value, then the three ratios; empty cells where there is none.
func agentRowsCSV(rows []agent.FigureRow) []byte {
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', 10, 64)
	}
	side := func(s agent.Summary) []string {
		return []string{strconv.Itoa(s.N), num(s.P50), num(s.P90), num(s.Max), num(s.Value)}
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write([]string{"figure", "unit", "trace_n", "trace_p50", "trace_p90", "trace_max", "trace_value",
		"synth_n", "synth_p50", "synth_p90", "synth_max", "synth_value", "ratio_p50", "ratio_p90", "ratio_max_value"})
	for _, r := range rows {
		a, b, c := r.Ratios()
		line := append([]string{r.Name, r.Unit}, side(r.Trace)...)
		line = append(line, side(r.Synth)...)
		w.Write(append(line, num(a), num(b), num(c)))
	}
	w.Flush()
	return buf.Bytes()
}
