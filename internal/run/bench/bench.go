// Package bench wires a whole benchmark run: it starts what the run needs (the
// embedded simulated vLLM cluster and the router, as real HTTP servers on loopback),
// or points at real servers, runs the harness over every variant, and makes the
// report. It owns process-level plumbing only; the policies, the engine, the
// harness and the report live in their own packages.
//
// Targets, in order of precedence:
//   - Virtual: the deterministic virtual-time world (internal/run/virtual), no HTTP.
//   - RouterURL: an already running warden router; affinity is switched through its
//     admin API (AdminURL, AdminToken); Replicas, when given, are scraped for
//     /metrics (without them the engine columns are n/a: NoReplicasNote).
//   - Replicas: real vLLM, SGLang or llama.cpp servers; an in-process router is
//     started in front of them.
//   - none: an embedded simulated cluster (SimReplicas x Profile at Speed) and an
//     in-process router in front of it.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/buildinfo"
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/run/virtual"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/loadgenhttp"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim"
)

// Defaults of a benchmark run.
const (
	// DefaultSpeed runs the embedded simulator 6x faster than wall time, so the
	// reference benchmark (2 variants x 5 stages x 3 simulated minutes = 30
	// simulated minutes) takes about 5 minutes of wall time.
	DefaultSpeed       = 6.0
	DefaultSimReplicas = 4
	DefaultProfile     = "a4000-qwen3-4b"
	// DefaultAdminToken protects the in-process router's admin API, which listens on
	// loopback only.
	DefaultAdminToken = "warden-bench"
)

// Options configures a run. Zero fields take the defaults above.
type Options struct {
	Scenario *loadgen.Scenario // required

	Virtual bool // run in virtual time (no HTTP)

	// Real servers: replica specs as routerhttp.ParseReplicaSpec takes them ("URL",
	// "name=URL", "URL,dp_ranks=N"). DPRanks, when > 0 and one URL is given, is the
	// number of DP ranks behind it.
	Replicas []string
	DPRanks  int
	// Engine is the servers' engine kind (engines.ParseKind): "" or "auto"
	// detects each server (engineapi.Probe), or "vllm", "sglang", "llamacpp".
	// The embedded simulator is vLLM.
	Engine string
	// APIKey, when set, is sent as "Authorization: Bearer <key>" on every /v1
	// request to real servers (turns, pre-flight, pinning probes), for servers
	// started with vllm serve --api-key. With an external router the router
	// forwards it.
	APIKey string
	// SkipPinningCheck skips the pre-flight check that a server with DP ranks
	// honours X-Data-Parallel-Rank (routerhttp.CheckDPPinning). Without it a server
	// that ignores the header stops the run: both variants would measure vLLM's
	// own balancer.
	SkipPinningCheck bool
	// External router: its API root, admin root and token.
	RouterURL  string
	AdminURL   string
	AdminToken string

	// Simulator.
	SimReplicas int
	Profile     string
	Speed       float64
	// MaxNumSeqs per engine, simulated or real; 0 means MaxNumSeqsFor.
	MaxNumSeqs int
	// OverflowThreshold of the router; 0 = auto (max_num_seqs/4).
	OverflowThreshold int
	// Policy the router uses while affinity is on (router.PolicyNames); "" means
	// router.DefaultAffinityPolicy. Ignored with an external router (RouterURL).
	Policy string
	// Keyless is the router's placement of requests without a session key
	// (router.KeylessNames); "" means router.DefaultKeyless.
	Keyless string
	// Subagents is the router's rule for Claude Code subagents
	// (X-Claude-Code-Agent-Id; router.SubagentRules): "" or keep (under the
	// parent's key), split, follow. Ignored with an external router.
	Subagents string
	// Admission configures the router's admission gate per model
	// (router.AdmissionConfig; off by default). Ignored with an external router.
	Admission router.AdmissionConfig

	maxNumSeqsGiven bool // MaxNumSeqs was set (not defaulted): slots do not replace it

	OutDir   string    // default results/<run-id>
	RunID    string    // default UTC time
	Progress io.Writer // progress lines; nil = none
	Report   io.Writer // where the results table is printed; nil = none
}

