package routerhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp/redisstate"
)

// probeTimeout bounds one /health or /metrics request (wall time).
const probeTimeout = 5 * time.Second

// pinProbeTimeout bounds one request of the DP pinning check (a one-token
// generation, which waits in the engine's queue on a busy server).
const pinProbeTimeout = 60 * time.Second

// Router is a configured router: the Proxy with one Balancer per model, the admin
// API, its metrics, and the background loops (health checks and /metrics scrapes)
// that Run drives.
type Router struct {
	cfg     Config
	proxy   *Proxy
	metrics *Metrics

	// targets are the configured upstream URLs, then any added by AddReplica.
	// tmu guards targets, runCtx (the context of Run, nil before) and loops.
	tmu     sync.Mutex
	targets []*target
	runCtx  context.Context
	loops   *sync.WaitGroup
	client  *http.Client
	clock   simclock.Clock
	log     *slog.Logger
	handler http.Handler
	routed  map[*Pool]*routedBytes // per model: body bytes routed per replica (card_window.go)
	// silentAbort: when a replica fails its health check, its requests that heard
	// nothing from it for this long are ended (Proxy.AbortSilent). probeTimeout:
	// the same silence the failed probe itself waited through.
	silentAbort time.Duration
	// state is the store shared with other routers (`state:`), nil without;
	// states its view of each pool.
	state  *redisstate.Store
	states map[*Pool]*redisstate.Pool
}

// target is one configured upstream URL: one replica, or the DP ranks behind it.
type target struct {
	pool     *Pool
	url      *url.URL
	replicas []int // Balancer indices; with ranks, replicas[k] is rank k
	ranked   bool

	mu      sync.Mutex
	prefix  []prefixStats // by position in replicas
	healthy bool
	card    []rateWindow // recent scrape samples for the status card, by position in replicas
	pin     *PinCheck    // DP pinning verdict (checkPinning); nil before or without a check
	// missing is the number of trailing ranks the server does not have (a
	// "rank-mismatch" verdict): they are kept unhealthy.
	missing int

	// kind is the server's engine (ReplicaConfig.Engine; KindUnknown: detect
	// at each scrape until known). scrapeErr is why the last scrape gave no
	// figures ("" after a good one), scrapeClass its kind (scrapeFailed); it
	// is logged at warning level when the class changes, not on every scrape.
	// lacks names the figures the engine does not report, with why
	// (engines.Capability notes).
	kind        engines.Kind
	scrapeErr   string
	scrapeClass string
	lacks       []string
	slots       int // llama.cpp GET /props total_slots; 0 unknown
}

// prefixStats holds the prefix-cache counters of one replica as scraped: the first
// scrape seen and the latest.
type prefixStats struct {
	have                     bool
	queries0, hits0          float64
	queries, hits            float64
	queriesPrev, hitsPrev    float64
	windowQueries, windowHit float64 // sum of reset-aware deltas since the first scrape
}

