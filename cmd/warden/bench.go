package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/run/bench"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/loadgenhttp"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim"
)

func newBenchCmd() *cobra.Command {
	var (
		o  bench.Options
		bf benchFlags
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the closed-loop Claude Code-style benchmark, affinity off vs on",
		Long:  benchLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &o, &bf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&bf.scenarioPath, "scenario", "", "scenario YAML file (default: the built-in reference workload, scenarios/claude-code-reference.yaml)")
	f.Uint64Var(&bf.seed, "seed", 0, "override the scenario's seed")
	f.IntSliceVar(&bf.stages, "stages", nil, "override the stages (concurrent sessions), e.g. 4,8,16")
	f.StringSliceVar(&bf.variants, "variants", nil, "override the variants (router affinity per pass), e.g. off or on; two runs (--variants off, then --variants on) compare with warden compare")
	f.StringVar(&o.Engine, "engine", "auto", "with --replicas: the servers' engine, auto (detect each: /v1/models owner, /metrics names, /props, /server_info, /version), vllm, sglang or llamacpp")
	f.StringVar(&bf.stageDur, "stage-duration", "", "override the stage duration (simulated), e.g. 3m")
	f.BoolVar(&o.Virtual, "virtual", false, "run in deterministic virtual time (no HTTP)")
	f.StringSliceVar(&o.Replicas, "replicas", nil, "real vLLM servers: comma-separated base URLs (or name=URL)")
	f.IntVar(&o.DPRanks, "dp-ranks", 0, "with one --replicas URL: number of data-parallel ranks behind it")
	f.StringVar(&o.APIKey, "api-key", "", "with --replicas: the key of servers started with vllm serve --api-key, sent as \"Authorization: Bearer KEY\" on /v1 requests (default $VLLM_API_KEY)")
	f.BoolVar(&o.SkipPinningCheck, "skip-pinning-check", false, "with --dp-ranks: do not check (2 one-token requests per rank) that the server honours X-Data-Parallel-Rank; without this flag a server that ignores it stops the run")
	f.StringVar(&o.RouterURL, "router", "", "an already running warden router's API root; URL1,URL2,... spreads the turns over several routers sharing state (round robin per turn, as behind an L4 balancer)")
	f.StringVar(&o.AdminURL, "admin-url", "", "with --router: its admin API root (e.g. http://127.0.0.1:8081); with several routers one per router, same order")
	f.StringVar(&o.AdminToken, "admin-token", "", "with --router: its admin bearer token")
	f.IntVar(&o.SimReplicas, "sim-replicas", bench.DefaultSimReplicas, "simulated replicas")
	f.StringVar(&o.Profile, "profile", bench.DefaultProfile, "simulator profile: "+strings.Join(sim.ProfileNames(), ", "))
	f.Float64Var(&o.Speed, "speed", bench.DefaultSpeed, "simulator speed: simulated seconds per wall second (HTTP mode)")
	f.IntVar(&o.MaxNumSeqs, "max-num-seqs", 0, fmt.Sprintf("max_num_seqs of each engine (simulator) or of the --replicas servers, for the router's auto overflow threshold (default %d, the reference server, for the simulator; %d, vLLM's default, with --replicas)", sim.ReferenceMaxNumSeqs, router.VLLMDefaultMaxNumSeqs))
	f.IntVar(&o.OverflowThreshold, "overflow-threshold", 0, "router overflow threshold in in-flight requests (0 = auto: max_num_seqs/4)")
	f.StringVar(&o.Policy, "policy", router.DefaultAffinityPolicy, "router policy while affinity is on: "+strings.Join(router.PolicyNames(), ", ")+" (docs/routing.md)")
	f.StringVar(&o.Subagents, "subagents", router.SubagentsKeep, "router rule for Claude Code subagents (X-Claude-Code-Agent-Id): keep (under the parent's key, on its replica), split (keys of their own, placed as new conversations; split_subagents) or follow (keys of their own, first call on the parent's replica while under the overflow threshold; follow_subagents)")
	f.StringVar(&o.Keyless, "keyless", router.DefaultKeyless, "router placement of requests without a session key while affinity is on: "+strings.Join(router.KeylessNames(), ", ")+" (docs/routing.md \"Keyless placement\")")
	f.StringVar(&o.Admission.Mode, "admission", router.AdmissionOff, "router admission gate: off, or fit (hold a new conversation until its working set fits a replica's KV cache; docs/routing.md \"Admission\")")
	f.Float64Var(&o.Admission.FillTarget, "admission-fill", router.DefaultFillTarget, "with --admission fit: share of each replica's KV cache the working sets may fill")
	f.DurationVar(&o.Admission.MaxHold, "admission-max-hold", router.DefaultMaxHold, "with --admission fit: longest wait of a new conversation (negative: no limit)")
	f.IntVar(&o.Admission.MaxQueue, "admission-max-queue", router.DefaultMaxQueue, "with --admission fit: most waiting conversations (negative: no limit)")
	f.StringVar(&o.Admission.OnLimit, "admission-on-limit", router.AdmitLimitAdmit, "with --admission fit: past max hold or max queue, admit or refuse (OpenAI 429, Anthropic 529)")
	f.DurationVar(&o.Admission.KeepAliveAfter, "admission-keepalive-after", router.DefaultKeepAliveAfter, "with --admission fit: a held streaming turn gets its 200 and the API's keep-alive events after this long held (negative: never, and holds are capped at 4m)")
	f.StringVar(&o.OutDir, "out", "", "results directory (default results/<run-id>)")
	bf.tr.register(f)
	f.DurationVar(&bf.sloTTFB, "slo-ttfb", 0, "goodput SLO: a turn's TTFB at most this (the scenario's slo.ttfb; the report's goodput columns)")
	f.DurationVar(&bf.sloTPOT, "slo-tpot", 0, "goodput SLO: a turn's time per output token at most this (slo.tpot)")
	f.StringVar(&o.RunID, "run-id", "", "run id recorded in the manifest (default: the UTC start time, 20060102-150405)")
	return cmd
}

