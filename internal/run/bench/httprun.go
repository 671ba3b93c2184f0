package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/run/virtual"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/loadgenhttp"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// httpRun is one HTTP-world run while runHTTP sets it up, in four steps: the
// target (what the turns go to), the pre-flight (engines probed, DP pinning
// checked, what to scrape and reset), the embedded router (unless an external
// one is given) and the run itself.
type httpRun struct {
	o        Options
	progress io.Writer // o.Progress, or io.Discard

	clock *simclock.Scaled
	rc    loadgenhttp.RunConfig
	specs []string                   // replica specs (ParseReplicaSpec)
	rcfgs []routerhttp.ReplicaConfig // specs parsed
	kinds []engines.Kind             // rcfgs[i]'s engine, probed
	hc    *http.Client               // pre-flight client (API key when given)
	// adminURL is the embedded router's admin root ("" with an external one).
	adminURL string

	// Background servers (simulated cluster, embedded router) run on runCtx
	// until close.
	runCtx   context.Context
	wg       sync.WaitGroup
	cleanups []func()
}

// progressOr returns w, or io.Discard for nil.
func progressOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func runHTTP(ctx context.Context, o Options) error {
	h := &httpRun{o: o, progress: progressOr(o.Progress)}
	var cancel context.CancelFunc
	h.runCtx, cancel = context.WithCancel(context.Background())
	h.cleanups = append(h.cleanups, cancel)
	defer h.close()
	if err := h.target(); err != nil {
		return err
	}
	if err := h.preflight(ctx); err != nil {
		return err
	}
	if h.rc.BaseURL == "" {
		if err := h.embeddedRouter(); err != nil {
			return err
		}
	}
	_, err := loadgenhttp.Run(ctx, h.rc)
	return err
}

// close stops the background servers, last started first, and waits for them.
func (h *httpRun) close() {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	h.wg.Wait()
}

