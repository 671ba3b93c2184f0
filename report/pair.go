package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/lmwarden/warden/loadgen"
)

// isAffinityPair reports whether run A is the affinity-off half and run B the
// affinity-on half of one off -> on comparison run as two runs (warden bench
// --variants off, then --variants on, e.g. against llama.cpp, which has no
// prefix-cache reset between variants): every variant of A has affinity off,
// every variant of B has it on.
func isAffinityPair(a, b *loadgen.Manifest) bool {
	if len(a.Variants) == 0 || len(b.Variants) == 0 {
		return false
	}
	return !slices.ContainsFunc(a.Variants, func(v loadgen.Variant) bool { return v.Affinity }) &&
		!slices.ContainsFunc(b.Variants, func(v loadgen.Variant) bool { return !v.Affinity })
}

// engineKinds lists the engine kinds of a run's replicas, sorted, each once. A
// manifest without Engines (virtual runs, vLLM-only runs, runs before engine
// kinds were recorded) is vLLM.
func engineKinds(m *loadgen.Manifest) []string {
	if len(m.Engines) == 0 {
		return []string{"vllm"}
	}
	var out []string
	for _, e := range m.Engines {
		if !slices.Contains(out, e.Kind) {
			out = append(out, e.Kind)
		}
	}
	slices.Sort(out)
	return out
}