// New validates cfg (after WithDefaults) and builds a Router. Nothing runs until Run.
func New(cfg Config) (*Router, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("router config: %w", err)
	}
	rt := &Router{
		cfg:    cfg,
		clock:  cfg.Clock,
		log:    cfg.Logger,
		client: &http.Client{Transport: NewTransport(cfg.DialTimeout, probeTimeout), Timeout: probeTimeout},
		routed: map[*Pool]*routedBytes{},

		silentAbort: probeTimeout,
		states:      map[*Pool]*redisstate.Pool{},
	}
	st, err := openState(cfg)
	if err != nil {
		return nil, err
	}
	rt.state = st
	var pools []*Pool
	for mi, m := range cfg.Models {
		pool := &Pool{Model: m.Name}
		var names []string
		var targets []*target
		slotBased := len(m.Replicas) > 0
		for _, rc := range m.Replicas {
			if rc.Engine == "" {
				rc.Engine = m.Engine
			}
			if k, _ := engines.ParseKind(rc.Engine); k != engines.KindLlamaCpp {
				slotBased = false
			}
			t, ups, err := newTarget(pool, rc, len(names))
			if err != nil {
				return nil, fmt.Errorf("model %q: %w", m.Name, err)
			}
			for _, up := range ups {
				names = append(names, up.Name)
				pool.Upstreams = append(pool.Upstreams, up)
			}
			targets = append(targets, t)
		}
		var shared router.SharedState
		if st != nil {
			sp := statePool(st, pool)
			rt.states[pool] = sp
			shared = sp
		}
		stale := router.DefaultStaleAfter
		if cfg.ScrapeInterval > 0 {
			stale = 3 * cfg.ScrapeInterval
		}
		b, err := router.NewBalancer(router.BalancerConfig{
			Replicas:   names,
			Affinity:   *m.Affinity,
			MaxNumSeqs: m.MaxNumSeqs,
			SlotBased:  slotBased,
			// max_num_seqs left at its default: learn it from /props (slots).
			LearnSlots:        m.MaxNumSeqs == router.DefaultMaxNumSeqs,
			OverflowThreshold: int(m.OverflowThreshold),
			Policy:            m.Policy,
			SessionTTL:        cfg.SessionTTL,
			MaxSessions:       cfg.MaxSessions,
			SnapshotInterval:  cfg.SnapshotInterval,
			StaleAfter:        stale,
			Seed:              cfg.Seed + uint64(mi),
			Now:               cfg.Clock.Now,
			Outlier: router.OutlierConfig{
				ConsecutiveFailures: cfg.EjectConsecutiveFailures, Window: cfg.EjectWindow,
				BaseTime: cfg.EjectBaseTime, MaxTime: cfg.EjectMaxTime, MaxPercent: cfg.EjectMaxPercent,
			},
			Admission: router.AdmissionConfig(m.Admission),
			Shared:    shared,
		})
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", m.Name, err)
		}
		pool.Balancer = b
		pools = append(pools, pool)
		rt.routed[pool] = &routedBytes{}
		rt.targets = append(rt.targets, targets...)
	}
	rt.metrics = NewMetrics(func() []*Pool { return pools })
	if st != nil {
		registerStateMetrics(rt.metrics, st)
	}
	p, err := NewProxy(ProxyConfig{
		Pools:     pools,
		Keys:      KeyConfig{Headers: cfg.SessionHeaders, UseOpenAIUser: cfg.UseOpenAIUser, SplitSubagents: cfg.SplitSubagents},
		BodyLimit: cfg.BodyLimit,

		BodyReadTimeout: cfg.BodyReadTimeout,
		BodyMemory:      cfg.BodyMemoryBytes,
		Transport:       NewTransport(cfg.DialTimeout, cfg.ResponseHeaderTimeout),
		Metrics:         rt.metrics,
		Logger:          cfg.Logger,
		OnRoute:         rt.noteRoute,
		Clock:           cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	rt.proxy = p
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", rt.metrics.Handler())
	mux.Handle("GET "+CardPath, rt.CardHandler())
	mux.Handle("/", p)
	rt.handler = mux
	return rt, nil
}

// newTarget builds the target of one configured upstream URL of pool, whose
// replicas get Balancer indices from first on, and their upstreams (one, or one
// per DP rank named "<name>/rank<k>").
func newTarget(pool *Pool, rc ReplicaConfig, first int) (*target, []Upstream, error) {
	u, err := url.Parse(rc.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("replica %q: %w", rc.URL, err)
	}
	t := &target{pool: pool, url: u, ranked: rc.DPRanks > 0, healthy: true, kind: engines.KindVLLM}
	if rc.Engine != "" {
		if t.kind, err = engines.ParseKind(rc.Engine); err != nil {
			return nil, nil, fmt.Errorf("replica %q: %w", rc.URL, err)
		}
	}
	var ups []Upstream
	if rc.DPRanks == 0 {
		t.replicas = append(t.replicas, first)
		ups = append(ups, Upstream{Name: rc.Name, URL: u, Rank: -1})
	}
	for k := range rc.DPRanks {
		t.replicas = append(t.replicas, first+len(ups))
		ups = append(ups, Upstream{Name: router.RankName(rc.Name, k), URL: u, Rank: k})
	}
	t.prefix = make([]prefixStats, len(t.replicas))
	return t, ups, nil
}

// AddReplica adds an upstream (one replica, or one per DP rank) to model's pool
// while the router serves: the new replicas start healthy and take new sessions
// by the pool's placement rule, no existing session moves (peers.md router case
// 8), and, when Run is going, their health checks and scrapes start at once. rc
// is checked as in a config file (name, URL, dp_ranks); the name must be new in
// the pool. It returns the new replicas' names.
func (rt *Router) AddReplica(model string, rc ReplicaConfig) ([]string, error) {
	pool := rt.proxy.Pool(model)
	if pool == nil || (model != pool.Model && model != "") {
		return nil, fmt.Errorf("%w: %q", errUnknownModel, model)
	}
	if rc.Name == "" {
		return nil, errors.New("name: required")
	}
	if rc.DPRanks < 0 || rc.DPRanks > MaxDPRanks {
		return nil, fmt.Errorf("dp_ranks: %d is out of range 0..%d", rc.DPRanks, MaxDPRanks)
	}
	if err := checkUpstreamURL(rc.URL); err != nil {
		// The same check as a config file's replicas[].url.
		return nil, fmt.Errorf("url: %q is not an http(s) URL: %w", rc.URL, err)
	}
	rt.tmu.Lock()
	defer rt.tmu.Unlock()
	for _, up := range pool.UpstreamList() {
		if base, _ := router.RankBase(up.Name); base == rc.Name {
			return nil, fmt.Errorf("name: %q is already used in model %q", rc.Name, pool.Model)
		}
	}
	t, ups, err := newTarget(pool, rc, pool.Balancer.Len())
	if err != nil {
		return nil, err
	}
	var names []string
	for _, up := range ups {
		if sp := rt.states[pool]; sp != nil {
			sp.AddReplica(redisstate.ReplicaKey(up.URL.String(), up.Rank))
		}
		pool.AddUpstream(up)
		names = append(names, up.Name)
	}
	rt.targets = append(rt.targets, t)
	if rt.runCtx != nil && rt.runCtx.Err() == nil {
		rt.startLoops(rt.runCtx, rt.loops, t)
	}
	rt.log.Info("replica added", "model", pool.Model, "replicas", names, "url", t.url.String())
	return names, nil
}

// targetList returns a copy of the targets.
func (rt *Router) targetList() []*target {
	rt.tmu.Lock()
	defer rt.tmu.Unlock()
	return append([]*target(nil), rt.targets...)
}

// NewFromURLs builds a Router for `warden route --replica ...` and the benchmark:
// one pool matching any model, served by the replicas given as ParseReplicaSpec
// strings, with affinity on (Sticky) or off (ShortestQueue). clock may be nil (wall
// time); pass the simulator's scaled clock so snapshot and staleness intervals are
// in simulated time. maxNumSeqs 0 means DefaultMaxNumSeqs (the auto threshold is a
// quarter of it).
func NewFromURLs(specs []string, affinity bool, maxNumSeqs int, clock simclock.Clock) (*Router, error) {
	cfg, err := ConfigForURLs(specs, affinity)
	if err != nil {
		return nil, err
	}
	if maxNumSeqs > 0 {
		cfg.Models[0].MaxNumSeqs = maxNumSeqs
	}
	if clock != nil {
		cfg.Clock = clock
	}
	return New(cfg)
}

// Config returns the configuration in force (with defaults).
func (rt *Router) Config() Config { return rt.cfg }

// Handler is the main listener's handler: the proxied API, GET /v1/models,
// GET /health, the router's GET /metrics and the HTML status card at GET
// /status/card (CardPath; no secrets: replica names and load only).
func (rt *Router) Handler() http.Handler { return rt.handler }

// Proxy returns the router's proxy.
func (rt *Router) Proxy() *Proxy { return rt.proxy }

// Metrics returns the router's metrics.
func (rt *Router) Metrics() *Metrics { return rt.metrics }

// Pools returns the per-model pools in configuration order.
func (rt *Router) Pools() []*Pool { return rt.proxy.Pools() }

// pools selects the pools a model argument names: "" or "*" means all.
func (rt *Router) poolsFor(model string) ([]*Pool, error) {
	if model == "" || model == WildcardModel {
		return rt.proxy.Pools(), nil
	}
	if p := rt.proxy.pools[model]; p != nil {
		return []*Pool{p}, nil
	}
	// A "*" pool serves every model no other entry names (the --replica setup), so
	// the admin API finds it under the served model's own name too.
	if p := rt.proxy.pools[WildcardModel]; p != nil {
		return []*Pool{p}, nil
	}
	return nil, fmt.Errorf("%w: %q", errUnknownModel, model)
}

// SetAffinity switches session affinity for model, or for every model when model
// is "" or "*". It fails for a model that is not configured.
func (rt *Router) SetAffinity(model string, on bool) error {
	pools, err := rt.poolsFor(model)
	if err != nil {
		return fmt.Errorf("setting affinity: %w", err)
	}
	for _, p := range pools {
		p.Balancer.SetAffinity(on)
	}
	rt.log.Info("affinity switched", "model", model, "enabled", on)
	return nil
}

// logSettings logs, once at start, per model what decides its routing:
// affinity, policy, overflow threshold, the admission gate (with its settings
// when on) and the shared state (its URL without the password, or none).
func (rt *Router) logSettings() {
	for _, p := range rt.Pools() {
		b := p.Balancer
		n, auto := b.OverflowThreshold()
		threshold := strconv.Itoa(n)
		if auto {
			threshold += " (auto)"
		}
		state := "none (this router's memory only)"
		if rt.states[p] != nil {
			state = redisstate.Redact(rt.cfg.State)
		}
		attrs := []any{"model", p.Model, "affinity", b.Affinity(), "policy", b.Policy(), "overflow_threshold", threshold}
		attrs = append(attrs, admissionAttrs(b.AdmissionConfig())...)
		rt.log.Info("model settings", append(attrs, "state", state)...)
	}
}

// admissionAttrs are the log attributes of an admission config: the mode, and
// with the gate on its settings (durations as "10m0s").
func admissionAttrs(c router.AdmissionConfig) []any {
	c = c.WithDefaults()
	if c.Mode != router.AdmissionFit {
		return []any{"admission", c.Mode}
	}
	return []any{"admission", c.Mode, "fill_target", c.FillTarget, "max_hold", c.MaxHold.String(),
		"max_queue", c.MaxQueue, "on_limit", c.OnLimit, "keepalive_after", c.KeepAliveAfter.String()}
}

// SetOverflowThreshold sets the overflow threshold (0 = auto) for model, or for
// every model when model is "" or "*".
func (rt *Router) SetOverflowThreshold(model string, n int) error {
	pools, err := rt.poolsFor(model)
	if err != nil {
		return fmt.Errorf("setting overflow threshold: %w", err)
	}
	for _, p := range pools {
		p.Balancer.SetOverflowThreshold(n)
	}
	rt.log.Info("overflow threshold set", "model", model, "threshold", n, "auto", n == 0)
	return nil
}

// SetPolicy switches the affinity-on policy (PolicyNames; "" = default) of model,
// or of every model when model is "" or "*".
func (rt *Router) SetPolicy(model, name string) error {
	if !router.ValidPolicy(name) {
		return fmt.Errorf("setting policy: %q is unknown (have %s)", name, strings.Join(router.PolicyNames(), ", "))
	}
	pools, err := rt.poolsFor(model)
	if err != nil {
		return fmt.Errorf("setting policy: %w", err)
	}
	for _, p := range pools {
		if err := p.Balancer.SetPolicy(name); err != nil {
			return err
		}
	}
	rt.log.Info("policy switched", "model", model, "policy", cmp.Or(name, router.DefaultAffinityPolicy))
	return nil
}

// ResetSessions forgets every session home of model ("" or "*": all models).
func (rt *Router) ResetSessions(model string) error {
	pools, err := rt.poolsFor(model)
	if err != nil {
		return fmt.Errorf("resetting sessions: %w", err)
	}
	for _, p := range pools {
		p.Balancer.ResetSessions()
		if sp := rt.states[p]; sp != nil {
			// The shared homes too, else the next request reads them back.
			if err := sp.Reset(context.Background()); err != nil {
				return fmt.Errorf("resetting sessions: %w", err)
			}
		}
	}
	return nil
}

// Status is the router's state as GET /status reports it.
type Status struct {
	Models []ModelStatus `json:"models"`
}

// ModelStatus is one model's pool.
type ModelStatus struct {
	Model             string `json:"model"`
	Affinity          bool   `json:"affinity"`
	Policy            string `json:"policy"` // affinity-on policy (PolicyNames)
	OverflowThreshold int    `json:"overflow_threshold"`
	ThresholdAuto     bool   `json:"overflow_threshold_auto"`
	Sessions          int    `json:"sessions"`
	// BytesPerToken is the body bytes per prompt token the policies' size
	// estimates and the status card use; BytesPerTokenSource says where it comes
	// from (Balancer.BytesPerToken: "responses", "metrics" or "assumed") and
	// BytesPerTokenMeasured whether it is not the assumed 4.
	BytesPerToken         float64           `json:"bytes_per_token"`
	BytesPerTokenMeasured bool              `json:"bytes_per_token_measured"`
	BytesPerTokenSource   router.SizeSource `json:"bytes_per_token_source"`
	// Admission is the admission gate's configuration, queue and estimates
	// (router.AdmissionStatus with durations as Go duration strings:
	// AdmissionReport; state "off" when not on).
	Admission AdmissionReport `json:"admission"`
	Replicas  []ReplicaReport `json:"replicas"`
}

// ReplicaReport is ReplicaStatus plus what only the HTTP router knows.
type ReplicaReport struct {
	router.ReplicaStatus
	URL  string `json:"url"`
	Rank *int   `json:"dp_rank,omitempty"`
	// Engine is the server's engine kind ("vllm", "sglang", "llamacpp";
	// "unknown" while an "auto" one is undetected). ScrapeError is why its
	// /metrics gave no figures at the last scrape ("" after a good one).
	// Missing lists the figures the engine does not report, each with why
	// (engines.Capability), e.g. "prefix_hits: no hit counter: ...".
	Engine      string   `json:"engine"`
	ScrapeError string   `json:"scrape_error,omitempty"`
	Missing     []string `json:"missing_figures,omitempty"`
	Slots       int      `json:"slots,omitempty"` // llama.cpp GET /props total_slots; 0 unknown or not slot-based
	// DPPinning is whether the server behind URL honours X-Data-Parallel-Rank
	// (CheckDPPinning, run once at start for a URL with several ranks; "pending"
	// until it ends, "skipped" with Config.SkipPinningCheck); absent for a
	// replica that is not one of several ranks.
	DPPinning *PinCheck `json:"dp_pinning,omitempty"`
	// PrefixHitRate is hits/queries of vLLM's prefix-cache counters since the
	// router's first scrape of this replica (reset-aware); -1 before two scrapes
	// or without queries. PrefixHitRateLifetime uses the counters' absolute values
	// (since the server started).
	PrefixHitRate         float64 `json:"prefix_hit_rate"`
	PrefixHitRateLifetime float64 `json:"prefix_hit_rate_lifetime"`
}

// Status reports every model and replica.
func (rt *Router) Status() Status {
	var st Status
	for _, pool := range rt.proxy.Pools() {
		b := pool.Balancer
		n, auto := b.OverflowThreshold()
		ms := ModelStatus{Model: pool.Model, Affinity: b.Affinity(), Policy: b.Policy(), OverflowThreshold: n, ThresholdAuto: auto, Sessions: b.Sessions()}
		ms.BytesPerToken, ms.BytesPerTokenSource = b.BytesPerToken()
		ms.BytesPerTokenMeasured = ms.BytesPerTokenSource != router.SizeAssumed
		ms.Admission = AdmissionReport{b.Admission()}
		ups := pool.UpstreamList()
		for i, s := range b.Status() {
			if i >= len(ups) {
				break // a replica being added: its upstream is listed first
			}
			up := ups[i]
			rep := ReplicaReport{ReplicaStatus: s, URL: up.URL.String(), PrefixHitRate: -1, PrefixHitRateLifetime: -1}
			if up.Rank >= 0 {
				k := up.Rank
				rep.Rank = &k
			}
			rt.fillPrefix(pool, i, &rep)
			ms.Replicas = append(ms.Replicas, rep)
		}
		st.Models = append(st.Models, ms)
	}
	return st
}

func (rt *Router) fillPrefix(pool *Pool, replica int, rep *ReplicaReport) {
	for _, t := range rt.targetList() {
		if t.pool != pool {
			continue
		}
		for k, idx := range t.replicas {
			if idx != replica {
				continue
			}
			t.mu.Lock()
			ps := t.prefix[k]
			rep.DPPinning = t.pin
			rep.Engine, rep.ScrapeError, rep.Missing, rep.Slots = string(t.kind), t.scrapeErr, t.lacks, t.slots
			t.mu.Unlock()
			if ps.have && ps.windowQueries > 0 {
				rep.PrefixHitRate = ps.windowHit / ps.windowQueries
			}
			if ps.have && ps.queries > 0 {
				rep.PrefixHitRateLifetime = ps.hits / ps.queries
			}
			return
		}
	}
}

// Run drives the background loops until ctx ends, then waits for them: per
// upstream URL a /health check every HealthInterval (200 marks its replicas
// healthy, anything else unhealthy) and a /metrics scrape every ScrapeInterval
// (gauges into Balancer.ObserveEngine; prefix counters into Status). Intervals are
// simulated time on the configured Clock. It returns ctx.Err().
func (rt *Router) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	rt.tmu.Lock()
	rt.runCtx, rt.loops = ctx, &wg
	for _, t := range rt.targets {
		rt.startLoops(ctx, &wg, t)
	}
	if rt.state != nil {
		wg.Go(func() { rt.state.Run(ctx) })
	}
	rt.tmu.Unlock()
	wg.Go(func() { rt.every(ctx, ejectProbeInterval, func() { rt.probeEjected(ctx) }) })
	<-ctx.Done()
	rt.tmu.Lock() // no AddReplica starts loops on wg after this
	rt.tmu.Unlock()
	wg.Wait()
	return ctx.Err()
}

