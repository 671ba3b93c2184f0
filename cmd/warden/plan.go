package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/run/bench"
	"github.com/lmwarden/warden/internal/run/plan"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim"
)

func newPlanCmd() *cobra.Command {
	var o planFlags
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "How many agent sessions a fleet serves under an SLO, per routing policy (virtual time)",
		Long: `Searches, in virtual time, for the largest number of concurrent sessions of a
workload that a fleet serves while meeting an SLO, for each routing policy
(default: shortest-queue = affinity off, working-set, admission-fit), or with
--sessions N the replicas needed for N sessions.

Each point (policy, sessions, replicas) runs the scenario's workload as one stage
of that many sessions, started together and cold, measured over the scenario's
stage duration after a warmup (--warmup; default the scenario's, or 1m), with
--seeds seeds (1, 2, ... from --seed). For a scenario of shape agent
(synthesized Claude Code sessions) a session is a live session tree, a parent
conversation with its subagents, in a closed loop over trees; TTFB and goodput
count calls, and trees done/h and session p50/p95 (first call sent to last call
done, trees completed in the point's run) replace sessions/h; there is no
KV-fit rule of thumb for trees (docs/planning.md, "Agent sessions"). The search gallops (replicas, 2x, 4x ...
sessions) until a point fails, then bisects. A point meets the SLO when the
mean over its seeds meets every term; a term within the seeds' noise of its
threshold (report.ThresholdDelta, 95 %) is marked *.

SLO terms (--slo, or --slo-file with the same keys in YAML):
  ttfb_p50, ttfb_p95   TTFB quantiles of OK turns (Go durations)
  goodput              least share of turns that are OK with TTFB <= goodput_ttfb
  goodput_ttfb         default: ttfb_p95's value, else 10s
Default: ` + plan.DefaultSLO().String() + `.

Fleet: --profile and --replicas (built-in simulator profiles), or --server URL
(real vLLM servers: num_gpu_blocks and block_size from vllm:cache_config_info on
/metrics, max_model_len from /v1/models, one replica per DP rank; step costs from
--profile; max_num_seqs from --max-num-seqs, else vLLM's default 256). The
fleet's figures are printed with where each came from.

The answer per policy: knee, TTFB columns (each quantile the SLO names, plus
p95 and p99), goodput, throughput, prefix hits, the first failing point and its
failed terms. After it: the cliff (knee -> first failing point, side by side);
a warning when the knee's TTFB p95 or p99 is past ` + fmt.Sprint(plan.TailFactor) + `x the SLO's TTFB limit
(ttfb_p95, else ttfb_p50, else goodput_ttfb); a "why:" line per policy (the
failed term and what the point's stayed %, prefix hits and held turns say of
the cause); one recommended answer (the largest knee whose tail does not warn,
else the best goodput at a knee) with its reason; the KV-fit rule of thumb in
tokens. Progress lines on stderr give p50, p95 and p99.

Writes plan.csv (the answer per policy), points.csv (every point) and plan.png
(each SLO metric vs sessions per policy, knee ringed) into --out, only when the
search succeeds. --verify runs each knee once more over HTTP (the embedded
simulated cluster and router) and prints both worlds.

Examples:
  warden plan                                     # reference workload, 4 x a4000-qwen3-4b
  warden plan --scenario scenarios/fleet-7x5090.yaml --profile rtx5090-27b-fp8kv --replicas 7 --slo ttfb_p50=10s
  warden plan --scenario scenarios/agent-sessions.yaml   # live session trees on the reference fleet
  warden plan --slo ttfb_p95=5s,goodput=0.95 --sessions 64
  warden plan --server http://gpu1:8000 --server http://gpu2:8000 --max-num-seqs 64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.profile, "profile", bench.DefaultProfile, "simulator profile (step costs; with --replicas also the KV cache): "+strings.Join(sim.ProfileNames(), ", "))
	f.IntVar(&o.replicas, "replicas", bench.DefaultSimReplicas, "replicas of --profile")
	f.IntVar(&o.maxNumSeqs, "max-num-seqs", 0, fmt.Sprintf("max_num_seqs per engine (default %d for a profile, the reference server; 256, vLLM's default, with --server)", sim.ReferenceMaxNumSeqs))
	f.StringSliceVar(&o.servers, "server", nil, "real vLLM server base URL(s) to read the fleet from (/metrics, /v1/models)")
	f.StringVar(&o.apiKey, "api-key", "", "with --server: sent as \"Authorization: Bearer KEY\"")
	f.StringVar(&o.scenarioPath, "scenario", "", "workload scenario YAML (default: the built-in reference workload)")
	f.StringVar(&o.sloText, "slo", "", "SLO terms, e.g. ttfb_p95=10s,goodput=0.9 (default "+plan.DefaultSLO().String()+")")
	f.StringVar(&o.sloFile, "slo-file", "", "SLO as a YAML file with the --slo keys")
	f.StringSliceVar(&o.policies, "policies", plan.DefaultPolicies, "policies to compare: shortest-queue (affinity off), admission-fit, or a router policy (working-set, cold-move, sticky, session-hash)")
	f.IntVar(&o.c.Seeds, "seeds", plan.DefaultSeeds, "seeds per point")
	f.Uint64Var(&o.c.Seed, "seed", 0, "first seed (default the scenario's)")
	f.DurationVar(&o.warmup, "warmup", 0, "unmeasured start of every point (default the scenario's warmup, or 1m when it has none)")
	f.IntVar(&o.c.Start, "start", 0, "first point of the search (default: one session per replica; with --sessions: --replicas)")
	f.IntVar(&o.c.MaxSessions, "max-sessions", 0, fmt.Sprintf("largest point tried (default %d x replicas)", plan.DefaultMaxSessionsPerReplica))
	f.IntVar(&o.c.Resolution, "resolution", 1, "bisect until the knee is known to this many sessions")
	f.IntVar(&o.c.InverseSessions, "sessions", 0, "inverse question: the replicas needed for this many sessions")
	f.IntVar(&o.c.MaxReplicas, "max-replicas", plan.DefaultMaxReplicas, "with --sessions: most replicas tried")
	f.DurationVar(&o.c.Budget, "budget", 0, "wall-time budget of the search (0: none); past it the search stops and reports the bracket reached")
	f.StringVar(&o.out, "out", "", "directory for plan.csv, points.csv and plan.png (default: print only)")
	f.BoolVar(&o.verify, "verify", false, "run each knee again over HTTP on the embedded cluster and print both worlds")
	f.Float64Var(&o.verifySpeed, "verify-speed", plan.DefaultVerifySpeed, "with --verify: the HTTP world's speed (simulated seconds per wall second)")
	return cmd
}

// planFlags are the plan command's flags.
type planFlags struct {
	c            plan.Config
	profile      string
	replicas     int
	maxNumSeqs   int
	servers      []string
	apiKey       string
	scenarioPath string
	sloText      string
	sloFile      string
	policies     []string
	warmup       time.Duration
	out          string
	verify       bool
	verifySpeed  float64
}

// config checks the flags (every problem at once) and fills o.c but the fleet.
func (o *planFlags) config(cmd *cobra.Command) error {
	f := cmd.Flags()
	var errs []error
	sc := loadgen.DefaultScenario()
	if o.scenarioPath != "" {
		var err error
		if sc, err = loadgen.LoadScenario(o.scenarioPath); err != nil {
			return err
		}
	}
	o.c.Scenario = sc
	switch {
	case f.Changed("slo") && f.Changed("slo-file"):
		errs = append(errs, errors.New("--slo and --slo-file: give one"))
	case f.Changed("slo-file"):
		s, err := plan.LoadSLO(o.sloFile)
		o.c.SLO, errs = s, append(errs, err)
	case f.Changed("slo"):
		s, err := plan.ParseSLO(o.sloText)
		o.c.SLO, errs = s, append(errs, err)
	default:
		o.c.SLO = plan.DefaultSLO()
	}
	for _, n := range o.policies {
		p, err := plan.LookupPolicy(strings.TrimSpace(n))
		if err != nil {
			errs = append(errs, fmt.Errorf("--policies: %w", err))
			continue
		}
		o.c.Policies = append(o.c.Policies, p)
	}
	if _, err := sim.LookupProfile(o.profile); err != nil {
		errs = append(errs, fmt.Errorf("--profile: %w", err))
	}
	if o.replicas < 1 {
		errs = append(errs, fmt.Errorf("--replicas %d: must be at least 1", o.replicas))
	}
	if len(o.servers) > 0 && f.Changed("replicas") {
		errs = append(errs, errors.New("--replicas and --server: the servers' DP ranks are the replicas; give one"))
	}
	if o.verify && len(o.servers) > 0 {
		errs = append(errs, errors.New("--verify runs the embedded simulated cluster, which cannot take a real server's KV figures; use it with --profile and --replicas"))
	}
	if o.verify && sc.Shape == loadgen.ShapeAgent {
		errs = append(errs, fmt.Errorf("--verify: not for scenario %q of shape agent (session trees) yet: the agreement it judges (TTFB p50 within 15 %%, prefix hits within 3 points) was measured on chain sessions only (internal/run/bench agreement_test.go)", sc.Name))
	}
	if f.Changed("sessions") && o.c.InverseSessions < 1 {
		errs = append(errs, fmt.Errorf("--sessions %d: must be at least 1", o.c.InverseSessions))
	}
	for _, bad := range []struct {
		name string
		v    int
	}{{"seeds", o.c.Seeds}, {"start", o.c.Start}, {"max-sessions", o.c.MaxSessions}, {"resolution", o.c.Resolution}, {"max-replicas", o.c.MaxReplicas}, {"max-num-seqs", o.maxNumSeqs}} {
		if f.Changed(bad.name) && bad.v < 1 {
			errs = append(errs, fmt.Errorf("--%s %d: must be at least 1", bad.name, bad.v))
		}
	}
	if f.Changed("warmup") {
		if o.warmup < 0 {
			errs = append(errs, fmt.Errorf("--warmup %s: must not be negative", o.warmup))
		}
		o.c.Warmup = o.warmup
	} else {
		o.c.Warmup = -1
	}
	if o.c.Budget < 0 {
		errs = append(errs, fmt.Errorf("--budget %s: must not be negative", o.c.Budget))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return nil
}

// run answers the question and prints and writes the answer.
func (o *planFlags) run(cmd *cobra.Command) error {
	if err := o.config(cmd); err != nil {
		return err
	}
	var err error
	if len(o.servers) > 0 {
		var header http.Header
		if o.apiKey != "" {
			header = http.Header{"Authorization": {"Bearer " + o.apiKey}}
		}
		o.c.Fleet, err = plan.FleetFromServers(cmd.Context(), nil, o.servers, header, o.profile, o.maxNumSeqs)
	} else {
		o.c.Fleet, err = plan.FleetFromProfile(o.profile, o.replicas, o.maxNumSeqs)
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if err := plan.WriteFleet(w, o.c.Fleet); err != nil {
		return err
	}
	o.c.Progress = cmd.ErrOrStderr()
	res, err := plan.Run(cmd.Context(), o.c)
	if errors.Is(err, plan.ErrNoPoint) {
		return &exitError{code: ExitNoPlan, err: fmt.Errorf("%w; nothing written", err)}
	}
	if errors.Is(err, plan.ErrBudget) {
		return fmt.Errorf("%w; nothing written (a larger --budget, or a smaller --max-sessions)", err)
	}
	if err != nil {
		return err
	}
	var vs []plan.Verification
	if o.verify {
		if vs, err = plan.Verify(cmd.Context(), res, o.verifySpeed, cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	if err := plan.WriteTable(w, res); err != nil {
		return err
	}
	if o.verify {
		if err := plan.WriteVerification(w, vs, o.verifySpeed); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	paths, err := plan.Write(o.out, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", strings.Join(paths, ", "))
	return nil
}