// benchFlags holds the bench flags that override the scenario.
type benchFlags struct {
	scenarioPath string
	seed         uint64
	stageDur     string
	stages       []int
	variants     []string
	tr           traceFlags
	sloTTFB      time.Duration
	sloTPOT      time.Duration
}

// benchLong is the bench command's help text.
var benchLong = `Runs synthetic Claude Code sessions in a closed loop (a shared ~3.5k-token system
prompt, a unique ~6k-token first message, then five ~400-token turns, up to 256
output tokens per turn, the whole history re-sent every turn; a finished session
is replaced at once) at 4, 8, 16, 24 and 32 concurrent sessions for 3 simulated
minutes each, first with session affinity off (vLLM-style shortest queue), then on.
It measures per stage: sessions/h, output tokens/min, TTFB p50/p95 (to the first
non-empty token), replicas busy, prefix-cache hits (vLLM's own counters) and
stayed-on-replica %, and writes results/<run-id>/ with results.csv, summary.md and
PNG figures.

Targets:
  (default)              an embedded simulated 4-replica vLLM cluster and an
                         in-process router, all real HTTP servers on loopback
  --virtual              the same engines, router policy and sessions in virtual
                         time: no HTTP, deterministic, seconds of wall time
  --replicas URL,...     real vLLM servers; an in-process router is put in front
  --replicas URL --dp-ranks N
                         one vLLM server with N data-parallel ranks
  --router URL --admin-url URL --replicas URL,...
                         an already running warden router (before each variant
                         its admin API forgets session homes and switches
                         affinity); replicas are scraped for /metrics
  --router URL1,URL2 --admin-url A1,A2 --replicas URL,...
                         several routers sharing state (state: redis://...):
                         turns go round robin per turn over the routers
  --router URL --admin-url URL
                         the same without --replicas: no engine /metrics, so
                         replicas busy and prefix hits % are n/a (stayed %
                         from the router's X-Warden-Replica header)

API: the sessions speak the scenario's api: (scenarios/README.md):
openai-chat (POST /v1/chat/completions, the default), anthropic-messages
(POST /v1/messages, as Claude Code sends it) or openai-responses (POST
/v1/responses, as Codex sends it); the session key travels as the scenario's
session_header (or --session-header: claude-code, x-session-id, codex, none).

Simulated network and API server: a scenario's rtt (client-server round trip)
and api_servers (vLLM's API-server processes doing tokenization, the chat
template and output handling) are applied in simulated time by the simulator's
two worlds (default and --virtual) alike. Against real servers (--replicas,
--router) they are NOT added: the real network and API server provide them,
and the run's manifest notes that they were dropped.

Examples:
  warden bench                                       # reference benchmark, simulator
  warden bench --virtual                             # same, in virtual time
  warden bench --scenario scenarios/smoke.yaml --speed 20
  warden bench --replicas http://gpu:8000 --dp-ranks 4 --stage-duration 3m
  warden bench --virtual --trace conversation_trace.jsonl --trace-mode session
  warden bench --virtual --trace ../shared/fixtures/traces/claude-code/ --token-scale 0.125 --max-gap 60s

Trace replay (--trace FILE, or trace: in a scenario; docs/traces.md): requests
of a Mooncake-format trace instead of synthetic sessions, prompts synthesized
from the block ids, exactly output_length tokens each; --trace-mode timestamp
(open loop at the recorded times) or session (a conversation's next turn at the
previous turn's end plus the recorded gap). Over HTTP the prompts are first
calibrated through the server's /tokenize (the manifest records the error).

Agent sessions (--trace DIR of Claude Code traces, kv-cache-tester format;
docs/traces.md "Agent sessions"): each file one session tree, --live trees at
once; a call is sent at the end of what it follows plus the recorded gap
(--max-gap caps it), subagents run in parallel between two parent calls and the
next parent call waits for all of them; subagent calls carry
X-Claude-Code-Agent-Id beside the parent's session id. --token-scale fits the
prompts to a smaller max_model_len; calls still too long are skipped
(--over-length). --subagents keep|split|follow sets the router's rule for them.

A run that finished but has a stage without a successful turn, or turn
accounting that does not add up (the checks of 'warden report --check'), exits
3 with its results written. Ctrl-C stops after writing what is complete.
Over HTTP, a run in which ` + strconv.Itoa(loadgenhttp.DefaultMaxConsecutiveFailures) + ` turns in a row fail (a wrong model, a dead server;
loadgenhttp.DefaultMaxConsecutiveFailures, not configurable here; a successful
turn resets the count) stops at once, exits 1 and records why in manifest.json
("stopped": reason and rule) and summary.md. The virtual world has no such rule.`