// MaxNumSeqsFor is the benchmark's max_num_seqs when none is given: the
// simulator's engines run sim.ReferenceMaxNumSeqs (32, the reference server) and
// the router is told so; real servers (Options.Replicas) are assumed to run
// router.VLLMDefaultMaxNumSeqs (256, vLLM's default), as `warden route` assumes.
func MaxNumSeqsFor(realServers bool) int {
	if realServers {
		return router.VLLMDefaultMaxNumSeqs
	}
	return sim.ReferenceMaxNumSeqs
}

// Run executes the benchmark and writes the results directory, then the report.
// It returns the directory. An interrupted run still writes what completed and
// returns an error wrapping context.Canceled.
func Run(ctx context.Context, o Options) (string, error) {
	if o.Scenario == nil {
		return "", errors.New("bench: no scenario")
	}
	if err := o.Scenario.Validate(); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	if o.RunID == "" {
		o.RunID = loadgen.NewRunID(time.Now())
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join("results", o.RunID)
	}
	if o.Profile == "" {
		o.Profile = DefaultProfile
	}
	if o.SimReplicas <= 0 {
		o.SimReplicas = DefaultSimReplicas
	}
	o.maxNumSeqsGiven = o.MaxNumSeqs > 0
	if o.MaxNumSeqs <= 0 {
		o.MaxNumSeqs = MaxNumSeqsFor(len(o.Replicas) > 0)
	}
	if o.Speed <= 0 {
		o.Speed = DefaultSpeed
	}
	if o.Policy == "" {
		o.Policy = router.DefaultAffinityPolicy
	}
	if o.Subagents != "" && !slices.Contains(router.SubagentRules, o.Subagents) {
		return "", fmt.Errorf("bench: subagent rule %q: want one of %s", o.Subagents, strings.Join(router.SubagentRules, ", "))
	}
	if o.Subagents == router.SubagentsKeep {
		o.Subagents = "" // the default, not recorded
	}
	if err := router.ValidKeyless(o.Keyless); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	if !router.ValidPolicy(o.Policy) {
		return "", fmt.Errorf("bench: policy %q is unknown (have %s)", o.Policy, strings.Join(router.PolicyNames(), ", "))
	}
	var err error
	switch {
	case o.Virtual:
		err = runVirtual(ctx, o)
	default:
		err = runHTTP(ctx, o)
	}
	if _, statErr := os.Stat(filepath.Join(o.OutDir, "manifest.json")); statErr == nil {
		out := o.Report
		if out == nil {
			out = io.Discard
		}
		if rerr := report.Generate(o.OutDir, out); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: report: %w", rerr))
		}
	}
	return o.OutDir, err
}

func versions() map[string]string {
	return map[string]string{"go": runtime.Version(), "warden": buildinfo.Version()}
}

func runVirtual(ctx context.Context, o Options) error {
	prof, err := sim.LookupProfile(o.Profile)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	out, err := loadgen.CreateResults(o.OutDir)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	_, err = virtual.Run(ctx, virtual.Config{
		Scenario:  o.Scenario,
		Replicas:  o.SimReplicas,
		Engine:    sim.EngineConfig{Profile: prof, MaxNumSeqs: o.MaxNumSeqs},
		Balancer:  router.BalancerConfig{MaxNumSeqs: o.MaxNumSeqs, OverflowThreshold: o.OverflowThreshold, Policy: o.Policy, Admission: o.Admission, Keyless: o.Keyless},
		Subagents: o.Subagents,
		Out:       out,
		Progress:  o.Progress,
		RunID:     o.RunID,
		Profile:   o.Profile,
		Policy:    o.Policy,
		Versions:  versions(),
	})
	return err
}

