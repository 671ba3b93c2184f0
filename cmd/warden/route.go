package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
)

// routeOpts are warden route's flags.
type routeOpts struct {
	configPath   string
	replicas     []string
	affinity     string
	listen       string
	adminAddr    string
	adminTok     string
	thresholdArg string // auto, 0 (auto) or a positive number (router.ParseThreshold)
	maxNumSeqs   int
	skipPin      bool
	speed        float64
	seed         uint64
	bodyRead     time.Duration
	bodyMem      int64
	ejectAfter   int
	// seedFrom says where config took the seed from: "flag", "config" or
	// "clock" (logged at start).
	seedFrom  string
	state     string
	admission string
	record    string // --record FILE: write the traffic as a trace
	accessLog string // --access-log FILE|-: a JSON line per request
	// drainDelay and drainTimeout: the shutdown's two steps (Config.DrainDelay,
	// Config.DrainTimeout).
	drainDelay, drainTimeout time.Duration
}

// routeLong is warden route --help.
const routeLong = `Proxies OpenAI (/v1/chat/completions, /v1/completions, /v1/responses) and
Anthropic (/v1/messages, /v1/messages/count_tokens) requests to vLLM replicas. A new
conversation goes to the least-loaded replica and stays there, keyed by the session
id the client sends, first found (Claude Code: X-Claude-Code-Session-Id or
metadata.user_id; Codex: session-id / thread-id headers, from older releases
session_id / conversation_id, else the body's prompt_cache_key; others:
X-Session-ID or the config's session_headers, then the OpenAI user field with
use_openai_user; a Responses continuation follows its previous_response_id); a
request leaves its replica when that replica has more requests in flight than the
overflow threshold (auto: max_num_seqs/4), and, under the default working-set
policy, a conversation also moves when its replica holds more live context than
its KV cache while another has room. With affinity off it balances like
vLLM's data-parallel balancer (shortest queue).

Every response carries X-Warden-Replica (who served it) and X-Warden-Decision
(sticky, placed, overflow, moved, rehome, no-key, balanced). /metrics has the router's
Prometheus metrics. GET /livez is process liveness (200 while the router serves,
whatever its replicas do: the one for a probe that restarts it); GET /health is
200, or 503 while a model has no healthy replica; GET /ready is readiness: 200
while the router takes new work, 503 once its shutdown began or while a model has
no healthy replica. With affinity on the policy is working-set (docs/routing.md);
cold-move, sticky, session-hash and shortest-queue are selectable per model, in the YAML
config (policy:) or at run time. The admin API (loopback by default) switches
affinity, the policy and the threshold per model at run time:
  curl -X PUT -H 'Authorization: Bearer TOKEN' -d '{"enabled":false}' \
       http://127.0.0.1:8081/admin/models/MODEL/affinity
  curl -X PUT -H 'Authorization: Bearer TOKEN' -d '{"policy":"sticky"}' \
       http://127.0.0.1:8081/admin/models/MODEL/policy
  curl -H 'Authorization: Bearer TOKEN' http://127.0.0.1:8081/status

Either a YAML config (--config, see docs/router.md) or replicas on the command line.
Settings layer as defaults, then the file, then flags: --affinity,
--overflow-threshold, --max-num-seqs, --admission, --listen, --admin-listen,
--admin-token, --body-read-timeout, --body-memory-bytes,
--eject-consecutive-failures, --drain-delay, --drain-timeout, --seed, --state, --speed and --skip-pinning-check given
with --config override the file (for every model). Without a seed in the file or --seed, the tie-break seed is drawn from
the clock at start (and logged), so restarts do not repeat the same tie-breaks.
  warden route --replica http://gpu0:8000 --replica http://gpu1:8000
  warden route --replica http://gpu:8000,dp_ranks=4      # one DP=4 server

Each replica's engine (vLLM, SGLang, llama.cpp) is detected from its /metrics
unless the config says engine: (docs/router.md section 12); a model whose
replicas are all llama-servers is slot-based: auto threshold slots - 1, the
slots read from GET /props. A replica whose /metrics cannot be read says why in
/status (scrape_error) and once in the log.

--record FILE writes the requests served as a trace (Mooncake JSONL plus salted
session ids; no text, no keys) that warden bench --trace replays: per request its
arrival, prompt and output tokens from the usage, and a block id per 512 prompt
tokens hashed over the prompt as the engine sees it (system prompt, tools, then
every message and block: text, tool calls and results, thinking), so a
conversation's next turn shares its previous turn's full blocks and conversations
share their system prompt and tools. Each line is written as its request ends
(after every earlier arrival, or a minute at most behind one still in flight), so
a crash loses only the requests in flight. docs/traces.md has the details.

A server with dp_ranks is checked once at start: two one-token requests pinned to
each rank must be counted by that rank's engine (vllm:request_success_total). A
server that ignores X-Data-Parallel-Rank is logged as an error (the router cannot
place conversations on it); --skip-pinning-check turns the check off.

Shutdown (SIGTERM or Ctrl-C): /ready answers 503 at once while the listener still
serves for --drain-delay (0; behind a load balancer or Kubernetes Service give it
the time the endpoints take to update, e.g. 5s); then the listener closes, requests
held by admission get 503 with Retry-After (OpenAI or Anthropic error shape), and
requests in flight get --drain-timeout (10s) to finish; past it they are cut. The
last log line counts what finished, what was cut and what was refused. Exit 0 when
nothing was cut, 1 when something was. A second Ctrl-C exits at once.`

