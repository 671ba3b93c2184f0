package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/run/study"
	"github.com/lmwarden/warden/report"
)

func newStudyCmd() *cobra.Command {
	var sf studyFlags
	cmd := &cobra.Command{
		Use:   "study",
		Short: "Compare routing policies in virtual time over several seeds (docs/routing.md)",
		Long:  studyLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStudy(cmd, &sf)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sf.setups, "setups", []string{study.SetupReference, study.SetupGap, study.SetupFleet, study.SetupFleetFP8}, "setups: "+strings.Join(study.SetupNames(), ", "))
	f.StringSliceVar(&sf.arms, "arms", study.StandardArms(), "arms (see --list)")
	f.UintSliceVar(&sf.seeds, "seeds", []uint{1, 2, 3}, "scenario seeds")
	f.IntSliceVar(&sf.stages, "stages", nil, "override every setup's stages, e.g. 16,32")
	f.StringVar(&sf.stageDur, "stage-duration", "", "override every setup's stage duration (simulated), e.g. 3m")
	f.StringSliceVar(&sf.stageDurs, "stage-durations", nil, "run every seed once per stage duration, e.g. 150s,170s,190s,210s: samples = seeds x durations, so the spread includes where a stage's window cuts the sessions' turns (docs/routing.md)")
	f.StringVar(&sf.out, "out", "results/study", "output directory (\"\" writes nothing)")
	f.StringVar(&sf.scenarios, "scenarios", "scenarios", "directory of the scenario files")
	f.Uint64Var(&sf.traceSeed, "trace-seed", 1, "draw per-replica traces of this seed's runs (0: none)")
	f.StringSliceVar(&sf.traceArms, "trace-arms", []string{study.ArmSessionHash, study.ArmSticky, study.ArmWorkingSet}, "arms whose traces are drawn (and whose placements are scored)")
	f.BoolVar(&sf.signals, "signals", true, "score every placement input on the traced runs (signals.md)")
	f.IntVar(&sf.parallel, "parallel", 0, "runs at once (0: GOMAXPROCS)")
	f.StringVar(&sf.traceDir, "trace", "", "only draw trace-<variant>.png for every variant of an existing results directory")
	f.StringVar(&sf.redrawDir, "redraw", "", "only draw the fig-*.png and frontier-*.png of an existing study directory again from its study.csv (runs nothing)")
	f.BoolVar(&sf.list, "list", false, "list setups and arms")
	f.BoolVar(&sf.noFigures, "no-figures", false, "skip the per-metric figures (studies with many arms)")
	f.BoolVar(&sf.force, "force", false, "write into an --out that already holds a study (replaces its files)")
	return cmd
}

// studyFlags holds the study command's flags.
type studyFlags struct {
	setups, arms []string
	seeds        []uint
	stages       []int
	stageDur     string
	stageDurs    []string
	out          string
	scenarios    string
	traceSeed    uint64
	traceArms    []string
	signals      bool
	parallel     int
	traceDir     string
	redrawDir    string
	list         bool
	noFigures    bool
	force        bool
}

// studyLong is the study command's help text.
const studyLong = `Runs every setup x arm x seed in virtual time (the benchmark's engines, sessions
and router policies, no HTTP) and writes, into --out (default results/study; a
directory that already holds a study.csv is refused unless --force, so a quick
run does not replace a committed study):

  study.csv      every metric per setup, arm and stage: mean, sd, min, max over seeds
                 (x --stage-durations; the "seeds" column counts samples)
  study.md       the table per setup and the acceptance checks of the new policy
  fig-*.png      one figure per setup and metric (TTFB p50, p95, output tokens/min,
                 prefix hits %, replicas busy), mean with min-max bars
  trace-*.png    per-replica traces of the --trace-seed run of --trace-arms: live
                 conversations (placements marked), working set, in flight,
                 waiting, KV usage, preemptions
  hits-over-time-*.png  prefix hit rate over time of the traced runs
  signals.md     what each placement input said at each placement vs the truth

Arms: shortest-queue (vLLM's DP balancer, 100 ms snapshots), session-hash,
sticky (the reference rule), working-set (the new policy, the default with
affinity on), unlimited-cache (working-set on engines that never evict: the bound
of the prefix hit rate); more with --list. Setups: reference (the reference
workload on 4 x a4000-qwen3-4b), reference-gap (the same with 3 s between turns
and jittered sizes), reference-gap-side (reference-gap plus a side request beside
every turn, as Claude Code's title/topic requests; not in the default set),
reference-jitter (only the real tokenizer's +-2 % spread of sizes; not in the
default set), fleet (scenarios/fleet-7x5090.yaml on 7 x rtx5090-27b),
fleet-fp8kv (the same on rtx5090-27b-fp8kv: an fp8 KV cache, twice the tokens).

  warden study --force                          # 4 setups, 5 arms, seeds 1,2,3: rewrites results/study
  warden study --setups reference --arms sticky,working-set --seeds 1 --out results/my-study
  warden study --trace results/20260101-120000  # draw the trace of a bench run
  warden study --redraw results/study/admission # redraw a study's figures from study.csv`

