package routerhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/yamlpos"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/redisstate"
)

// probeTimeout bounds one /health or /metrics request (wall time).
const probeTimeout = 5 * time.Second

// Router is a configured router: the Proxy with one Balancer per model, the admin
// API, its metrics, and the background loops (health checks and /metrics scrapes)
// that Run drives.
type Router struct {
	cfg     Config
	proxy   *Proxy
	recMu   sync.Mutex
	rec     *Recorder // warden route --record; nil without
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
	// unpinned: the server ignores X-Data-Parallel-Rank (PinIgnored), so it is
	// served as one replica, rank 0's, unpinned and counting every engine.
	unpinned atomic.Bool

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
	// (engines.Capability notes); unexported those the engine has but this
	// server's last /metrics read did not (notExported).
	kind        engines.Kind
	scrapeErr   string
	scrapeClass string
	lacks       []string
	unexported  []string
	slots       int // llama.cpp GET /props total_slots; 0 unknown
	// propsAt is when /props was last read (wall time; zero: never, or to be
	// read again at the next scrape: set on a health recovery).
	propsAt time.Time
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
		pool, targets, err := rt.newPool(mi, m)
		if err != nil {
			return nil, err
		}
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
		Keys:      KeyConfig{Headers: cfg.SessionHeaders, UseOpenAIUser: cfg.UseOpenAIUser, SplitSubagents: cfg.SplitSubagents, FollowSubagents: cfg.FollowSubagents},
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

// newPool builds the pool of model m (the mi-th of the config): its upstreams,
// their targets and its Balancer, sharing state through rt.state when set.
func (rt *Router) newPool(mi int, m ModelConfig) (*Pool, []*target, error) {
	pool := &Pool{Model: m.Name}
	var names []string
	var drains []router.DrainMode
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
			return nil, nil, fmt.Errorf("model %q: %w", m.Name, err)
		}
		drain, _ := router.ParseDrainMode(rc.Drain) // validated: "" is none
		for _, up := range ups {
			names = append(names, up.Name)
			drains = append(drains, drain)
			pool.Upstreams = append(pool.Upstreams, up)
		}
		targets = append(targets, t)
	}
	var shared router.SharedState
	if rt.state != nil {
		sp := statePool(rt.state, pool)
		rt.states[pool] = sp
		shared = sp
	}
	stale := router.DefaultStaleAfter
	if rt.cfg.ScrapeInterval > 0 {
		stale = 3 * rt.cfg.ScrapeInterval
	}
	b, err := router.NewBalancer(router.BalancerConfig{
		Replicas:   names,
		Affinity:   *m.Affinity,
		MaxNumSeqs: m.MaxNumSeqs,
		SlotBased:  slotBased,
		// max_num_seqs not set: learn it from /props (slots).
		LearnSlots:        m.MaxNumSeqs == 0,
		OverflowThreshold: int(m.OverflowThreshold),
		Policy:            m.Policy,
		Keyless:           m.Keyless,
		PrefixPieceTokens: PrefixPieceBytes / router.BytesPerTokenEstimate,
		SessionTTL:        rt.cfg.SessionTTL,
		MaxSessions:       rt.cfg.MaxSessions,
		SnapshotInterval:  rt.cfg.SnapshotInterval,
		StaleAfter:        stale,
		Seed:              rt.cfg.Seed + uint64(mi),
		Now:               rt.cfg.Clock.Now,
		Outlier: router.OutlierConfig{
			ConsecutiveFailures: rt.cfg.EjectConsecutiveFailures, Window: rt.cfg.EjectWindow,
			BaseTime: rt.cfg.EjectBaseTime, MaxTime: rt.cfg.EjectMaxTime, MaxPercent: rt.cfg.EjectMaxPercent,
			SlowStart: rt.cfg.EjectSlowStart,
		},
		Admission: router.AdmissionConfig(m.Admission),
		Shared:    shared,
		Drains:    drains,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("model %q: %w", m.Name, err)
	}
	pool.Balancer = b
	pool.learnSlots = m.MaxNumSeqs == 0
	return pool, targets, nil
}