func newRouteCmd() *cobra.Command {
	var o routeOpts
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Run the session-affinity router in front of vLLM replicas",
		Long:  routeLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.config(cmd.Flags())
			if err != nil {
				return err
			}
			rt, err := routerhttp.New(cfg)
			if err != nil {
				return err
			}
			slog.Info("tie-break seed", "seed", cfg.Seed, "from", o.seedFrom)
			if o.accessLog != "" {
				closeLog, err := startAccessLog(rt, o.accessLog, cmd.OutOrStdout())
				if err != nil {
					return err
				}
				defer closeLog()
			}
			if o.record != "" {
				// O_EXCL: a recording never overwrites an earlier one.
				f, err := os.OpenFile(o.record, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					return fmt.Errorf("--record: %w", err)
				}
				rec, err := routerhttp.NewRecorder(f)
				if err != nil {
					f.Close()
					return err
				}
				rt.SetRecorder(rec)
				slog.Info("recording traffic as a trace (Mooncake format + session ids; no text, no keys)", "file", o.record)
				err = serveRouter(cmd.Context(), rt, cfg)
				rt.Proxy().SetRecorder(nil)
				cerr := rec.Close()
				slog.Info("recording closed", "file", o.record, "requests", rec.Written, "not_recorded", rec.Dropped, "shifted", rec.Shifted)
				return errors.Join(err, cerr)
			}
			return serveRouter(cmd.Context(), rt, cfg)
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

func (o *routeOpts) bind(f *pflag.FlagSet) {
	f.StringVar(&o.configPath, "config", "", "router YAML config (models, replicas, thresholds); flags given with it override the file")
	f.StringArrayVar(&o.replicas, "replica", nil, "replica base URL, repeatable: URL, name=URL, or URL,dp_ranks=N")
	f.StringVar(&o.affinity, "affinity", "on", "session affinity: on or off (with --config: every model, over the file)")
	f.StringVar(&o.listen, "listen", routerhttp.DefaultListen, "API listen address")
	f.StringVar(&o.adminAddr, "admin-listen", routerhttp.DefaultAdminListen, "admin API listen address (keep it on loopback)")
	f.StringVar(&o.adminTok, "admin-token", "", "bearer token required by the admin API (recommended)")
	f.StringVar(&o.thresholdArg, "overflow-threshold", "auto", "in-flight requests above which a request leaves its replica (auto or 0: max_num_seqs/4; with --config: every model, over the file)")
	f.IntVar(&o.maxNumSeqs, "max-num-seqs", router.VLLMDefaultMaxNumSeqs, "the replicas' --max-num-seqs, for the auto threshold max_num_seqs/4 (vLLM's default is 256; the reference server in README.md runs 32; with --config: every model, over the file)")
	f.DurationVar(&o.bodyRead, "body-read-timeout", routerhttp.DefaultBodyReadTimeout, "longest a client may take to send a request body (408 past it; negative: none)")
	f.Int64Var(&o.bodyMem, "body-memory-bytes", routerhttp.DefaultBodyMemoryBytes, "memory all request bodies being read may hold together (503 with Retry-After past it)")
	f.IntVar(&o.ejectAfter, "eject-consecutive-failures", router.DefaultEjectConsecutiveFailures, "eject a replica after this many consecutive failed requests (5xx, broken connections) though its /health passes; negative: never (docs/router.md section 9)")
	f.Uint64Var(&o.seed, "seed", 0, "tie-break seed (model i uses seed+i); default: the config file's seed, else drawn from the clock at start (logged)")
	f.StringVar(&o.state, "state", "", "shared state for several routers: redis://[user:password@]host:port/db or rediss://; session homes, in-flight counts and live working sets are shared by every router naming it (docs/router.md); over the file's state:")
	f.StringVar(&o.record, "record", "", "write the requests served as a replayable trace to this new file, a line as each request ends (Mooncake JSONL + session ids; block ids over system, tools and messages; no text, no keys; warden bench --trace replays it; docs/traces.md)")
	f.StringVar(&o.accessLog, "access-log", "", "append a JSON line per request to this file (- for stdout): time, model, session and agent as SHA-256 prefixes, replica, decision, admission, status, TTFB, usage tokens; no text, no keys (docs/router.md)")
	f.StringVar(&o.admission, "admission", router.AdmissionOff, "admission gate: off, or fit (hold a new conversation until its working set fits a replica's KV cache; docs/routing.md \"Admission\"); with --config: every model's mode, over the file, keeping its other admission settings")
	f.DurationVar(&o.drainDelay, "drain-delay", 0, "at shutdown, how long /ready answers 503 while the listener still serves, before it closes (behind a load balancer: the time its endpoints take to update, e.g. 5s); over the file's drain_delay")
	f.DurationVar(&o.drainTimeout, "drain-timeout", routerhttp.DefaultDrainTimeout, "at shutdown, once the listener closed, how long requests in flight get to finish before they are cut; over the file's drain_timeout")
	f.Float64Var(&o.speed, "speed", 1, "simulated seconds per wall second of the router's clock: in front of `warden sim --speed N` give N, so idle windows, holds and rates are in the simulator's time (1 for real servers)")
	f.BoolVar(&o.skipPin, "skip-pinning-check", false, "do not check at start that each dp_ranks server honours X-Data-Parallel-Rank (2 one-token requests per rank; verdict in the log and /status)")
}

// config layers the router's settings: defaults, then the --config file (or the
// --replica list), then the flags given. With --replica every flag applies (its
// default is the default); with --config only the flags given do, over the file,
// for every model. The result is validated.
func (o *routeOpts) config(f *pflag.FlagSet) (routerhttp.Config, error) {
	var (
		cfg routerhttp.Config
		err error
	)
	on, err := parseOnOff(o.affinity)
	if err != nil {
		return cfg, fmt.Errorf("--affinity: %w", err)
	}
	switch {
	case o.configPath != "" && len(o.replicas) > 0:
		return cfg, errors.New("give either --config or --replica, not both")
	case o.configPath != "":
		if cfg, err = routerhttp.LoadConfig(o.configPath); err != nil {
			return cfg, err
		}
	case len(o.replicas) > 0:
		if cfg, err = routerhttp.ConfigForURLs(o.replicas, on); err != nil {
			return cfg, err
		}
	default:
		return cfg, errors.New("no replicas: give --replica URL (repeatable) or --config FILE")
	}
	switch o.admission {
	case router.AdmissionOff, router.AdmissionFit:
	default:
		return cfg, fmt.Errorf("--admission %q: want %s or %s", o.admission, router.AdmissionOff, router.AdmissionFit)
	}
	if !(o.speed > 0) || math.IsInf(o.speed, 0) {
		return cfg, fmt.Errorf("--speed %g: want a positive number of simulated seconds per wall second", o.speed)
	}
	cfg.Clock = simclock.NewScaled(o.speed)
	threshold, err := router.ParseThreshold(o.thresholdArg)
	if err != nil {
		return cfg, fmt.Errorf("--overflow-threshold %w", err)
	}
	given := func(name string) bool { return o.configPath == "" || f.Changed(name) }
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if given("affinity") {
			m.Affinity = &on
		}
		if f.Changed("admission") {
			m.Admission.Mode = o.admission
		}
		if f.Changed("max-num-seqs") {
			// Unset it stays 0 (the default), so a llama.cpp model learns its slots.
			m.MaxNumSeqs = o.maxNumSeqs
		}
		if given("overflow-threshold") {
			m.OverflowThreshold = routerhttp.Threshold(threshold)
		}
	}
	if f.Changed("listen") || cfg.Listen == "" {
		cfg.Listen = o.listen
	}
	if f.Changed("admin-listen") || cfg.AdminListen == "" {
		cfg.AdminListen = o.adminAddr
	}
	if f.Changed("body-read-timeout") || cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = o.bodyRead
	}
	if f.Changed("body-memory-bytes") || cfg.BodyMemoryBytes == 0 {
		cfg.BodyMemoryBytes = o.bodyMem
	}
	if f.Changed("eject-consecutive-failures") || cfg.EjectConsecutiveFailures == 0 {
		cfg.EjectConsecutiveFailures = o.ejectAfter
	}
	if f.Changed("drain-delay") {
		cfg.DrainDelay = o.drainDelay
	}
	if f.Changed("drain-timeout") || cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = o.drainTimeout
	}
	if o.adminTok != "" {
		cfg.AdminToken = o.adminTok
	}
	if o.skipPin {
		cfg.SkipPinningCheck = true
	}
	switch {
	case f.Changed("seed"):
		cfg.Seed, o.seedFrom = o.seed, "flag"
	case o.configPath != "" && cfg.FileSets("seed"):
		o.seedFrom = "config"
	default:
		// Without a seed every restart would repeat the same tie-breaks.
		cfg.Seed, o.seedFrom = clockSeed(), "clock"
	}
	if o.state != "" {
		cfg.State = o.state
	}
	if k := os.Getenv("VLLM_API_KEY"); k != "" && cfg.APIKey == "" {
		cfg.APIKey = k // the servers' key for the router's own /v1 requests
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("router config: %w", err)
	}
	return cfg, nil
}