// runStudy is study's RunE: --list, --trace and --redraw, or the setups, arms,
// seeds and stage durations looked up and study.Run.
func runStudy(cmd *cobra.Command, sf *studyFlags) error {
	if sf.list {
		fmt.Fprintf(cmd.OutOrStdout(), "setups: %s\narms: %s\n(what each arm does: docs/routing.md, the arm tables of \"How it is measured\" and \"What did not work\"; code in internal/run/study/arms.go)\n",
			strings.Join(study.SetupNames(), ", "), strings.Join(study.ArmNames(), ", "))
		return nil
	}
	if sf.traceDir != "" {
		return drawTraces(sf.traceDir)
	}
	if sf.redrawDir != "" {
		return study.Redraw(sf.redrawDir)
	}
	if err := checkStages(sf.stages); err != nil {
		return err
	}
	if err := checkStudyOut(sf.out, sf.force); err != nil {
		return err
	}
	o := study.Options{OutDir: sf.out, TraceSeed: sf.traceSeed, TraceArms: sf.traceArms, Signals: sf.signals, NoFigures: sf.noFigures, Parallel: sf.parallel, Progress: cmd.ErrOrStderr()}
	for _, s := range sf.setups {
		su, err := study.LookupSetup(s, sf.scenarios)
		if err != nil {
			return err
		}
		if len(sf.stages) > 0 {
			su.Scenario.Stages = sf.stages
		}
		if sf.stageDur != "" {
			d, err := parseDuration(sf.stageDur)
			if err != nil {
				return fmt.Errorf("--stage-duration: %w", err)
			}
			su.Scenario.StageDuration = d
		}
		o.Setups = append(o.Setups, su)
	}
	if sf.stageDur != "" && len(sf.stageDurs) > 0 {
		return errors.New("--stage-duration and --stage-durations: give one of them")
	}
	for _, s := range sf.stageDurs {
		d, err := parseDuration(s)
		if err != nil {
			return fmt.Errorf("--stage-durations: %w", err)
		}
		if slices.Contains(o.StageDurations, d) {
			// A repeated length is the same run again: it would narrow the spread.
			return fmt.Errorf("--stage-durations: %v given twice", d)
		}
		o.StageDurations = append(o.StageDurations, d)
	}
	for _, a := range sf.arms {
		arm, err := study.LookupArm(a)
		if err != nil {
			return err
		}
		o.Arms = append(o.Arms, arm)
	}
	for _, s := range sf.seeds {
		if s == 0 {
			return errors.New("--seeds: 0 is not a seed (0 means the scenario default)")
		}
		o.Seeds = append(o.Seeds, uint64(s))
	}
	runs, err := study.Run(cmd.Context(), o)
	if err != nil {
		return err
	}
	warnEmptyStages(cmd.ErrOrStderr(), runs)
	if err := study.WriteTable(cmd.OutOrStdout(), runs); err != nil {
		return err
	}
	if sf.out != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "study: %s\n", sf.out)
	}
	return nil
}

// checkStudyOut refuses an --out directory that already holds a study.csv
// unless force: the default results/study is committed, and a one-setup run
// would replace its tables and figures.
func checkStudyOut(out string, force bool) error {
	if out == "" || force {
		return nil
	}
	p := filepath.Join(out, "study.csv")
	if _, err := os.Stat(p); err == nil {
		return fmt.Errorf("--out %s already holds a study (%s): give another --out, or --force to replace it", out, p)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// drawTraces draws the per-replica trace of every variant of a results directory
// into it.
func drawTraces(dir string) error {
	run, err := report.Load(dir)
	if err != nil {
		return err
	}
	for _, v := range run.Manifest.Variants {
		if err := study.DrawTrace(dir, run, v.Name); err != nil {
			return err
		}
	}
	return nil
}

// warnEmptyStages says which stages finished no turn in their window (a stage
// shorter than one turn takes under load): their cells read n/a.
func warnEmptyStages(w io.Writer, runs []*study.RunResult) {
	seen := map[string]bool{}
	for _, r := range runs {
		for _, st := range r.Stages {
			key := fmt.Sprintf("%s/%s stage %d (%d sessions)", r.Setup, r.Arm, st.Stage+1, st.Sessions)
			if st.TurnsOK == 0 && !seen[key] {
				seen[key] = true
				fmt.Fprintf(w, "warning: %s, seed %d: no turn finished inside the %v window; the stage is shorter than a turn takes there, so its cells read n/a (lengthen --stage-duration)\n",
					key, r.Seed, r.StageDuration)
			}
		}
	}
}
