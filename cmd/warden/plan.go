package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/bench"
	"github.com/lmwarden/warden/internal/plan"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim"
)

func newPlanCmd() *cobra.Command {
	var (
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
	)
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
--seeds seeds (1, 2, ... from --seed). The search gallops (replicas, 2x, 4x ...
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

Writes plan.csv (the answer per policy), points.csv (every point) and plan.png
(each SLO metric vs sessions per policy, knee ringed) into --out, only when the
search succeeds. --verify runs each knee once more over HTTP (the embedded
simulated cluster and router) and prints both worlds.

Examples:
  warden plan                                     # reference workload, 4 x a4000-qwen3-4b
  warden plan --scenario scenarios/fleet-7x5090.yaml --profile rtx5090-27b-fp8kv --replicas 7
  warden plan --slo ttfb_p95=5s,goodput=0.95 --sessions 64
  warden plan --server http://gpu1:8000 --server http://gpu2:8000 --max-num-seqs 64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			var errs []error
			sc := loadgen.DefaultScenario()
			if scenarioPath != "" {
				var err error
				if sc, err = loadgen.LoadScenario(scenarioPath); err != nil {
					return err
				}
			}
			c.Scenario = sc
			switch {
			case f.Changed("slo") && f.Changed("slo-file"):
				errs = append(errs, errors.New("--slo and --slo-file: give one"))
			case f.Changed("slo-file"):
				s, err := plan.LoadSLO(sloFile)
				c.SLO, errs = s, append(errs, err)
			case f.Changed("slo"):
				s, err := plan.ParseSLO(sloText)
				c.SLO, errs = s, append(errs, err)
			default:
				c.SLO = plan.DefaultSLO()
			}
			for _, n := range policies {
				p, err := plan.LookupPolicy(strings.TrimSpace(n))
				if err != nil {
					errs = append(errs, fmt.Errorf("--policies: %w", err))
					continue
				}
				c.Policies = append(c.Policies, p)
			}
			if _, err := sim.LookupProfile(profile); err != nil {
				errs = append(errs, fmt.Errorf("--profile: %w", err))
			}
			if replicas < 1 {
				errs = append(errs, fmt.Errorf("--replicas %d: must be at least 1", replicas))
			}
			if len(servers) > 0 && f.Changed("replicas") {
				errs = append(errs, errors.New("--replicas and --server: the servers' DP ranks are the replicas; give one"))
			}
			if verify && len(servers) > 0 {
				errs = append(errs, errors.New("--verify runs the embedded simulated cluster, which cannot take a real server's KV figures; use it with --profile and --replicas"))
			}
			if f.Changed("sessions") && c.InverseSessions < 1 {
				errs = append(errs, fmt.Errorf("--sessions %d: must be at least 1", c.InverseSessions))
			}
			for _, bad := range []struct {
				name string
				v    int
			}{{"seeds", c.Seeds}, {"start", c.Start}, {"max-sessions", c.MaxSessions}, {"resolution", c.Resolution}, {"max-replicas", c.MaxReplicas}, {"max-num-seqs", maxNumSeqs}} {
				if f.Changed(bad.name) && bad.v < 1 {
					errs = append(errs, fmt.Errorf("--%s %d: must be at least 1", bad.name, bad.v))
				}
			}
			if f.Changed("warmup") {
				if warmup < 0 {
					errs = append(errs, fmt.Errorf("--warmup %s: must not be negative", warmup))
				}
				c.Warmup = warmup
			} else {
				c.Warmup = -1
			}
			if c.Budget < 0 {
				errs = append(errs, fmt.Errorf("--budget %s: must not be negative", c.Budget))
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			var err error
			if len(servers) > 0 {
				var header http.Header
				if apiKey != "" {
					header = http.Header{"Authorization": {"Bearer " + apiKey}}
				}
				c.Fleet, err = plan.FleetFromServers(cmd.Context(), nil, servers, header, profile, maxNumSeqs)
			} else {
				c.Fleet, err = plan.FleetFromProfile(profile, replicas, maxNumSeqs)
			}
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if err := plan.WriteFleet(w, c.Fleet); err != nil {
				return err
			}
			c.Progress = cmd.ErrOrStderr()
			res, err := plan.Run(cmd.Context(), c)
			if errors.Is(err, plan.ErrNoPoint) {
				return &exitError{code: ExitNoPlan, err: fmt.Errorf("%w; nothing written", err)}
			}
			if err != nil {
				return err
			}
			var vs []plan.Verification
			if verify {
				if vs, err = plan.Verify(cmd.Context(), res, verifySpeed, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			if err := plan.WriteTable(w, res); err != nil {
				return err
			}
			if verify {
				if err := plan.WriteVerification(w, vs, verifySpeed); err != nil {
					return err
				}
			}
			if out == "" {
				return nil
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			paths, err := plan.Write(out, res)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", strings.Join(paths, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", bench.DefaultProfile, "simulator profile (step costs; with --replicas also the KV cache): "+strings.Join(sim.ProfileNames(), ", "))
	f.IntVar(&replicas, "replicas", bench.DefaultSimReplicas, "replicas of --profile")
	f.IntVar(&maxNumSeqs, "max-num-seqs", 0, fmt.Sprintf("max_num_seqs per engine (default %d for a profile, the reference server; 256, vLLM's default, with --server)", sim.DefaultMaxNumSeqs))
	f.StringSliceVar(&servers, "server", nil, "real vLLM server base URL(s) to read the fleet from (/metrics, /v1/models)")
	f.StringVar(&apiKey, "api-key", "", "with --server: sent as \"Authorization: Bearer KEY\"")
	f.StringVar(&scenarioPath, "scenario", "", "workload scenario YAML (default: the built-in reference workload)")
	f.StringVar(&sloText, "slo", "", "SLO terms, e.g. ttfb_p95=10s,goodput=0.9 (default "+plan.DefaultSLO().String()+")")
	f.StringVar(&sloFile, "slo-file", "", "SLO as a YAML file with the --slo keys")
	f.StringSliceVar(&policies, "policies", plan.DefaultPolicies, "policies to compare: shortest-queue (affinity off), admission-fit, or a router policy (working-set, cold-move, sticky, session-hash)")
	f.IntVar(&c.Seeds, "seeds", plan.DefaultSeeds, "seeds per point")
	f.Uint64Var(&c.Seed, "seed", 0, "first seed (default the scenario's)")
	f.DurationVar(&warmup, "warmup", 0, "unmeasured start of every point (default the scenario's warmup, or 1m when it has none)")
	f.IntVar(&c.Start, "start", 0, "first point of the search (default: one session per replica; with --sessions: --replicas)")
	f.IntVar(&c.MaxSessions, "max-sessions", 0, fmt.Sprintf("largest point tried (default %d x replicas)", plan.DefaultMaxSessionsPerReplica))
	f.IntVar(&c.Resolution, "resolution", 1, "bisect until the knee is known to this many sessions")
	f.IntVar(&c.InverseSessions, "sessions", 0, "inverse question: the replicas needed for this many sessions")
	f.IntVar(&c.MaxReplicas, "max-replicas", plan.DefaultMaxReplicas, "with --sessions: most replicas tried")
	f.DurationVar(&c.Budget, "budget", 0, "wall-time budget of the search (0: none); past it the search stops and reports the bracket reached")
	f.StringVar(&out, "out", "", "directory for plan.csv, points.csv and plan.png (default: print only)")
	f.BoolVar(&verify, "verify", false, "run each knee again over HTTP on the embedded cluster and print both worlds")
	f.Float64Var(&verifySpeed, "verify-speed", plan.DefaultVerifySpeed, "with --verify: the HTTP world's speed (simulated seconds per wall second)")
	return cmd
}