// target resolves what the turns go to: an external router, real servers, or
// an embedded simulated cluster (started here); it sets the run config's base
// fields and the replica specs.
func (h *httpRun) target() error {
	o := h.o
	h.clock = simclock.NewScaled(1)
	h.rc = loadgenhttp.RunConfig{
		Scenario: o.Scenario, Clock: h.clock, ResultsDir: o.OutDir, Progress: o.Progress,
		RunID: o.RunID, Versions: versions(), Policy: o.Policy,
	}
	rc := &h.rc
	if (o.RouterURL != "" || len(o.Replicas) > 0) && o.Scenario.SimulatesServerSide() {
		// Real servers: the real network and API server provide these.
		rc.Scenario = o.Scenario.ForRealServers()
		note := fmt.Sprintf("scenario's simulated rtt %s and api_servers %d not applied: real servers (the real network and API server provide them)", o.Scenario.RTT, o.Scenario.APIServers)
		rc.Notes = append(rc.Notes, note)
		fmt.Fprintln(h.progress, "note: "+note)
	}
	switch {
	case o.RouterURL != "":
		if len(o.Replicas) == 0 {
			// Turns, TTFB, usage and stayed % (the router's X-Warden-Replica
			// header) need only the router; the engine columns need /metrics.
			rc.Notes = append(rc.Notes, NoReplicasNote)
			fmt.Fprintf(h.progress, "note: %s\n", NoReplicasNote)
		}
		h.specs = withDPRanks(o.Replicas, o.DPRanks)
		routers := splitURLs(o.RouterURL)
		rc.BaseURL, rc.BaseURLs = routers[0], routers
		rc.Target = "router " + strings.Join(routers, " ")
		admins := splitURLs(o.AdminURL)
		if len(admins) == 0 {
			return errors.New("bench: --router needs --admin-url (the router's admin API root) to switch affinity between variants")
		}
		if len(admins) != 1 && len(admins) != len(routers) {
			return fmt.Errorf("bench: --admin-url has %d roots for %d routers: give one per router, in the same order", len(admins), len(routers))
		}
		rc.SetAffinity = adminSwitchAll(admins, o.AdminToken)
		rc.Notes = append(rc.Notes, ExternalRouterNote)
	case len(o.Replicas) > 0:
		h.specs = withDPRanks(o.Replicas, o.DPRanks)
		rc.Target = "vllm " + strings.Join(h.specs, " ")
	default:
		if o.Scenario.VLLMBalancer != "" {
			return fmt.Errorf("bench: the scenario's vllm_balancer %q is modelled in the virtual world only (--virtual)", o.Scenario.VLLMBalancer)
		}
		h.clock = simclock.NewScaled(o.Speed)
		rc.Clock = h.clock
		cl, err := simhttp.Start(h.runCtx, simhttp.Config{
			Replicas: o.SimReplicas, Profile: o.Profile, Speed: o.Speed, Clock: h.clock,
			DevMode: true, MaxNumSeqs: o.MaxNumSeqs, APIServers: o.Scenario.APIServers,
			Seed: o.Scenario.Seed,
		})
		if err != nil {
			return fmt.Errorf("bench: starting simulated cluster: %w", err)
		}
		h.cleanups = append(h.cleanups, cl.Close)
		h.specs = cl.URLs()
		rc.Target = fmt.Sprintf("simulator %d x %s at speed %g", o.SimReplicas, o.Profile, o.Speed)
		rc.Mode = "http-sim"
		rc.Profile = o.Profile
		fmt.Fprintf(h.progress, "simulated cluster: %d replicas of %s at %gx speed: %s\n", o.SimReplicas, o.Profile, o.Speed, strings.Join(h.specs, " "))
	}
	var err error
	if h.rcfgs, err = replicaConfigs(h.specs); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// preflight probes every server's engine, checks DP pinning, and fills in what
// the harness scrapes and resets per replica, the engines' manifest record and
// notes, and max_num_seqs from a slot-based server's slots.
func (h *httpRun) preflight(ctx context.Context) error {
	o, rc := h.o, &h.rc
	var servers []string
	for _, r := range h.rcfgs {
		servers = append(servers, r.URL)
	}
	if o.RouterURL != "" && len(h.rcfgs) > 0 {
		nameLikeRouter(ctx, h.progress, h.rcfgs, splitURLs(o.AdminURL)[0], o.AdminToken)
	}
	h.hc = &http.Client{}
	if o.APIKey != "" {
		auth := http.Header{"Authorization": {"Bearer " + o.APIKey}}
		rc.Header = auth
		h.hc.Transport = routerhttp.BearerTransport(nil, o.APIKey)
	}
	kind := engines.KindVLLM // the embedded simulator
	if len(o.Replicas) > 0 {
		var err error
		if kind, err = engines.ParseKind(o.Engine); err != nil {
			return fmt.Errorf("bench: --engine: %w", err)
		}
	}
	probed, err := PreflightEngines(ctx, h.progress, servers, kind, o.Scenario, h.hc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for i, r := range h.rcfgs {
		if k := probed[i].Info.Kind; r.DPRanks > 0 && k != engines.KindVLLM {
			// Rank pinning (X-Data-Parallel-Rank) and the per-rank engine
			// label are vLLM's: another engine's /metrics would be read as
			// vLLM ranks it does not have.
			return fmt.Errorf("bench: %s is %s (%s): DP ranks (--dp-ranks, dp_ranks=) are vLLM's only; give each %s server as its own --replicas URL", r.URL, k, probed[i].Info.Evidence, k)
		}
	}
	pinNotes, err := checkPinning(ctx, h.progress, h.rcfgs, o.Scenario.Model, o.SkipPinningCheck, h.hc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rc.Notes = append(rc.Notes, pinNotes...)
	slots := h.replicaTargets(probed)
	if _, _, ok := o.Scenario.BlockPrompts(); ok {
		if err := calibrateTrace(ctx, h.progress, rc, servers[0], h.kinds[0], probed, h.hc); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if slots > 0 && !h.o.maxNumSeqsGiven {
		// A slot-based server runs at most its slots at once: that is its
		// max_num_seqs for the router (and its overflow rule, SlotBased).
		h.o.MaxNumSeqs = slots
		fmt.Fprintf(h.progress, "pre-flight: max_num_seqs %d from the servers' slots (GET /props total_slots)\n", slots)
	}
	return nil
}

// replicaTargets fills in, from the probed engines, the replicas the harness
// scrapes, the prefix-cache resets before each variant and the engines'
// manifest record (once any is not vLLM); it returns the fewest slots of a
// slot-based server (llama.cpp), 0 for none.
func (h *httpRun) replicaTargets(probed []EngineServer) (slots int) {
	rc := &h.rc
	h.kinds = make([]engines.Kind, len(h.rcfgs))
	noReset := map[engines.Kind]bool{}
	allVLLM := true
	var serverOf []int // rc.Replicas[j] is served by h.rcfgs[serverOf[j]]
	for i, r := range h.rcfgs {
		name := r.Name
		if name == "" {
			name = router.ReplicaName(i)
		}
		base := strings.TrimRight(r.URL, "/")
		es := probed[i]
		k := es.Info.Kind
		h.kinds[i] = k
		if k == engines.KindVLLM {
			rc.ResetURLs = append(rc.ResetURLs, base)
		} else {
			allVLLM = false
			if p := engines.CapabilityOf(k).ResetPrefixCache; p.Path != "" {
				rc.ResetTargets = append(rc.ResetTargets, loadgenhttp.ResetTarget{Method: p.Method, URL: base + p.Path})
			} else {
				noReset[k] = true
			}
			if n, ok := es.Info.Slots.Get(); ok && n > 0 && k == engines.KindLlamaCpp && (slots == 0 || int(n) < slots) {
				slots = int(n)
			}
		}
		if r.DPRanks > 0 {
			for k := 0; k < r.DPRanks; k++ {
				rc.Replicas = append(rc.Replicas, loadgenhttp.ReplicaMetrics{Name: router.RankName(name, k), URL: base + wire.PathMetrics, Engine: fmt.Sprint(k)})
				serverOf = append(serverOf, i)
			}
		} else {
			rc.Replicas = append(rc.Replicas, loadgenhttp.ReplicaMetrics{Name: name, URL: base + wire.PathMetrics, Kind: k, MetricsOff: es.MetricsOff})
			serverOf = append(serverOf, i)
		}
	}
	if !allVLLM {
		// Record every replica's engine once any is not vLLM, so a mixed run
		// says which columns come from where.
		rc.Engines = nil
		for j, rm := range rc.Replicas {
			rc.Engines = append(rc.Engines, replicaEngine(rm.Name, probed[serverOf[j]]))
		}
		rc.Target = "engines " + strings.Join(h.specs, " ")
		for _, n := range report.MissingColumns(&loadgen.Manifest{Engines: rc.Engines}) {
			fmt.Fprintf(h.progress, "pre-flight: missing: %s\n", n)
		}
	}
	for _, k := range engines.Kinds {
		if noReset[k] {
			n := NoResetNote(k)
			rc.Notes = append(rc.Notes, n)
			fmt.Fprintf(h.progress, "pre-flight: note: %s\n", n)
		}
	}
	return slots
}

// FreshRouterNote is the manifest note of a run through the embedded router:
// every variant gets a router of its own.
const FreshRouterNote = "each variant ran on a fresh in-process router (new Balancer: tie-break RNG, learned estimates, session table, admission queue), " +
	"started after the engines' prefix caches were reset where the engine can (see the notes on engines that cannot): no variant sees what the router learned in an earlier one"

// ExternalRouterNote is the manifest note of a run through an external router.
const ExternalRouterNote = "external router: between variants only its session homes are reset (admin reset-sessions) and affinity switched; " +
	"its learned estimates (prefix size, idle window, bytes per token) and tie-break RNG carry over, so a later variant may depend on an earlier one (restart the router and run the variants as two runs to rule that out)"

// embeddedRouter points the run at an in-process warden router in front of
// the replicas, on two loopback listeners (API and admin). Every variant gets
// a fresh router (variantRouters.start, run as the variant's SetAffinity).
func (h *httpRun) embeddedRouter() error {
	o, rc := h.o, &h.rc
	rcfg, err := routerhttp.ConfigForURLs(h.specs, true)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rcfg.Clock = h.clock
	rcfg.AdminToken = DefaultAdminToken
	rcfg.SkipPinningCheck = true // checked in the pre-flight, before any stage
	rcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rcfg.SplitSubagents = o.Subagents == router.SubagentsSplit
	rcfg.FollowSubagents = o.Subagents == router.SubagentsFollow
	rc.Subagents = o.Subagents
	for i := range rcfg.Models {
		for j := range rcfg.Models[i].Replicas {
			// The probed engine, vLLM included: the router's default (auto)
			// would detect it again at its first scrape.
			if j < len(h.kinds) && h.kinds[j] != engines.KindUnknown {
				rcfg.Models[i].Replicas[j].Engine = string(h.kinds[j])
			}
		}
		if o.maxNumSeqsGiven || o.MaxNumSeqs != MaxNumSeqsFor(true) {
			rcfg.Models[i].MaxNumSeqs = o.MaxNumSeqs // else 0, not set: the router's same 256
		}
		rcfg.Models[i].OverflowThreshold = routerhttp.Threshold(o.OverflowThreshold)
		rcfg.Models[i].Policy = o.Policy
		rcfg.Models[i].Keyless = o.Keyless
		rcfg.Models[i].Admission = routerhttp.AdmissionYAML(o.Admission)
	}
	rc.Admission = virtual.ManifestAdmission(o.Admission)
	vr := &variantRouters{cfg: rcfg, runCtx: h.runCtx, progress: h.progress}
	// The first router is built now, so a bad configuration fails before any
	// variant; it serves the first variant.
	if err := vr.build(); err != nil {
		return err
	}
	h.cleanups = append(h.cleanups, vr.stop)
	apiURL, stopAPI, err := listen(h.runCtx, &h.wg, vr.apiHandler())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	h.cleanups = append(h.cleanups, stopAPI)
	adminURL, stopAdmin, err := listen(h.runCtx, &h.wg, vr.adminHandler())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	h.cleanups = append(h.cleanups, stopAdmin)
	rc.BaseURL, h.adminURL = apiURL, adminURL
	rc.SetAffinity = vr.start
	rc.Notes = append(rc.Notes, FreshRouterNote)
	// Where Handler and AdminHandler serve them (docs/router.md section 8):
	// the card on both listeners, /status on the admin one.
	fmt.Fprintf(h.progress, "router: %s (card at /status/card); admin %s (token %s; /status and /status/card)\n", apiURL, adminURL, DefaultAdminToken)
	return nil
}

// RouterReadyWait caps (wall) how long a variant's fresh router may take to
// scrape every replica once before the variant starts anyway.
const RouterReadyWait = 10 * time.Second

// variantRouters is the embedded router, one per variant, behind listeners
// that stay: the API and admin handlers serve whichever is current.
type variantRouters struct {
	cfg      routerhttp.Config
	runCtx   context.Context
	progress io.Writer

	cur     atomic.Pointer[routerhttp.Router]
	started bool               // cur runs (start ran since build)
	cancel  context.CancelFunc // stops cur's background loops
	done    chan struct{}      // closed when cur's Run returned
}

func (v *variantRouters) apiHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { v.cur.Load().Handler().ServeHTTP(w, r) })
}

func (v *variantRouters) adminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { v.cur.Load().AdminHandler().ServeHTTP(w, r) })
}