// newTarget builds the target of one configured upstream URL of pool, whose
// replicas get Balancer indices from first on, and their upstreams (one, or one
// per DP rank named "<name>/rank<k>").
func newTarget(pool *Pool, rc ReplicaConfig, first int) (*target, []Upstream, error) {
	u, err := url.Parse(rc.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("replica %q: %w", rc.URL, err)
	}
	t := &target{pool: pool, url: u, ranked: rc.DPRanks > 0, healthy: true}
	// "" is auto, as "auto": KindUnknown until a scrape names the engine.
	if t.kind, err = engines.ParseKind(rc.Engine); err != nil {
		return nil, nil, fmt.Errorf("replica %q: %w", rc.URL, err)
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
// by the pool's placement rule, no existing session moves (docs/router.md,
// failure case 8), and, when Run is going, their health checks and scrapes start at once. rc
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
	if err := CheckUpstreamURL(rc.URL); err != nil {
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
	// A replica of another engine (or still undetected) ends a slot-based model.
	rt.applySlotRule(pool, rt.targets)
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
// in simulated time. maxNumSeqs 0 means VLLMDefaultMaxNumSeqs (the auto threshold is a
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
	// the admin API finds it under the name of a model clients asked it for too; any
	// other name is a 404, not a change to every model served by "*".
	known := rt.knownModels()
	p := rt.proxy.pools[WildcardModel]
	if p != nil && !slices.Contains(known, model) {
		rt.learnServedModels(p)
		known = rt.knownModels()
	}
	if p != nil && slices.Contains(known, model) {
		return []*Pool{p}, nil
	}
	return nil, fmt.Errorf("%w: %q (%s)", errUnknownModel, model, yamlpos.Suggest(model, append(known, WildcardModel)))
}

// servedModelsTimeout bounds each GET /v1/models of learnServedModels.
const servedModelsTimeout = 2 * time.Second

// learnServedModels asks each replica URL of pool p (a "*" pool) for GET
// /v1/models and records the ids as names the admin API accepts for p (a
// replica that does not answer in servedModelsTimeout adds none).
func (rt *Router) learnServedModels(p *Pool) {
	hc := &http.Client{Transport: rt.client.Transport, Timeout: servedModelsTimeout}
	if k := rt.cfg.APIKey; k != "" {
		hc.Transport = BearerTransport(rt.client.Transport, k)
	}
	seen := map[string]bool{}
	for _, up := range p.UpstreamList() {
		base := up.URL.String()
		if seen[base] {
			continue
		}
		seen[base] = true
		m, err := engineapi.ListModels(context.Background(), hc, base, nil)
		if err != nil {
			continue
		}
		for _, id := range m.IDs {
			if id != "" {
				p.addKnown(id)
			}
		}
	}
}

// knownModels is what the admin API accepts as a model name besides "*": the
// configured models, and for a "*" pool the models clients asked it for and
// those its replicas list on GET /v1/models (learnServedModels), sorted.
func (rt *Router) knownModels() []string {
	var out []string
	for _, p := range rt.proxy.Pools() {
		if p.Model != WildcardModel {
			out = append(out, p.Model)
		} else {
			out = append(out, p.askedModels()...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SetAffinity switches session affinity for model, or for every model when model
// is "" or "*". It fails for a model that is not configured.
func (rt *Router) SetAffinity(model string, on bool) error {
	pools, err := rt.poolsFor(model)
	if err != nil {
		return fmt.Errorf("setting affinity: %w", err)
	}
	var switched []string
	for _, p := range pools {
		p.Balancer.SetAffinity(on)
		switched = append(switched, p.Model)
	}
	// A name served by a "*" pool switches that whole pool: say so.
	rt.log.Info("affinity switched", "asked", model, "pools", strings.Join(switched, ","), "enabled", on)
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