// columnSources maps each series.csv column of a run to its sources over all
// replicas, sorted, each once: the series name, or "n/a: <why>" for a missing
// column (manifest Engines).
func columnSources(m *loadgen.Manifest) map[string][]string {
	out := map[string][]string{}
	for _, e := range m.Engines {
		for _, c := range e.Columns {
			src := c.Source
			if src == "" {
				src = "n/a: " + c.Missing
			}
			if !slices.Contains(out[c.Column], src) {
				out[c.Column] = append(out[c.Column], src)
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// engineDiff names what differs between two runs' engines, "" when nothing
// does: the engine kinds, and, when both manifests record column sources, each
// series.csv column whose source (or reason for being missing) differs. A
// difference there means the compared column is not the same figure in both
// runs (e.g. replicas busy from vllm:num_requests_running in one and
// llamacpp:requests_processing in the other).
func engineDiff(a, b *loadgen.Manifest) string {
	var diff []string
	if ka, kb := engineKinds(a), engineKinds(b); !slices.Equal(ka, kb) {
		diff = append(diff, fmt.Sprintf("engine kinds (%s vs %s)", strings.Join(ka, ","), strings.Join(kb, ",")))
	}
	if len(a.Engines) > 0 && len(b.Engines) > 0 {
		sa, sb := columnSources(a), columnSources(b)
		var cols []string
		for k := range sa {
			cols = append(cols, k)
		}
		for k := range sb {
			if _, ok := sa[k]; !ok {
				cols = append(cols, k)
			}
		}
		slices.Sort(cols)
		for _, c := range cols {
			if !slices.Equal(sa[c], sb[c]) {
				diff = append(diff, fmt.Sprintf("column %s source (%s vs %s)", c, strings.Join(sa[c], "; "), strings.Join(sb[c], "; ")))
			}
		}
	}
	return strings.Join(diff, ", ")
}

// comparePair is Compare for an affinity pair (isAffinityPair): run A's first
// variant (affinity off) is the base, run B's first (affinity on) the
// candidate, stage by stage, with the same deltas and sub-window noise as the
// off -> on table of a one-run report (NewDelta). It prints that table, the
// beyond-noise line and the per-metric deltas to w and, when opts.Markdown is
// set, writes the table as markdown there.
func (c *Comparison) comparePair(runA, runB *Run, sumsA, sumsB []Summary, w io.Writer, opts CompareOptions) error {
	off, on := runA.Manifest.Variants[0].Name, runB.Manifest.Variants[0].Name
	candName := on
	if on == off {
		candName = on + " (B)" // the merged rows need distinct names
	}
	c.Pair = []string{off, candName}
	for _, v := range runA.Manifest.Variants[1:] {
		c.Notes = append(c.Notes, fmt.Sprintf("variant %q of %s not compared (the pair uses its first variant, %q)", v.Name, c.A, off))
	}
	for _, v := range runB.Manifest.Variants[1:] {
		c.Notes = append(c.Notes, fmt.Sprintf("variant %q of %s not compared (the pair uses its first variant, %q)", v.Name, c.B, on))
	}
	if sa, sb := runA.Manifest.Scenario, runB.Manifest.Scenario; sa != nil && sb != nil && sa.Seed != sb.Seed {
		c.Notes = append(c.Notes, fmt.Sprintf("the runs used different seeds (%d vs %d): the off -> on differences include the workload's own randomness", sa.Seed, sb.Seed))
	}
	var merged []Summary
	for _, s := range sumsA {
		if s.Variant == off {
			merged = append(merged, s)
		}
	}
	for _, s := range sumsB {
		if s.Variant == on {
			s.Variant = candName
			merged = append(merged, s)
		}
	}
	for _, row := range stageRows(c.Pair, merged) {
		if row.cells[0] == nil || row.cells[1] == nil {
			dir := c.A
			if row.cells[0] == nil {
				dir = c.B
			}
			c.Notes = append(c.Notes, fmt.Sprintf("stage %d (%d sessions) only in %s", row.stage, row.sessions, dir))
			continue
		}
		sc := StageComparison{Variant: on, Stage: row.stage, Sessions: row.sessions}
		for _, name := range Metrics {
			d, _ := NewDelta(name, row.cells[0], row.cells[1]) // names from Metrics are known
			sc.Deltas = append(sc.Deltas, d)
			c.checkGates(opts, name, d, row.stage, row.sessions, on, off)
		}
		c.Stages = append(c.Stages, sc)
	}
	for _, t := range opts.FailOn {
		if t.Variant != "" && t.Variant != on && t.Variant != off {
			return fmt.Errorf("comparing runs: gate %s: variant %q is in neither run (variants: %s, %s)", t, t.Variant, off, on)
		}
	}

	if _, err := fmt.Fprintf(w, "%s -> %s across two runs: %s (%s, affinity off) -> %s (%s, affinity on)\n", off, on, runA.Manifest.RunID, c.A, runB.Manifest.RunID, c.B); err != nil {
		return fmt.Errorf("printing comparison: %w", err)
	}
	header, rows := referenceTable(c.Pair, merged)
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAlignment(tw.AlignRight))
	t.Header(toAny(header)...)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return fmt.Errorf("printing comparison: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("printing comparison: %w", err)
	}
	if _, err := fmt.Fprintf(w, "* within noise (95%% interval of the difference contains 0, from %s sub-windows of each run's stage); ? no noise estimate (stage under two sub-windows)\n", SubWindow); err != nil {
		return fmt.Errorf("printing comparison: %w", err)
	}
	if line := beyondNoise(c.Pair, merged); line != "" {
		if _, err := fmt.Fprintln(w, strings.ReplaceAll(line, "**", "")); err != nil {
			return fmt.Errorf("printing comparison: %w", err)
		}
	}
	if opts.Markdown != nil {
		if _, err := opts.Markdown.Write(pairMarkdown(c, &runA.Manifest, &runB.Manifest, merged)); err != nil {
			return fmt.Errorf("writing the off -> on table: %w", err)
		}
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return fmt.Errorf("printing comparison: %w", err)
	}
	if err := c.print(w); err != nil {
		return err
	}
	return c.finish(w, opts)
}

// pairMarkdown renders the off -> on table of an affinity pair as summary.md
// renders a one-run report's: which runs, their notes (e.g. llama.cpp's missing
// reset), the table with its noise marks, the beyond-noise line and the legend.
func pairMarkdown(c *Comparison, a, b *loadgen.Manifest, merged []Summary) []byte {
	var s strings.Builder
	fmt.Fprintf(&s, "# %s -> %s across two runs\n\n", c.Pair[0], c.Pair[1])
	for _, r := range []struct {
		dir string
		m   *loadgen.Manifest
	}{{c.A, a}, {c.B, b}} {
		name := ""
		if r.m.Scenario != nil {
			name = fmt.Sprintf(", scenario `%s`, seed %d", r.m.Scenario.Name, r.m.Scenario.Seed)
		}
		fmt.Fprintf(&s, "- `%s`: run %s (variant %s, affinity %s)%s; target: %s; engines: %s\n", r.dir, r.m.RunID,
			r.m.Variants[0].Name, map[bool]string{false: "off", true: "on"}[r.m.Variants[0].Affinity], name, r.m.Target, strings.Join(engineKinds(r.m), ", "))
		for _, n := range r.m.Notes {
			fmt.Fprintf(&s, "  - note: %s\n", n)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&s, "- note: %s\n", n)
	}
	s.WriteString("\n")
	header, rows := referenceTable(c.Pair, merged)
	mdTable(&s, header, rows)
	s.WriteString("\n")
	if line := beyondNoise(c.Pair, merged); line != "" {
		fmt.Fprintf(&s, "%s\n\n", line)
	}
	fmt.Fprintf(&s, "`*` within noise: the 95 %% interval of the %s -> %s difference contains 0 "+
		"(normal approximation from %s sub-windows of each run's stage, as in a one-run summary.md; only out tok/min and TTFB have one); "+
		"`?` no noise estimate (stage shorter than two sub-windows). `n/a`: could not be computed (see the runs' summary.md); never read as 0.\n",
		c.Pair[0], c.Pair[1], SubWindow)
	return []byte(s.String())
}