// runBench is bench's RunE: the scenario with the flags applied, validated,
// then bench.Run and the accounting check of a finished run.
func runBench(cmd *cobra.Command, o *bench.Options, bf *benchFlags) error {
	if os.Getenv("GOGC") == "" {
		// Fewer GC cycles, a steadier client clock: with 1,000 sessions
		// BenchmarkCapacity measured the harness's first-token overhead p99
		// 2.0-3.8 ms at the default 100 and 0.7-1.4 ms at 400 (the heap may
		// grow to about 5x the live data; set GOGC to override).
		debug.SetGCPercent(400)
	}
	if err := checkStages(bf.stages); err != nil {
		return err
	}
	sc := loadgen.DefaultScenario()
	if bf.scenarioPath != "" {
		var err error
		if sc, err = loadgen.LoadScenario(bf.scenarioPath); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("seed") {
		sc.Seed = bf.seed
	}
	if len(bf.stages) > 0 {
		sc.Stages = bf.stages
	}
	if len(bf.variants) > 0 {
		sc.Variants = bf.variants
	}
	if bf.stageDur != "" {
		d, err := parseDuration(bf.stageDur)
		if err != nil {
			return fmt.Errorf("--stage-duration: %w", err)
		}
		sc.StageDuration = d
	}
	if err := bf.tr.apply(cmd, sc); err != nil {
		return err
	}
	if cmd.Flags().Changed("slo-ttfb") || cmd.Flags().Changed("slo-tpot") {
		slo := loadgen.SLO{}
		if sc.SLO != nil {
			slo = *sc.SLO
		}
		if cmd.Flags().Changed("slo-ttfb") {
			slo.TTFB = bf.sloTTFB
		}
		if cmd.Flags().Changed("slo-tpot") {
			slo.TPOT = bf.sloTPOT
		}
		sc.SLO = &slo
	}
	if err := sc.Validate(); err != nil {
		return err
	}
	if err := checkBenchFlags(cmd, o); err != nil {
		return err
	}
	if sc.Trace != nil {
		// Read the whole trace before anything is written: a bad line
		// stops the run with nothing half-written.
		if _, err := loadgen.CheckTrace(sc); err != nil {
			return err
		}
	}
	o.Scenario = sc
	o.Progress = cmd.ErrOrStderr()
	o.Report = cmd.OutOrStdout()
	dir, err := bench.Run(cmd.Context(), *o)
	if _, statErr := os.Stat(filepath.Join(dir, "manifest.json")); dir != "" && statErr == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "results: %s\n", dir)
	}
	if err == nil && cmd.Context().Err() == nil {
		// The run finished: hold it to what `report --check` asks, so a
		// benchmark in which a stage had no successful turn (every request
		// failed or timed out) does not pass as a result.
		if cerr := checkRun(dir); cerr != nil {
			return &exitError{code: ExitAccounting, err: fmt.Errorf("the run finished but its results are not usable (see %s): %w", dir, cerr)}
		}
	}
	return err
}