// clockSeed is a tie-break seed drawn from the wall clock (never 0).
func clockSeed() uint64 {
	if n := uint64(time.Now().UnixNano()); n != 0 {
		return n
	}
	return 1
}

func parseOnOff(s string) (bool, error) {
	switch s {
	case "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q: want on or off", s)
}

// serveRouter runs the router's listeners (the admin one unless AdminListen is
// "-") and background loops until ctx is done, then shuts down in order:
// drain_delay, then drain_timeout for the requests in flight
// (Router.Serve).
func serveRouter(ctx context.Context, rt *routerhttp.Router, cfg routerhttp.Config) error {
	if cfg.AdminToken == "" && cfg.AdminListen != "-" {
		slog.Warn("the admin API has no bearer token: anyone who can reach it can switch affinity and thresholds; set --admin-token or admin_token", "admin", cfg.AdminListen)
	}
	return rt.ListenAndServe(ctx)
}

// startAccessLog opens path for appending ("-": out) and sets it as rt's access
// log; the returned func stops it, closes the file and logs the line count.
func startAccessLog(rt *routerhttp.Router, path string, out io.Writer) (func(), error) {
	w := out
	var f *os.File
	if path != "-" {
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("--access-log: %w", err)
		}
		w = f
	}
	l := routerhttp.NewAccessLog(w)
	rt.Proxy().SetAccessLog(l)
	slog.Info("access log: a JSON line per request (session and agent as SHA-256 prefixes; no text, no keys)", "file", path)
	return func() {
		rt.Proxy().SetAccessLog(nil)
		if f != nil {
			if err := f.Close(); err != nil {
				slog.Error("access log: closing", "file", path, "err", err)
			}
		}
		if err := l.Err(); err != nil {
			slog.Error("access log: lines were lost", "file", path, "err", err)
		}
		slog.Info("access log closed", "file", path, "lines", l.Written)
	}, nil
}