// listen starts an HTTP server for h on a free loopback port and returns its URL.
func listen(ctx context.Context, wg *sync.WaitGroup, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listening on loopback: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(ln)
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// NoReplicasNote is the manifest note of a run against an external router
// without --replicas: the harness has no engine /metrics to read, so the
// series columns and the report columns made from them (replicas busy, prefix
// hits %) are n/a; stayed % still comes from the router's X-Warden-Replica
// header and usage cached % from the responses.
const NoReplicasNote = "no --replicas given: the harness cannot scrape the engines behind the router; " +
	"replicas busy and prefix hits % are n/a (stayed % from the router's X-Warden-Replica header, usage cached % from the responses)"

// checkPinning runs routerhttp.CheckDPPinning on every server with more than one DP
// rank, prints each verdict to w and returns it as a manifest note (so the
// results say whether "stayed on replica" means where requests ran); a server
// that ignores X-Data-Parallel-Rank or has fewer ranks than given is an error,
// an undecided check a warning. With skip it checks nothing and notes that.
func checkPinning(ctx context.Context, w io.Writer, rcfgs []routerhttp.ReplicaConfig, model string, skip bool, hc *http.Client) ([]string, error) {
	var notes []string
	for _, r := range rcfgs {
		if r.DPRanks < 2 {
			continue
		}
		if skip {
			n := fmt.Sprintf("DP pinning not checked for %s (--skip-pinning-check): if the server ignores %s, stayed-on-replica counts the rank the router chose, not the one that served", r.URL, wire.HeaderDPRank)
			fmt.Fprintf(w, "pre-flight: warning: %s\n", n)
			notes = append(notes, n)
			continue
		}
		pc := routerhttp.CheckDPPinning(ctx, &http.Client{Transport: hc.Transport, Timeout: 30 * time.Second}, r.URL, model, r.DPRanks)
		switch pc.Verdict {
		case routerhttp.PinIgnored:
			return nil, fmt.Errorf("pre-flight: %s is not honoured: %s; the affinity-on variant would measure vLLM's balancer again (--skip-pinning-check runs anyway)", wire.HeaderDPRank, pc.Detail)
		case routerhttp.PinRankMismatch:
			return nil, fmt.Errorf("pre-flight: %s (--dp-ranks)", pc.Detail)
		case routerhttp.PinUnverified:
			fmt.Fprintf(w, "pre-flight: warning: could not check that %s pins ranks: %s\n", wire.HeaderDPRank, pc.Detail)
		case routerhttp.PinHonored:
			fmt.Fprintf(w, "pre-flight: %s pins ranks: %s\n", wire.HeaderDPRank, pc.Detail)
		}
		notes = append(notes, fmt.Sprintf("DP pinning (%s) %s: %s", wire.HeaderDPRank, pc.Verdict, pc.Detail))
	}
	return notes, nil
}

func withDPRanks(specs []string, ranks int) []string {
	if ranks <= 0 || len(specs) != 1 || strings.Contains(specs[0], "dp_ranks=") {
		return specs
	}
	return []string{fmt.Sprintf("%s,dp_ranks=%d", specs[0], ranks)}
}

func replicaConfigs(specs []string) ([]routerhttp.ReplicaConfig, error) {
	var out []routerhttp.ReplicaConfig
	for _, s := range specs {
		rc, err := routerhttp.ParseReplicaSpec(s)
		if err != nil {
			return nil, err
		}
		out = append(out, rc)
	}
	return out, nil
}

// nameLikeRouter gives each replica given without a name (--replicas URL, not
// name=URL) the name the running router uses for the same URL, read from its
// admin API's GET /status, so that turns.jsonl (replica names from the router's
// X-Warden-Replica header) and series.csv (the harness's own scrapes) name the
// replicas alike. A replica the router does not list, or a /status that cannot
// be read, keeps the default name r<i> and gets a warning on progress.
func nameLikeRouter(ctx context.Context, progress io.Writer, rcfgs []routerhttp.ReplicaConfig, admin, token string) {
	names, err := routerReplicaNames(ctx, admin, token)
	if err != nil {
		fmt.Fprintf(progress, "warning: %v; replicas given as URLs are named r0, r1, ... (give them as name=URL to match the router's names)\n", err)
		return
	}
	for i := range rcfgs {
		if rcfgs[i].Name != "" {
			continue
		}
		if n, ok := names[strings.TrimRight(rcfgs[i].URL, "/")]; ok {
			rcfgs[i].Name = n
			continue
		}
		fmt.Fprintf(progress, "warning: the router at %s does not list %s; it is named r%d here, so its per-replica figures will not line up with the router's\n", admin, rcfgs[i].URL, i)
	}
}

// routerReplicaNames reads a warden router's GET <admin>/status and returns its
// replicas' names by upstream URL (without a trailing slash); a DP-rank replica
// "name/rankK" gives "name".
func routerReplicaNames(ctx context.Context, admin, token string) (map[string]string, error) {
	admin = strings.TrimRight(admin, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/status", nil)
	if err != nil {
		return nil, fmt.Errorf("reading the router's replica names: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the router's replica names from %s/status: %w", admin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the router's replica names from %s/status: status %d", admin, resp.StatusCode)
	}
	var st routerhttp.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("reading the router's replica names from %s/status: %w", admin, err)
	}
	out := map[string]string{}
	for _, m := range st.Models {
		for _, r := range m.Replicas {
			name := r.Name
			if r.Rank != nil {
				name, _ = router.RankBase(name)
			}
			out[strings.TrimRight(r.URL, "/")] = name
		}
	}
	return out, nil
}

// adminSwitch returns the function run before each variant against a warden
// router's admin API: it forgets every session home (POST
// {admin}/admin/models/*/reset-sessions), then switches session affinity for
// every model (PUT {admin}/admin/models/*/affinity).
// splitURLs splits a comma-separated list of roots (--router URL1,URL2),
// trimming spaces and trailing slashes and dropping empty items.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// adminSwitchAll is adminSwitch on every router's admin root in turn (several
// routers sharing state: each keeps its own affinity switch and session table).
func adminSwitchAll(admins []string, token string) func(ctx context.Context, on bool) error {
	var sw []func(context.Context, bool) error
	for _, a := range admins {
		sw = append(sw, adminSwitch(a, token))
	}
	return func(ctx context.Context, on bool) error {
		for _, f := range sw {
			if err := f(ctx, on); err != nil {
				return err
			}
		}
		return nil
	}
}

func adminSwitch(admin, token string) func(ctx context.Context, on bool) error {
	admin = strings.TrimRight(admin, "/")
	call := func(ctx context.Context, method, path string, body []byte, what string) error {
		req, err := http.NewRequestWithContext(ctx, method, admin+path, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("%s via %s: %w", what, admin, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("%s via %s: status %d: %s", what, admin, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return nil
	}
	return func(ctx context.Context, on bool) error {
		// A router that served an earlier run (same seed, same session ids)
		// would otherwise send this variant's first turns to old homes.
		if err := call(ctx, http.MethodPost, "/admin/models/*/reset-sessions", nil, "resetting session homes"); err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]bool{"enabled": on})
		return call(ctx, http.MethodPut, "/admin/models/*/affinity", body, "switching affinity")
	}
}

// calibrateTrace fits a trace replay's prompt text to the tokenizer of server
// (the first one; every replica serves the same model) and sets how the output
// length is forced, by engine kind; and sums the replicas' KV capacity for the
// shared-LRU figure when every server reports it.
func calibrateTrace(ctx context.Context, w io.Writer, rc *loadgenhttp.RunConfig, server string, kind engines.Kind, probed []EngineServer, hc *http.Client) error {
	bs, salt, _ := rc.Scenario.BlockPrompts()
	dialect, force := loadgenhttp.TokenizeVLLM, loadgenhttp.ForceVLLM
	if kind == engines.KindLlamaCpp {
		dialect, force = loadgenhttp.TokenizeLlamaCpp, loadgenhttp.ForceLlamaCpp
	}
	samples, err := loadgen.TraceSample(rc.Scenario, loadgenhttp.CalibrationSamples)
	if err != nil {
		return err
	}
	synth, cal, err := loadgenhttp.CalibrateTrace(ctx, hc, server, rc.Scenario.Model, dialect, rc.Header, bs, salt, samples)
	if err != nil {
		return err
	}
	rc.TraceSynth, rc.TraceForce, rc.TraceCalibration = &synth, force, &cal
	fmt.Fprintf(w, "trace calibration %s: %s, %.3f tokens per word, template %d tokens; prompt-token error vs input_length over %d requests: p50 %.2f %%, max %.2f %%%s\n",
		server, cal.Endpoint, cal.TokensPerWord, cal.OverheadTokens, cal.Samples, cal.ErrP50Pct, cal.ErrMaxPct, noteSuffix(cal.Note))
	var kv float64
	for _, p := range probed {
		v, ok := p.Info.KVCapacityTokens.Get()
		if !ok {
			kv = 0
			break
		}
		kv += v
	}
	rc.FleetKVTokens = int64(kv)
	// The smallest context of the replicas decides an agent replay's
	// over-length calls.
	for _, p := range probed {
		if n, ok := p.Info.ContextLength.Get(); ok && (rc.MaxModelLen == 0 || int(n) < rc.MaxModelLen) {
			rc.MaxModelLen = int(n)
		}
	}
	return nil
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}