// startLoops starts t's health check and scrape loops on wg.
func (rt *Router) startLoops(ctx context.Context, wg *sync.WaitGroup, t *target) {
	if rt.cfg.HealthInterval > 0 {
		wg.Go(func() { rt.every(ctx, rt.cfg.HealthInterval, func() { rt.checkHealth(ctx, t) }) })
	}
	if rt.cfg.ScrapeInterval > 0 {
		wg.Go(func() { rt.every(ctx, rt.cfg.ScrapeInterval, func() { rt.scrape(ctx, t) }) })
	}
	if t.ranked && len(t.replicas) > 1 {
		if rt.cfg.SkipPinningCheck {
			t.mu.Lock()
			t.pin = &PinCheck{Verdict: PinSkipped, Detail: "skip_pinning_check is set"}
			t.mu.Unlock()
			rt.log.Info("DP pinning check skipped (skip_pinning_check)", "model", t.pool.Model, "url", t.url.String())
		} else {
			wg.Go(func() { rt.checkPinning(ctx, t) })
		}
	}
}

// checkPinning runs CheckDPPinning once against a URL with several DP ranks, as
// soon as its /health answers (checked every second of wall time), and keeps the
// verdict for Status. A server that ignores the header is logged as an error:
// every rank the router picks is then vLLM's balancer's pick.
func (rt *Router) checkPinning(ctx context.Context, t *target) {
	setPin := func(pc PinCheck) {
		t.mu.Lock()
		t.pin = &pc
		t.mu.Unlock()
	}
	setPin(PinCheck{Verdict: PinPending, Detail: fmt.Sprintf("%s: waiting for GET /health to answer 200", t.url)})
	for waited := false; ; waited = true {
		resp, err := rt.get(ctx, t, wire.PathHealth)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if !waited {
			rt.log.Info("DP pinning check waits for the server's /health", "model", t.pool.Model, "url", t.url.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	model := t.pool.Model
	hc := &http.Client{Transport: rt.client.Transport, Timeout: pinProbeTimeout}
	if k := rt.cfg.APIKey; k != "" {
		hc.Transport = BearerTransport(rt.client.Transport, k)
	}
	pc := CheckDPPinning(ctx, hc, t.url.String(), model, len(t.replicas))
	if ctx.Err() != nil {
		return
	}
	setPin(pc)
	if pc.Verdict == PinRankMismatch && pc.Engines > 0 && pc.Engines < len(t.replicas) {
		// The server refuses the ranks it does not have: keep them out of
		// placement (their conversations re-home) instead of answering 400s.
		t.mu.Lock()
		t.missing = len(t.replicas) - pc.Engines
		t.mu.Unlock()
		var names []string
		for k, i := range t.replicas[pc.Engines:] {
			t.pool.Balancer.SetHealthy(i, false)
			names = append(names, fmt.Sprintf("rank%d", pc.Engines+k))
		}
		rt.log.Warn("DP ranks the server does not have are kept unhealthy; their conversations re-home", "model", t.pool.Model,
			"url", t.url.String(), "ranks", strings.Join(names, ","))
	}
	lvl := slog.LevelInfo
	switch pc.Verdict {
	case PinIgnored, PinRankMismatch:
		lvl = slog.LevelError
	case PinUnverified:
		lvl = slog.LevelWarn
	}
	rt.log.Log(ctx, lvl, "DP pinning check", "model", t.pool.Model, "url", t.url.String(), "verdict", string(pc.Verdict), "detail", pc.Detail)
}

// ejectProbeInterval is how often the router looks for ejected replicas whose
// ejection time is over (simulated time).
const ejectProbeInterval = time.Second

// probeEjected sends each ejected replica whose ejection time is over
// (Balancer.DueProbes) one probe, a one-token chat completion of the pool's
// model (for a pool serving any model, the latest one a client asked for),
// pinned to its DP rank, with api_key: a 200 returns the replica to placement,
// anything else keeps it ejected for the next step of backoff. Its /health is
// no help here: the replica was ejected while it answered 200.
func (rt *Router) probeEjected(ctx context.Context) {
	for _, pool := range rt.proxy.Pools() {
		for _, i := range pool.Balancer.DueProbes() {
			up := pool.Upstream(i)
			hc := &http.Client{Transport: rt.client.Transport, Timeout: pinProbeTimeout}
			if k := rt.cfg.APIKey; k != "" {
				hc.Transport = BearerTransport(rt.client.Transport, k)
			}
			err := chatProbe(ctx, hc, up.URL.String(), pool.probeModel(), up.Rank, "warden ejection probe: reply with one word.")
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				pool.Balancer.EndProbe(i, true, "")
				rt.log.Info("replica returned: its probe succeeded", "model", pool.Model, "replica", up.Name)
				continue
			}
			if e, ok := pool.Balancer.EndProbe(i, false, "probe: "+err.Error()); ok {
				rt.proxy.logEjection(pool, e)
			}
		}
	}
}

// every calls f now and then once per interval of simulated time until ctx ends.
func (rt *Router) every(ctx context.Context, interval time.Duration, f func()) {
	next := rt.clock.Now()
	for {
		f()
		next += interval
		if now := rt.clock.Now(); next < now {
			next = now // fell behind (slow probe): do not burst
		}
		if rt.clock.SleepUntil(ctx, next) != nil {
			return
		}
	}
}

func (rt *Router) get(ctx context.Context, t *target, path string) (*http.Response, error) {
	u := *t.url
	u.Path = singleJoin(u.Path, path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	return rt.client.Do(req)
}

func singleJoin(a, b string) string {
	switch {
	case a == "" || a == "/":
		return b
	case a[len(a)-1] == '/':
		return a + b[1:]
	}
	return a + b
}

func (rt *Router) checkHealth(ctx context.Context, t *target) {
	ok := false
	resp, err := rt.get(ctx, t, wire.PathHealth)
	if err == nil {
		ok = resp.StatusCode == http.StatusOK
		if !ok {
			err = fmt.Errorf("GET /health: status %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	changed := t.healthy != ok
	t.healthy = ok
	have := len(t.replicas) - t.missing
	t.mu.Unlock()
	for k, i := range t.replicas {
		t.pool.Balancer.SetHealthy(i, ok && k < have)
	}
	if !ok {
		// A hung replica keeps its connections open: without this, requests
		// already sent to it would wait for the client's own timeout.
		if n := rt.proxy.AbortSilent(t.pool, t.replicas, rt.silentAbort); n > 0 {
			rt.log.Warn("ended requests on a replica that failed its health check", "model", t.pool.Model,
				"url", t.url.String(), "requests", n, "silent_for", rt.silentAbort)
		}
	}
	if changed {
		lvl := slog.LevelInfo
		if !ok {
			lvl = slog.LevelWarn
		}
		rt.log.Log(ctx, lvl, "upstream health changed", "model", t.pool.Model, "url", t.url.String(), "healthy", ok, "err", err)
	}
}

func (rt *Router) scrape(ctx context.Context, t *target) {
	u := *t.url
	u.Path = singleJoin(u.Path, wire.PathMetrics)
	t.mu.Lock()
	kind := t.kind
	t.mu.Unlock()
	if kind != engines.KindVLLM {
		rt.scrapeEngine(ctx, t, kind, u.String())
		return
	}
	snap, err := scrape.Fetch(ctx, rt.client, u.String(), "")
	if err != nil {
		rt.scrapeFailed(ctx, t, scrapeErrorClass(err), err.Error())
		return
	}
	rt.scrapeFailed(ctx, t, "", "")
	rt.observe(t, snap, rt.clock.Now())
}

// Classes of scrape failure (scrapeErrorClass): what a reader of the log acts
// on. The texts within one class vary (a /metrics that hangs gives "context
// deadline exceeded" or "timeout awaiting response headers", whichever timer
// fires first), so the log follows the class, /status the latest text.
const (
	scrapeTimeout    = "timeout"    // no answer in time (dial, headers or body)
	scrapeRefused    = "refused"    // connection refused: nothing listens
	scrapeConnection = "connection" // any other transport failure (reset, DNS, TLS)
	scrapeBadStatus  = "bad status" // answered, not 200
	scrapeParse      = "parse"      // answered 200, not Prometheus text
)

// scrapeErrorClass sorts an error of scrape.Fetch or scrape.FetchEngine into
// one of the classes above.
func scrapeErrorClass(err error) string {
	var (
		se *scrape.StatusError
		pe *scrape.ParseError
		ne net.Error
	)
	switch {
	case errors.As(err, &se):
		return scrapeBadStatus
	case errors.As(err, &pe):
		return scrapeParse
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return scrapeTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return scrapeRefused
	}
	return scrapeConnection
}

// scrapeFailed records why t's scrape gave no figures (why "" after a good
// one; class its kind, scrapeErrorClass or a fixed text) and logs a change of
// class: a new kind of failure at warning level, a recovery at info. A new
// text of the same class only replaces the one /status shows.
func (rt *Router) scrapeFailed(ctx context.Context, t *target, class, why string) {
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	old := t.scrapeClass
	t.scrapeErr, t.scrapeClass = why, class
	kind := t.kind
	t.mu.Unlock()
	switch {
	case class == old:
	case class != "":
		rt.log.Warn("replica metrics cannot be read (logged again only when the kind of failure changes)", "model", t.pool.Model, "url", t.url.String(), "engine", string(kind), "class", class, "err", why)
	default:
		rt.log.Info("replica metrics readable again", "model", t.pool.Model, "url", t.url.String(), "engine", string(kind))
	}
}

// replicaOf returns the index within t.replicas of the replica engine e's
// counts belong to: with DP ranks, engine label k is rank k (false for a label
// that is not a rank of t); without, every engine of the URL is its one replica.
func (t *target) replicaOf(e *vllmmetrics.Engine) (int, bool) {
	if !t.ranked {
		return 0, true
	}
	r, err := strconv.Atoi(e.Engine)
	if err != nil || r < 0 || r >= len(t.replicas) {
		return 0, false
	}
	return r, true
}

// observe feeds one parsed scrape of target t into its Balancer. With DP ranks,
// engine label k belongs to rank k; without, all engines of the URL are one replica
// (a DP server balancing internally): running and waiting add up, KV usage is the
// mean, counters add up.
func (rt *Router) observe(t *target, snap *vllmmetrics.Snapshot, at time.Duration) {
	type agg struct {
		n                    int
		running, waiting, kv float64
		queries, hits        float64
		hasGauges, hasPrefix bool
		kvTokens             int64 // (num_gpu_blocks - 1) x block_size, summed
	}
	rt.recordCard(t, snap, at)
	if _, src := t.pool.Balancer.BytesPerToken(); src != router.SizeResponses {
		// The /metrics ratio is only a fallback: once the responses have
		// calibrated the estimate, do not recompute it on every scrape.
		t.pool.Balancer.ObserveSizeWindow(rt.windowBytesPerToken(t.pool))
	}
	per := make([]agg, len(t.replicas))
	for _, e := range snap.Engines {
		k, ok := t.replicaOf(e)
		if !ok {
			continue
		}
		a := &per[k]
		a.n++
		a.running += e.Running
		a.waiting += e.Waiting
		a.kv += e.KVUsage
		a.hasGauges = a.hasGauges || e.Present[vllmmetrics.NumRequestsRunning]
		if e.NumGPUBlocks > 1 && e.BlockSize > 0 {
			a.kvTokens += int64(e.NumGPUBlocks-1) * int64(e.BlockSize)
		}
		if e.Present[vllmmetrics.PrefixCacheQueries] && e.Present[vllmmetrics.PrefixCacheHits] {
			a.queries += e.PrefixQueries
			a.hits += e.PrefixHits
			a.hasPrefix = true
		}
	}
	for k, a := range per {
		if a.n == 0 {
			continue
		}
		if a.hasGauges {
			t.pool.Balancer.ObserveEngine(t.replicas[k], int(a.running), int(a.waiting), a.kv/float64(a.n), at)
		}
		if a.kvTokens > 0 {
			t.pool.Balancer.ObserveCapacity(t.replicas[k], a.kvTokens)
		}
		if a.hasPrefix {
			t.mu.Lock()
			ps := &t.prefix[k]
			if !ps.have {
				*ps = prefixStats{have: true, queries0: a.queries, hits0: a.hits, queriesPrev: a.queries, hitsPrev: a.hits}
			} else {
				ps.windowQueries += vllmmetrics.CounterDelta(ps.queriesPrev, a.queries)
				ps.windowHit += vllmmetrics.CounterDelta(ps.hitsPrev, a.hits)
				ps.queriesPrev, ps.hitsPrev = a.queries, a.hits
			}
			ps.queries, ps.hits = a.queries, a.hits
			t.mu.Unlock()
		}
	}
}

// ListenAndServe serves Handler on cfg.Listen and AdminHandler on cfg.AdminListen
// (when not "-"), and runs the background loops, until ctx ends; then it shuts the
// servers down, letting requests in flight finish for up to grace. The servers
// have a read-header timeout only: no read, write or idle timeout may cut a live
// stream.
func (rt *Router) ListenAndServe(ctx context.Context, grace time.Duration) error {
	srvs := []*http.Server{{Addr: rt.cfg.Listen, Handler: rt.Handler()}}
	if rt.cfg.AdminListen != "-" {
		srvs = append(srvs, &http.Server{Addr: rt.cfg.AdminListen, Handler: rt.AdminHandler()})
	}
	var lns []net.Listener
	for _, s := range srvs {
		s.ReadHeaderTimeout = 30 * time.Second
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("listening on %s: %w", s.Addr, err)
		}
		lns = append(lns, ln)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(srvs)+1)
	var wg sync.WaitGroup
	rt.logSettings()
	wg.Go(func() { rt.Run(ctx) })
	for i, s := range srvs {
		rt.log.Info("router listening", "listener", []string{"api", "admin"}[i], "addr", lns[i].Addr().String())
		wg.Go(func() {
			if err := s.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving %s: %w", s.Addr, err)
				cancel()
			}
		})
	}
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), grace)
	defer scancel()
	for _, s := range srvs {
		if s.Shutdown(sctx) != nil {
			s.Close() // grace over: cut what is left
		}
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// BearerTransport returns a RoundTripper that sends every request through base
// (nil: http.DefaultTransport) with "Authorization: Bearer <key>", for a vLLM
// server started with --api-key (Config.APIKey; warden bench --api-key).
func BearerTransport(base http.RoundTripper, key string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return bearerTransport{base: base, value: "Bearer " + key}
}

type bearerTransport struct {
	base  http.RoundTripper
	value string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.value)
	return t.base.RoundTrip(r)
}
