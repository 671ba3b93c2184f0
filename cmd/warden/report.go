package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

func newReportCmd() *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "report RESULTS_DIR",
		Short: "Make results.csv, summary.md and PNG figures from a results directory",
		Long: `Reads a results directory written by 'warden bench' (manifest.json, turns.jsonl,
series.csv) and writes results.csv, turns_by_index.csv, results.json, summary.md
and the PNG figures into it, then prints the results table. Nothing is re-run.

With --check it also verifies the run: every stage of every variant has a row, the
turn accounting adds up (carried in + started = completed + failed + in flight,
each stage carrying in the previous one's in flight), at least one
turn succeeded per stage, and no variant was interrupted; it exits non-zero if not.

Example:
  warden report results/20261129-120000`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := report.Generate(args[0], cmd.OutOrStdout()); err != nil {
				return err
			}
			if check {
				if err := checkRun(args[0]); err != nil {
					return &exitError{code: ExitAccounting, err: fmt.Errorf("check failed: %w", err)}
				}
				fmt.Fprintln(cmd.OutOrStdout(), "check: ok")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "verify the run is complete and consistent; exit 3 if not")
	return cmd
}

// checkRun verifies a results directory as CI needs it.
func checkRun(dir string) error {
	run, err := report.Load(dir)
	if err != nil {
		return err
	}
	m := run.Manifest
	var errs []error
	if m.Interrupted {
		errs = append(errs, errors.New("the run was interrupted"))
	}
	if m.Stopped != nil {
		errs = append(errs, fmt.Errorf("the run was stopped: %s (rule: %s)", m.Stopped.Reason, m.Stopped.Rule))
	}
	if err := m.Check(); err != nil {
		errs = append(errs, err)
	}
	sums, err := report.Summarize(run)
	if err != nil {
		return err
	}
	want := 0
	for _, v := range m.Variants {
		want += len(v.Stages)
		if !v.Complete {
			errs = append(errs, fmt.Errorf("variant %q did not complete", v.Name))
		}
	}
	if len(m.Variants) == 0 {
		errs = append(errs, errors.New("no variant ran"))
	}
	// The manifest's windows and turns.jsonl are written by different code paths
	// (the closed loop's accounting, the results writer): every turn the loop
	// counts as completed or failed has exactly one record, and no record exists
	// for a turn the loop never saw finish.
	records := map[string]int{}
	for i := range run.Results {
		if !run.Results[i].Side { // side requests are not turns (loadgen.SideRequests)
			records[run.Results[i].Variant]++
		}
	}
	for _, v := range m.Variants {
		finished := 0
		for _, w := range v.Stages {
			finished += w.Completed + w.Failed
		}
		if got := records[v.Name]; got != finished {
			errs = append(errs, fmt.Errorf("variant %q: %w: %d turn records in %s, but the manifest counts %d completed + failed",
				v.Name, loadgen.ErrAccounting, got, loadgen.TurnsFile, finished))
		}
	}
	if len(sums) != want {
		errs = append(errs, fmt.Errorf("%d stage rows, want %d", len(sums), want))
	}
	stagesOf := map[string]int{}
	for _, v := range m.Variants {
		stagesOf[v.Name] = len(v.Stages)
	}
	trace := m.Scenario != nil && m.Scenario.Trace != nil
	for _, s := range sums {
		if a := s.Accounting; trace && s.TurnsOK == 0 && s.TurnsFailed == 0 && a.CarriedIn == 0 && a.Started == 0 {
			// A trace's window with nothing sent, done or in flight (after
			// its last request, or a gap in it): nothing to measure, nothing wrong.
			continue
		}
		if s.TurnsOK == 0 {
			// Stages numbered from 1, as the progress lines do.
			errs = append(errs, fmt.Errorf("variant %q stage %d/%d (%d sessions): no successful turn (%d failed%s)",
				s.Variant, s.Stage+1, stagesOf[s.Variant], s.Sessions, s.TurnsFailed, firstFailure(run.Results, s)))
		}
	}
	return errors.Join(errs...)
}

// firstFailure describes the first failed turn of s's variant done in its window
// ("; first: status 400: ..."), so a stage with no successful turn says why; ""
// when there is none.
func firstFailure(results []loadgen.Result, s report.Summary) string {
	for i := range results {
		r := &results[i]
		if r.Variant != s.Variant || r.Side || r.OK() || r.Done < s.WindowStart || r.Done >= s.WindowEnd {
			continue
		}
		msg := r.Err
		if msg == "" {
			msg = "no error text"
		}
		return fmt.Sprintf("; first: status %d: %s", r.Status, msg)
	}
	return ""
}