// checkBenchFlags rejects out-of-range values instead of silently replacing them
// with defaults, and flags that have no effect in the chosen mode.
func checkBenchFlags(cmd *cobra.Command, o *bench.Options) error {
	f := cmd.Flags()
	var errs []error
	if f.Changed("speed") && o.Speed <= 0 {
		errs = append(errs, fmt.Errorf("--speed %g: must be a positive number of simulated seconds per wall second", o.Speed))
	}
	if f.Changed("sim-replicas") && o.SimReplicas <= 0 {
		errs = append(errs, fmt.Errorf("--sim-replicas %d: must be at least 1", o.SimReplicas))
	}
	if f.Changed("max-num-seqs") && o.MaxNumSeqs <= 0 {
		errs = append(errs, fmt.Errorf("--max-num-seqs %d: must be at least 1", o.MaxNumSeqs))
	}
	if o.OverflowThreshold < 0 {
		errs = append(errs, fmt.Errorf("--overflow-threshold %d: must be 0 (auto) or positive", o.OverflowThreshold))
	}
	switch {
	case f.Changed("api-key") && len(o.Replicas) == 0:
		errs = append(errs, errors.New("--api-key goes with --replicas (real servers); the embedded simulator needs none"))
	case !f.Changed("api-key") && len(o.Replicas) > 0:
		o.APIKey = os.Getenv("VLLM_API_KEY") // not the flag's default: --help would print it
	}
	if f.Changed("dp-ranks") {
		switch {
		case o.DPRanks <= 0:
			errs = append(errs, fmt.Errorf("--dp-ranks %d: must be at least 1", o.DPRanks))
		case len(o.Replicas) != 1:
			errs = append(errs, fmt.Errorf("--dp-ranks needs exactly one --replicas URL (got %d)", len(o.Replicas)))
		case o.Engine != "" && o.Engine != "auto" && o.Engine != "vllm":
			errs = append(errs, fmt.Errorf("--dp-ranks with --engine %s: DP ranks are vLLM's only (rank pinning by X-Data-Parallel-Rank, per-rank /metrics labels)", o.Engine))
		}
	}
	for _, spec := range o.Replicas {
		if _, err := routerhttp.ParseReplicaSpec(spec); err != nil {
			errs = append(errs, fmt.Errorf("--replicas: %w", err))
		}
	}
	if o.RouterURL != "" {
		for _, u := range strings.Split(o.RouterURL, ",") {
			if err := routerhttp.CheckUpstreamURL(strings.TrimSpace(u)); err != nil {
				errs = append(errs, fmt.Errorf("--router: %w", err))
			}
		}
	}
	if (f.Changed("admin-url") || f.Changed("admin-token")) && o.RouterURL == "" {
		errs = append(errs, errors.New("--admin-url and --admin-token go with --router"))
	}
	if o.Virtual && (len(o.Replicas) > 0 || o.RouterURL != "") {
		errs = append(errs, errors.New("--virtual runs the embedded engines in virtual time; it cannot be combined with --replicas or --router"))
	}
	if _, err := sim.LookupProfile(o.Profile); err != nil {
		errs = append(errs, fmt.Errorf("--profile: %w", err))
	}
	if !router.ValidPolicy(o.Policy) {
		errs = append(errs, fmt.Errorf("--policy %q: unknown (have %s)", o.Policy, strings.Join(router.PolicyNames(), ", ")))
	}
	if o.RouterURL != "" && f.Changed("policy") {
		errs = append(errs, errors.New("--policy configures the embedded router; with --router set it on that router (its config's policy:, or PUT /admin/models/*/policy)"))
	}
	if err := o.Admission.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--admission flags: %w", err)) // names the setting (mode, fill_target, on_limit)
	}
	var tuned []string // admission settings given, which only --admission fit uses
	for _, name := range admissionFlags {
		if f.Changed(name) {
			tuned = append(tuned, "--"+name)
		}
	}
	switch {
	case o.RouterURL != "" && (f.Changed("admission") || len(tuned) > 0):
		errs = append(errs, errors.New("--admission and its settings configure the embedded router; with --router set them on that router (its config's admission:, or PUT /admin/models/*/admission)"))
	case len(tuned) > 0 && o.Admission.Mode != router.AdmissionFit:
		errs = append(errs, fmt.Errorf("%s: need --admission fit (the admission gate is %s, so they would change nothing)", strings.Join(tuned, ", "), cmp.Or(o.Admission.Mode, router.AdmissionOff)))
	}
	return errors.Join(errs...)
}

// admissionFlags are the bench flags that tune the admission gate (without the
// gate on they change nothing).
var admissionFlags = []string{"admission-fill", "admission-max-hold", "admission-max-queue", "admission-on-limit", "admission-keepalive-after"}