// build makes a new router from cfg and makes it current, not yet running.
func (v *variantRouters) build() error {
	rt, err := routerhttp.New(v.cfg)
	if err != nil {
		return fmt.Errorf("bench: starting router: %w", err)
	}
	v.cur.Store(rt)
	v.started = false
	return nil
}

// start is run before each variant (RunConfig.SetAffinity): it stops the
// previous variant's router, builds a fresh one (unless the current one has
// not run yet), starts it, waits until it has scraped every replica once (at
// most RouterReadyWait) and sets its affinity.
func (v *variantRouters) start(ctx context.Context, on bool) error {
	if v.started {
		v.stop()
		if err := v.build(); err != nil {
			return err
		}
	}
	rt := v.cur.Load()
	rctx, cancel := context.WithCancel(v.runCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rt.Run(rctx)
	}()
	v.cancel, v.done, v.started = cancel, done, true
	deadline := time.Now().Add(RouterReadyWait)
	for !scrapedAll(rt) {
		if time.Now().After(deadline) {
			fmt.Fprintf(v.progress, "warning: the fresh router has not scraped every replica after %s; the variant starts anyway\n", RouterReadyWait)
			break
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: the runner sees ctx and stops the run
		case <-time.After(20 * time.Millisecond):
		}
	}
	return rt.SetAffinity("*", on)
}

// stop stops the current router's background loops and waits for them.
func (v *variantRouters) stop() {
	if v.cancel != nil {
		v.cancel()
		<-v.done
		v.cancel = nil
	}
}

// scrapedAll reports whether rt has observed every replica's gauges once.
func scrapedAll(rt *routerhttp.Router) bool {
	for _, m := range rt.Status().Models {
		for _, r := range m.Replicas {
			if r.ScrapeAgeS < 0 {
				return false
			}
		}
	}
	return true
}
