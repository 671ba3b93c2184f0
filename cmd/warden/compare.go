package main

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/lmwarden/warden/internal/atomicfile"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/report"
)

func newCompareCmd() *cobra.Command {
	var (
		failOn   []string
		force    bool
		mismatch bool
		strict   bool
		mdOut    string
		junitOut string
	)
	cmd := &cobra.Command{
		Use:   "compare RUN_A RUN_B",
		Short: "Compare two runs stage by stage; non-zero exit when a threshold is crossed",
		Long: `Prints, per variant and stage, each column of run A and run B, the change A -> B
and whether it is beyond the noise. Refuses (exit 1, saying why) when the two
runs ran in different worlds (one in virtual time, one over HTTP: manifest.json
mode), used different workloads (scenarios, naming the fields) or different
engines, unless --force; two seeds of one scenario compare (with a note), which
is how to see the workload's own noise.
A gate crossed exits 4; bad arguments (including a gate naming a variant in
neither run) exit 1.

--fail-on takes gates of the form [variant/]metric:<sign><limit>[%]; the sign says
which direction is a regression:
  output_tokens_per_min:-5%    fail if output tokens/min drop more than 5%
  ttfb_p95_s:+20%              fail if TTFB p95 rises more than 20%
  on/prefix_hits_pct:-3        fail if variant "on" loses more than 3 points of hits
A change past a limit that is within the stage's noise (the 95 % interval from
1-minute sub-windows, marked "within noise" in the table) does not fail the gate
unless --strict-gates; a change with no noise estimate (stages under 2 minutes) is
judged on the limit alone.

Affinity off and on as two runs (warden bench --variants off --out A, then
--variants on --out B, e.g. llama.cpp, which cannot reset its prefix cache
between variants): when every variant of RUN_A has affinity off and every
variant of RUN_B has it on, the scenarios may differ in their variants only
(any other field refuses, naming it; so do other replica counts), and compare
prints the off -> on table of a one-run report across the two runs, with the
same noise marks (1-minute sub-windows of each run's stage), then the
per-metric deltas. --out FILE writes that table as markdown. Runs whose engine
kinds or series columns' sources differ (manifest.json engines) are refused
either way.

Examples:
  warden compare results/baseline/virtual-reference results/ci-virtual \
      --fail-on output_tokens_per_min:-5% --fail-on ttfb_p95_s:+20%
  warden compare results/llama-off results/llama-on --out results/llama-off-on.md

--junit FILE writes the verdicts as JUnit XML for a CI system: a testsuite per
variant, a testcase per stage and gate (failing when the gate failed, with A, B,
the change and its 95 % interval in the message), a passing "compared" case for
a stage no gate applied to; runs that could not be compared give one case in
error. The exit codes stay as above.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := report.CompareOptions{Force: force || mismatch, StrictGates: strict}
			for _, s := range failOn {
				t, err := report.ParseGate(s)
				if err != nil {
					return err
				}
				opts.FailOn = append(opts.FailOn, t)
			}
			var md bytes.Buffer
			if mdOut != "" {
				opts.Markdown = &md
			}
			c, err := report.Compare(args[0], args[1], cmd.OutOrStdout(), opts)
			if junitOut != "" {
				if jerr := writeJUnit(junitOut, args[0], args[1], c, err); jerr != nil {
					return errors.Join(err, jerr)
				}
			}
			if mdOut != "" && c != nil {
				if len(c.Pair) != 2 {
					return errors.Join(err, fmt.Errorf("--out %s: the runs are not an off -> on pair (RUN_A's variants all affinity off, RUN_B's all on): nothing written", mdOut))
				}
				if werr := atomicfile.Write(mdOut, md.Bytes()); werr != nil {
					return errors.Join(err, fmt.Errorf("--out: %w", werr))
				}
			}
			if errors.Is(err, report.ErrWorldMismatch) || errors.Is(err, report.ErrScenarioMismatch) || errors.Is(err, report.ErrEngineMismatch) {
				return fmt.Errorf("%w\n(--force compares them anyway)", err)
			}
			if errors.Is(err, report.ErrThresholdExceeded) {
				return &exitError{code: ExitGate, err: err}
			}
			return err
		},
	}
	cmd.Flags().StringArrayVar(&failOn, "fail-on", nil, "regression gate, repeatable (see above)")
	cmd.Flags().BoolVar(&force, "force", false, "compare runs of different worlds (virtual vs HTTP), scenarios or engines anyway")
	cmd.Flags().BoolVar(&mismatch, "allow-scenario-mismatch", false, "compare runs of different scenarios anyway")
	_ = cmd.Flags().MarkDeprecated("allow-scenario-mismatch", "use --force")
	cmd.Flags().StringVar(&mdOut, "out", "", "for an off -> on pair of runs: write the off -> on table as markdown to this file")
	cmd.Flags().StringVar(&junitOut, "junit", "", "write the verdicts as JUnit XML to this file: a testcase per stage and gate, failures for the gates that fail")
	cmd.Flags().BoolVar(&strict, "strict-gates", false, "fail on a change past a limit even when it is within the run's noise")
	return cmd
}

// writeJUnit writes the JUnit XML of c to path; when the comparison failed
// for any reason but a gate (err, c possibly partial), one case in error.
func writeJUnit(path, a, b string, c *report.Comparison, err error) error {
	var (
		doc  []byte
		jerr error
	)
	switch {
	case err != nil && !errors.Is(err, report.ErrThresholdExceeded):
		doc, jerr = report.JUnitRefused(a, b, err)
	case c != nil:
		doc, jerr = c.JUnit()
	default:
		return nil
	}
	if jerr == nil {
		jerr = atomicfile.Write(path, doc)
	}
	if jerr != nil {
		return fmt.Errorf("--junit: %w", jerr)
	}
	return nil
}
