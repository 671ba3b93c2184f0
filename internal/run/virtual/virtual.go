package virtual

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// Config configures a virtual-time run. Zero fields take the documented defaults.
type Config struct {
	Scenario *loadgen.Scenario // required; defaults applied
	Replicas int               // engines (replicas); default 4
	// Engine configures every engine (profile, max_num_seqs, ...). EmitTokens is
	// forced on: the replies' tokens are needed to build the next turn's prompt.
	Engine sim.EngineConfig
	// Balancer is the router's configuration template; Replicas, Affinity and Now
	// are set by Run. Seed defaults to the scenario seed, MaxNumSeqs and
	// KVCapacityTokens to the engines' (as the HTTP router scrapes them from
	// vllm:cache_config_info).
	Balancer router.BalancerConfig
	// Subagents is the subagent rule (router.SubagentRules; "" keep), as the
	// HTTP router's split_subagents and follow_subagents (routerhttp.KeyConfig).
	Subagents string
	// ObserveInterval is how often the router's view of engine gauges (running,
	// waiting, KV usage) is refreshed, as its /metrics scraper would; default
	// router.DefaultScrapeInterval.
	ObserveInterval time.Duration
	// PollInterval is how often the harness samples every engine's series (as it
	// polls /metrics in the HTTP world), on average: each poll is jittered within
	// its interval (loadgen.PollSchedule); default loadgen.DefaultScrapeInterval.
	PollInterval time.Duration

	Out      *loadgen.ResultsWriter // nil = write nothing
	Progress io.Writer              // one line per stage; nil = none
	OnResult func(loadgen.Result)   // called for every finished turn
	// OnCut, when set, is called as a variant ends for every turn still open
	// then: sent by the client and not finished (on its way, held by the
	// router, at the API server or the engine, or its end not yet at the
	// client), in session and turn order. The Result has the turn's identity,
	// Sent and FirstToken when one came; Done is 0. Such turns have no record
	// in turns.jsonl (the manifest counts them in flight).
	OnCut func(loadgen.Result)

	// Copied into the manifest.
	RunID    string
	Profile  string
	Policy   string
	Versions map[string]string
}

// flight is one turn submitted to an engine and not yet finished.
type flight struct {
	tr       loadgen.TurnRequest
	res      loadgen.Result
	replica  int
	out      []uint32
	oneWay   time.Duration // half the turn's RTT (Workload.OneWay); 0 without a network
	proc     int           // API-server process (sim.Frontend.Admit); 0 without an API-server model
	req      *sim.Request  // waiting for its engine (evEngine); nil once submitted
	released bool          // the router has released it (evRelease)
	// prefix: a keyless request's prefix hashes, told to the router's prefix
	// index once its engine takes it (Balancer.RecordPrefix); nil otherwise.
	prefix []uint64
}

// held is when a turn the router held (router.ErrHold), or one on its way to the
// router (evArrive), was sent by the client and reached the router.
type held struct {
	since, arrived time.Duration
	ticket         uint64 // the admission ticket the router gave a held turn (router.AdmitInfo)
}

// pendingTurn is a turn scheduled to be sent (evSend) or to reach the router
// (evArrive). sent: the client has already sent it (it is on its way or the router
// held it) and h says when.
type pendingTurn struct {
	tr   loadgen.TurnRequest
	h    held
	sent bool
}

// tokCache holds a session's rendered conversation so far, so each turn renders
// only the messages it adds (the template is append-only).
type tokCache struct {
	toks   []uint32
	msgs   int
	hashes []uint64 // block hashes of toks's full blocks (sim.AppendBlockHashes)
}

type run struct {
	cfg      Config
	sc       *loadgen.Scenario
	sched    scheduler
	ecfg     sim.EngineConfig      // every engine's, for a fresh set per variant
	bcfg     router.BalancerConfig // the router's, for a fresh one per variant
	engines  []*sim.Engine
	engVar   int // the variant the engines were built for: evStep events of older ones are stale
	busy     []bool
	names    []string
	bal      *router.Balancer
	w        *loadgen.Workload
	system   []uint32
	caches   map[int64]*tokCache // by session ID, within the current variant
	flights  map[string]*flight
	pending  map[int]pendingTurn // by turn id (event.turn)
	nextTurn int
	// One delivery path: without a network (Scenario.RTT) or an API-server model
	// (Scenario.APIServers) every delay is zero and each event is handled at the
	// instant it happens.
	fe *sim.Frontend // nil: no API-server model
	// ending: requests finished on their engine whose end has not yet reached the
	// router (released false) or the client.
	ending map[string]*flight

	// prefix is the scratch of a keyless request's prefix hashes, pieceTokens
	// their piece (Balancer.PrefixPieceTokens).
	prefix      []uint64
	pieceTokens int

	variant int
	loop    loadgen.Controller
	traceState
	polls   *loadgen.PollSchedule // the variant's poll instants after the first
	end     time.Duration
	m       *loadgen.Manifest
	errs    []error
	wall    time.Time
	stageOK []int
	stageKO []int
}

// HoldRetry is how often a turn the router holds (router.ErrHold) asks again, in
// simulated time.
const HoldRetry = 500 * time.Millisecond

// Run runs every variant of the scenario in virtual time and returns the manifest.
// Each variant starts on a fresh router and fresh engines (startVariant), so
// their order does not change any variant's figures. Results and series go to cfg.Out (closed by Run with the manifest). On ctx
// cancellation it stops at the current instant, marks the manifest Interrupted and
// returns an error wrapping ctx.Err(); the stages completed so far are complete and
// valid.
func Run(ctx context.Context, cfg Config) (*loadgen.Manifest, error) {
	if cfg.Scenario == nil {
		return nil, errors.New("virtual run: no scenario")
	}
	if err := cfg.Scenario.Validate(); err != nil {
		return nil, fmt.Errorf("virtual run: invalid scenario: %w", err)
	}
	sc := cfg.Scenario.WithDefaults()
	if cfg.Replicas <= 0 {
		cfg.Replicas = 4
	}
	if cfg.ObserveInterval <= 0 {
		cfg.ObserveInterval = router.DefaultScrapeInterval
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = loadgen.DefaultScrapeInterval
	}
	r := &run{
		cfg:     cfg,
		sc:      sc,
		caches:  map[int64]*tokCache{},
		flights: map[string]*flight{},
		pending: map[int]pendingTurn{},
		ending:  map[string]*flight{},
		wall:    time.Now(),
	}
	r.ecfg = cfg.Engine
	r.ecfg.EmitTokens = true
	for i := 0; i < cfg.Replicas; i++ {
		r.names = append(r.names, router.ReplicaName(i))
	}
	if err := r.freshEngines(); err != nil {
		return nil, err
	}
	bcfg := cfg.Balancer
	bcfg.Replicas = r.names
	bcfg.Now = func() time.Duration { return r.sched.now }
	if bcfg.Seed == 0 {
		bcfg.Seed = sc.Seed
	}
	if bcfg.MaxNumSeqs == 0 {
		bcfg.MaxNumSeqs = r.engines[0].Config().MaxNumSeqs
	}
	if bcfg.KVCapacityTokens == 0 {
		// What the HTTP router learns from vllm:cache_config_info (routerhttp/scrape.go:
		// (num_gpu_blocks - 1) x block_size, the null block excluded).
		ec := r.engines[0].Config()
		bcfg.KVCapacityTokens = int64(ec.NumGPUBlocks-1) * int64(ec.BlockSize)
	}
	if sc.VLLMBalancer != "" {
		// One vLLM balancer per API-server process (docs/simulator.md section
		// 11): each request's process is known before its rank is chosen.
		bcfg.VLLMRelease, bcfg.APIServerProcesses = sc.VLLMBalancer, sc.APIServers
	}
	if bcfg.PrefixPieceTokens == 0 {
		// A piece is one KV block: the unit the engine's prefix cache hits in.
		bcfg.PrefixPieceTokens = r.engines[0].Config().BlockSize
	}
	r.pieceTokens = bcfg.PrefixPieceTokens
	r.bcfg = bcfg
	if err := r.freshBalancer(); err != nil {
		return nil, err
	}
	r.w = loadgen.NewWorkload(sc)
	r.w.SetTokenizer(sim.Tokenize) // user messages as token ids: no text is built
	if bs, salt, ok := sc.BlockPrompts(); ok {
		r.synth = traceSynth(bs, salt)
	}
	if s := r.w.SystemPrompt(); s != "" {
		r.system = sim.AppendMessage(nil, sim.ChatMessage{Role: "system", Content: s})
	}
	r.m = loadgen.NewManifest(sc, time.Now(), loadgen.RunInfo{
		RunID: cfg.RunID, Mode: "virtual", Target: "virtual", Replicas: r.names,
		Profile: cfg.Profile, Policy: cfg.Policy, Versions: cfg.Versions,
		Admission: ManifestAdmission(cfg.Balancer.Admission), Subagents: cfg.Subagents,
	})

	r.startVariant(0)
	runErr := r.loopEvents(ctx)
	if runErr != nil {
		r.m.Interrupted = true
	}
	if err := r.m.Check(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("virtual run: %w", err))
	}
	runErr = errors.Join(append([]error{runErr}, r.errs...)...)
	if cfg.Out != nil {
		if err := cfg.Out.Close(r.m); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("virtual run: %w", err))
		}
	}
	return r.m, runErr
}

// loopEvents processes events until the last variant ends or ctx is done.
func (r *run) loopEvents(ctx context.Context) error {
	for n := 0; ; n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			r.stopVariant(r.sched.now)
			return fmt.Errorf("virtual run: interrupted at %s simulated: %w", r.sched.now, ctx.Err())
		}
		ev, ok := r.sched.next()
		if !ok {
			return nil
		}
		t := ev.at
		switch ev.kind {
		case evStep:
			if ev.variant == r.engVar { // else an engine of an earlier variant
				r.step(ev.idx, t)
			}
			continue
		}
		if ev.variant != r.variant || r.loop == nil {
			if ev.kind == evSend || ev.kind == evArrive {
				delete(r.pending, ev.turn)
			}
			continue // left over from a variant that ended
		}
		switch ev.kind {
		case evStage:
			r.stageProgress(ev.idx - 1)
			r.send(r.loop.StartStage(ev.idx, t))
		case evSend, evArrive:
			p := r.pending[ev.turn]
			delete(r.pending, ev.turn)
			if !p.sent {
				p.h = held{since: t, arrived: t}
				if ow := r.w.OneWay(p.tr.Session.ID, p.tr.Turn); ow > 0 {
					// On its way to the router: it arrives half an RTT later.
					r.schedule(pendingTurn{tr: p.tr, h: held{since: t, arrived: t + ow}, sent: true}, t+ow, evArrive)
					continue
				}
			}
			r.submit(p.tr, t, p.h)
		case evEngine:
			if f := r.flights[ev.req]; f != nil && f.req != nil {
				r.toEngine(ev.req, f, t)
			}
		case evRelease:
			if f := r.ending[ev.req]; f != nil {
				r.release(f)
			}
		case evDeliver:
			if f := r.ending[ev.req]; f != nil {
				r.deliver(ev.req, f, t)
			}
		case evPoll:
			r.poll(t)
			if next := r.polls.Next(); next <= r.end {
				r.sched.at(event{at: next, kind: evPoll, variant: r.variant})
			}
		case evObserve:
			for i, e := range r.engines {
				st := e.Stats()
				r.bal.ObserveEngine(i, st.Running, st.Waiting, st.KVUsage, t)
			}
			if t+r.cfg.ObserveInterval < r.end {
				r.sched.at(event{at: t + r.cfg.ObserveInterval, kind: evObserve, variant: r.variant})
			}
		case evTimeout:
			r.timeout(ev.req, t)
		case evEnd:
			r.stageProgress(len(r.loop.Windows()) - 1)
			r.stopVariant(t)
			if r.variant+1 < len(r.sc.Variants) {
				r.startVariant(r.variant + 1)
			} else {
				return nil
			}
		}
	}
}

// freshEngines builds the engines (and the API-server model) as at the run's
// start, for variant r.variant.
func (r *run) freshEngines() error {
	r.engines = r.engines[:0]
	for i := range r.names {
		ecfg := r.ecfg
		ecfg.Seed = sim.EngineSeed(r.sc.Seed, i)
		e, err := sim.NewEngine(ecfg)
		if err != nil {
			return fmt.Errorf("virtual run: building engine %d: %w", i, err)
		}
		r.engines = append(r.engines, e)
	}
	r.engVar = r.variant
	r.busy = make([]bool, len(r.names))
	r.fe = nil
	if r.sc.APIServers > 0 {
		r.fe = sim.NewFrontend(r.engines[0].Config().Profile.Frontend, r.sc.APIServers)
	}
	return nil
}

// freshBalancer builds the router as at the run's start: no sessions, no
// learned estimates, the tie-break RNG at its seed.
func (r *run) freshBalancer() error {
	bal, err := router.NewBalancer(r.bcfg)
	if err != nil {
		return fmt.Errorf("virtual run: %w", err)
	}
	r.bal = bal
	return nil
}

// startVariant prepares the engines and the router for variant v and schedules its
// stages, starting now. Every variant after the first gets a fresh router and,
// unless the scenario keeps caches warm (reset_cache: false), fresh engines:
// each variant then runs as it would alone, whatever ran before it.
func (r *run) startVariant(v int) {
	name := r.sc.Variants[v]
	aff, err := loadgen.AffinityOf(name)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("virtual run: variant %q: %w", name, err))
	}
	now := r.sched.now
	r.variant = v
	if v > 0 {
		if r.sc.ResetCache == nil || *r.sc.ResetCache {
			err = r.freshEngines()
		}
		err = errors.Join(err, r.freshBalancer())
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("virtual run: variant %q: %w", name, err))
		}
	}
	r.bal.SetAffinity(aff)
	r.caches = map[int64]*tokCache{}
	loop, err := loadgen.NewController(r.sc, r.w, name, now, loadgen.Fleet{KVTokens: r.fleetKVTokens(), MaxModelLen: r.engines[0].Config().MaxModelLen})
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("virtual run: %w", err))
		return
	}
	r.loop = loop
	ws := r.loop.Windows()
	r.end = ws[len(ws)-1].End
	r.stageOK = make([]int, len(ws))
	r.stageKO = make([]int, len(ws))
	for i, w := range ws {
		r.sched.at(event{at: w.Start, kind: evStage, variant: v, idx: i})
	}
	// A poll at the start (every window then has a sample at or before its
	// start), then one jittered within each interval (loadgen.PollSchedule).
	r.polls = loadgen.NewPollSchedule(r.sc.Seed, name, now, r.cfg.PollInterval)
	r.sched.at(event{at: now, kind: evPoll, variant: v})
	r.sched.at(event{at: now, kind: evObserve, variant: v})
	r.sched.at(event{at: r.end, kind: evEnd, variant: v})
}

// stopVariant aborts the variant's turns in flight (they count as in flight at the
// end, as in the HTTP world where the runner cancels them) and records the variant.
func (r *run) stopVariant(t time.Duration) {
	if r.loop == nil {
		return
	}
	if r.cfg.OnCut != nil {
		r.reportCut()
	}
	ids := make([]string, 0, len(r.flights))
	for id := range r.flights {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := r.flights[id]
		r.engines[f.replica].Abort(id)
		r.bal.ReleaseConv(f.replica, r.convOf(f.tr.Session))
		delete(r.flights, id)
	}
	// Finished on their engine, not yet at the client: in flight at the end.
	ids = ids[:0]
	for id := range r.ending {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if f := r.ending[id]; !f.released {
			r.bal.ReleaseConv(f.replica, r.convOf(f.tr.Session))
		}
		delete(r.ending, id)
	}
	r.loop.Stop(t)
	r.m.Variants = append(r.m.Variants, r.loop.Variant())
	if err := loadgen.RecordReplay(r.loop, r.m); err != nil {
		r.errs = append(r.errs, err)
	}
	r.loop = nil
	r.pending = map[int]pendingTurn{}
}

// send schedules the loop's next turns at their intended instants.
// reportCut calls OnCut for every open turn (stopVariant).
func (r *run) reportCut() {
	var cut []loadgen.Result
	for _, fs := range []map[string]*flight{r.flights, r.ending} {
		for _, f := range fs {
			res := f.res
			res.Done = 0
			cut = append(cut, res)
		}
	}
	for _, p := range r.pending {
		if p.sent {
			res := p.tr.NewResult()
			res.Sent = p.h.since
			cut = append(cut, res)
		}
	}
	sort.Slice(cut, func(i, j int) bool {
		a, b := &cut[i], &cut[j]
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		if a.Turn != b.Turn {
			return a.Turn < b.Turn
		}
		return !a.Side && b.Side
	})
	for _, res := range cut {
		r.cfg.OnCut(res)
	}
}

func (r *run) send(trs []loadgen.TurnRequest) {
	for _, tr := range trs {
		r.schedule(pendingTurn{tr: tr}, tr.Intended, evSend)
	}
}

// schedule files p under a new turn id and schedules its evSend or evArrive at.
func (r *run) schedule(p pendingTurn, at time.Duration, kind eventKind) {
	id := r.nextTurn
	r.nextTurn++
	r.pending[id] = p
	r.sched.at(event{at: at, kind: kind, variant: r.variant, turn: id})
}

// prompt renders the session's conversation to token ids, reusing what earlier
// turns rendered, and drops the text of the messages it rendered (nothing in the
// virtual world reads it again). The result lies in c.toks's spare capacity, with
// room for maxTokens more: the engine keeps it (sim.Request.Keep) and appends its
// output there, and the session's next message, appended once the turn is over,
// overwrites both. One copy of each conversation's tokens thus serves the session
// and its engine. It also returns the block hashes of the conversation so far
// (sim.Request.Hashes), extended by the blocks this turn added.
func (r *run) prompt(s *loadgen.Session, maxTokens int) ([]uint32, []uint64) {
	c := r.caches[s.ID]
	if c == nil {
		c = &tokCache{toks: append([]uint32(nil), r.system...)}
		r.caches[s.ID] = c
	}
	for ; c.msgs < len(s.Messages); c.msgs++ {
		m := s.Messages[c.msgs]
		if ids := s.TakeTokens(c.msgs); ids != nil {
			c.toks = sim.AppendMessageTokens(c.toks, m.Role, ids)
		} else {
			c.toks = sim.AppendMessage(c.toks, sim.ChatMessage{Role: m.Role, Content: m.Content})
		}
		s.Messages[c.msgs].Content = "" // turns sent before share the message: none reads it again
	}
	c.toks = slices.Grow(c.toks, genPromptTokens+maxTokens)
	c.hashes = sim.AppendBlockHashes(c.hashes, c.toks, r.engines[0].Config().BlockSize)
	return sim.AppendGenerationPrompt(c.toks), c.hashes
}

// genPromptTokens is the length of sim.AppendGenerationPrompt's tokens.
var genPromptTokens = len(sim.AppendGenerationPrompt(nil))

// sidePrompt renders a side request (its own system prompt and user message) to
// token ids.
func sidePrompt(tr loadgen.TurnRequest) []uint32 {
	toks := sim.AppendMessage(nil, sim.ChatMessage{Role: "system", Content: tr.Side.System})
	for _, m := range tr.Messages {
		toks = sim.AppendMessage(toks, sim.ChatMessage{Role: m.Role, Content: m.Content})
	}
	return sim.AppendGenerationPrompt(toks)
}

// submit routes a turn at t; h.since is when the client sent it and h.arrived when
// it reached the router (earlier than t when the router held it: router.ErrHold,
// retried every HoldRetry; since is earlier than arrived by half an RTT).
func (r *run) submit(tr loadgen.TurnRequest, t time.Duration, h held) {
	since := h.since
	res := tr.NewResult()
	res.Sent, res.Headers = since, t
	r.loop.Sent(tr, since)
	var prompt []uint32
	keep := false // prompt is the session's token cache (run.prompt)
	var hashes []uint64
	maxTokens := r.sc.MaxOutputTokens
	switch {
	case tr.Trace != nil:
		prompt = r.tracePrompt(tr.Trace)
		maxTokens = max(1, tr.Trace.Request.OutputLength)
	case tr.Side != nil:
		prompt = sidePrompt(tr)
		maxTokens = tr.Side.MaxTokens
	default:
		prompt, hashes = r.prompt(tr.Session, maxTokens)
		keep = true
	}
	conv := r.convOf(tr.Session)
	facts := router.Facts{SessionKey: conv.Key, ParentKey: conv.Parent, Agent: conv.Agent, Tools: tr.Trace != nil && tr.Trace.Agent != nil, FollowParent: r.cfg.Subagents == router.SubagentsFollow, PromptTokens: len(prompt), HeldFor: t - h.arrived,
		Ticket: h.ticket, Continuing: tr.Turn > 0 && tr.Side == nil}
	if r.fe != nil && r.sc.VLLMBalancer != "" {
		// The process that will accept it (sim.Frontend.Admit below, at the same
		// instant) balances it with its own state.
		facts.Process = r.fe.Next()
	}
	if facts.SessionKey == "" {
		// What a keyless router can know of the prompt: its leading pieces.
		r.prefix = router.PrefixHashes(r.prefix, prompt, r.pieceTokens, 0)
		facts.Prefix = r.prefix
	}
	d, info, err := r.bal.Admit(facts)
	if errors.Is(err, router.ErrHold) {
		h.ticket = info.Ticket
		r.schedule(pendingTurn{tr: tr, h: h, sent: true}, t+HoldRetry, evSend)
		return
	}
	res.Held = t - h.arrived
	if errors.Is(err, router.ErrOverloaded) {
		res.Done, res.Status, res.Err = t, 429, err.Error()
		r.finish(&res, t, tr.Session)
		return
	}
	if err != nil {
		res.Done, res.Status, res.Err = t, 503, err.Error()
		r.finish(&res, t, tr.Session)
		return
	}
	res.Replica = r.names[d.Replica]
	id := strconv.Itoa(r.variant) + "/" + strconv.FormatInt(tr.Session.ID, 10) + "/" + strconv.Itoa(tr.Turn)
	if tr.Side != nil {
		id += "/side"
	}
	if tr.Trace != nil {
		id = strconv.Itoa(r.variant) + "/trace/" + strconv.Itoa(tr.Trace.Index)
	}
	req := &sim.Request{ID: id, Prompt: prompt, MaxTokens: maxTokens, Keep: keep, Hashes: hashes}
	f := &flight{tr: tr, res: res, replica: d.Replica, out: make([]uint32, 0, req.MaxTokens), req: req}
	if facts.Prefix != nil {
		f.prefix = append([]uint64(nil), facts.Prefix...)
	}
	f.oneWay = r.w.OneWay(tr.Session.ID, tr.Turn)
	f.res.Headers = t + f.oneWay
	f.res.PromptTokens = len(req.Prompt)
	r.flights[id] = f
	r.sched.at(event{at: since + r.sc.RequestTimeout, kind: evTimeout, variant: r.variant, req: id})
	ready := t
	if r.fe != nil {
		f.proc, ready = r.fe.Admit(t, len(req.Prompt))
	}
	if ready > t {
		r.sched.at(event{at: ready, kind: evEngine, variant: r.variant, req: id})
		return
	}
	r.toEngine(id, f, t)
}

// toEngine submits a routed request to its engine at t. An engine that refuses it
// (sim.ErrInvalidRequest) fails the turn with a 400 and no usage, as the HTTP
// client sees it.
func (r *run) toEngine(id string, f *flight, t time.Duration) {
	req := f.req
	f.req = nil
	if err := r.engines[f.replica].Submit(req, t); err != nil {
		delete(r.flights, id)
		r.bal.ReleaseConv(f.replica, r.convOf(f.tr.Session))
		f.res.PromptTokens = 0
		f.res.Done, f.res.Status, f.res.Err = t, 400, err.Error()
		r.finish(&f.res, t, f.tr.Session)
		return
	}
	if f.prefix != nil {
		r.bal.RecordPrefix(f.replica, f.prefix)
	}
	if !r.busy[f.replica] {
		r.busy[f.replica] = true
		r.sched.at(event{at: t, kind: evStep, idx: f.replica, variant: r.engVar})
	}
}

// release is the router seeing a finished request's stream end.
func (r *run) release(f *flight) {
	if f.released {
		return
	}
	f.released = true
	r.bal.ObserveCache(r.keyOf(f.tr.Session), f.replica, f.res.PromptTokens, f.res.CachedTokens)
	r.bal.ReleaseConv(f.replica, r.convOf(f.tr.Session))
}

// deliver is the client receiving a finished request's end at t.
func (r *run) deliver(id string, f *flight, t time.Duration) {
	r.release(f)
	delete(r.ending, id)
	if f.tr.Side == nil && f.tr.Trace == nil {
		f.tr.Session.AddReply(sim.Detokenize(f.out))
	}
	r.finish(&f.res, t, f.tr.Session)
}

// stepEvents handles the events of a step that ended at t: the step's outputs are
// handled by each request's API-server process (sim.Frontend.Emit, in process
// order; at t without an API-server model), written to the router then, and reach
// the client half an RTT later (at once without a network).
func (r *run) stepEvents(t time.Duration, events []sim.Event) {
	var written map[int]time.Duration // by process
	if r.fe != nil {
		tokens := make([]int, r.fe.Processes())
		seen := make([]bool, r.fe.Processes())
		for _, ev := range events {
			if f := r.flights[ev.ReqID]; f != nil {
				seen[f.proc] = true
				if ev.Kind == sim.EventFirstToken || ev.Kind == sim.EventToken {
					tokens[f.proc]++
				}
			}
		}
		written = map[int]time.Duration{}
		for p := range tokens {
			if seen[p] {
				written[p] = r.fe.Emit(p, t, tokens[p])
			}
		}
	}
	for _, ev := range events {
		f := r.flights[ev.ReqID]
		if f == nil {
			continue // aborted
		}
		at := t
		if w, ok := written[f.proc]; ok {
			at = w
		}
		client := at + f.oneWay
		switch ev.Kind {
		case sim.EventFirstToken:
			f.res.FirstEvent, f.res.FirstToken = client, client
			f.out = append(f.out, ev.Token)
			f.res.LastToken = client
		case sim.EventToken:
			f.out = append(f.out, ev.Token)
			f.res.LastToken = client
		case sim.EventFinished:
			f.res.Done, f.res.Status = client, 200
			f.res.PromptTokens, f.res.CachedTokens, f.res.OutputTokens = ev.PromptTokens, ev.CachedTokens, ev.OutputTokens
			delete(r.flights, ev.ReqID)
			r.ending[ev.ReqID] = f
			if at > t {
				r.sched.at(event{at: at, kind: evRelease, variant: r.variant, req: ev.ReqID})
			} else {
				r.release(f)
			}
			if client > t {
				r.sched.at(event{at: client, kind: evDeliver, variant: r.variant, req: ev.ReqID})
			} else {
				r.deliver(ev.ReqID, f, t)
			}
		}
	}
}

// timeout ends a turn still in flight that has had no byte for its
// request_timeout, as the HTTP client does: the request is aborted on its
// engine and the turn fails (the loop then ends its session and starts a
// replacement after the failure backoff). A byte came later: the check moves.
func (r *run) timeout(id string, t time.Duration) {
	f := r.flights[id]
	if f == nil {
		return // finished in time
	}
	if due := r.lastByte(f) + r.sc.RequestTimeout; due > t {
		r.sched.at(event{at: due, kind: evTimeout, variant: r.variant, req: id})
		return
	}
	delete(r.flights, id)
	r.engines[f.replica].Abort(id)
	r.bal.ReleaseConv(f.replica, r.convOf(f.tr.Session))
	f.res.Done, f.res.Status = t, 200
	f.res.Err = fmt.Sprintf("timeout: no byte for %s (request_timeout)", r.sc.RequestTimeout)
	r.finish(&f.res, t, f.tr.Session)
}

// step runs engine i's step at t and handles what it reports.
func (r *run) step(i int, t time.Duration) {
	res := r.engines[i].Step(t)
	r.stepEvents(t, res.Events)
	r.busy[i] = res.Busy
	if res.Busy {
		r.sched.at(event{at: res.NextAt, kind: evStep, idx: i, variant: r.engVar})
	}
}

// finish hands a finished turn to the closed loop and records it.
func (r *run) finish(res *loadgen.Result, t time.Duration, s *loadgen.Session) {
	if r.cfg.Out != nil {
		if err := r.cfg.Out.WriteResult(res); err != nil {
			r.errs = append(r.errs, err)
		}
	}
	if r.cfg.OnResult != nil {
		r.cfg.OnResult(*res)
	}
	if k := r.stageIndex(t); k >= 0 && !res.Side {
		if res.OK() {
			r.stageOK[k]++
		} else {
			r.stageKO[k]++
		}
	}
	next := r.loop.Finish(res, t)
	if s.Done() {
		delete(r.caches, s.ID)
	}
	r.send(next)
	if loadgen.Ended(r.loop) && t < r.end {
		// An agent replay played every session: the variant ends just after
		// this last call, so it falls inside the last window ([Start, End)).
		r.end = t + time.Nanosecond
		r.sched.at(event{at: r.end, kind: evEnd, variant: r.variant})
	}
}

func (r *run) stageIndex(t time.Duration) int {
	if r.loop == nil {
		return -1
	}
	ws := r.loop.Windows()
	for i, w := range ws {
		if t >= w.Start && t < w.End {
			return i
		}
	}
	return len(ws) - 1
}

func (r *run) poll(t time.Duration) {
	if r.cfg.Out == nil {
		return
	}
	name := r.sc.Variants[r.variant]
	for i, e := range r.engines {
		st := e.Stats()
		err := r.cfg.Out.WriteSample(loadgen.SeriesSample{
			Variant: name, T: t, Replica: r.names[i],
			Running: float64(st.Running), Waiting: float64(st.Waiting), KVUsage: st.KVUsage,
			PrefixQueries: float64(st.PrefixQueries), PrefixHits: float64(st.PrefixHits),
			PromptTokens: float64(st.PromptTokens), GenerationTokens: float64(st.GenerationTokens),
			Preemptions: float64(st.Preemptions), PromptComputedTokens: float64(st.PromptComputed),
		})
		if err != nil {
			r.errs = append(r.errs, err)
			return
		}
	}
}

func (r *run) stageProgress(k int) {
	if r.cfg.Progress == nil || k < 0 || r.loop == nil {
		return
	}
	ws := r.loop.Windows()
	if k >= len(ws) {
		return
	}
	label := fmt.Sprintf("stage %d/%d  %3d sessions", k+1, len(ws), ws[k].Sessions)
	if r.sc.Trace != nil {
		// A trace replay's report windows, to its end or the duration cap;
		// its "sessions" are the conversations (or trees) started in one.
		label = fmt.Sprintf("window %d (of at most %d)  %3d started", k+1, len(ws), ws[k].Sessions)
	}
	fmt.Fprintf(r.cfg.Progress, "virtual %-4s %s  t=%6.0fs  turns ok=%d failed=%d  wall %.1fs\n",
		r.sc.Variants[r.variant], label, ws[k].End.Seconds(), r.stageOK[k], r.stageKO[k], time.Since(r.wall).Seconds())
	if msg := loadgen.ConcurrencyWarning(r.loop, k, ws[k].End); msg != "" {
		fmt.Fprintf(r.cfg.Progress, "warning: [%s] stage %d/%d (%d sessions): %s\n", r.sc.Variants[r.variant], k+1, len(ws), ws[k].Sessions, msg)
	}
}

// lastByte is when the client last had a byte of f's response: its last token,
// or, for a turn the router held at least keepalive_after, the end of the hold
// (the router sent the headers and keep-alive events meanwhile:
// router.AdmissionConfig.KeepAliveAfter); else when it was sent.
func (r *run) lastByte(f *flight) time.Duration {
	last := max(f.res.Sent, f.res.LastToken)
	if ka := r.bcfg.Admission.WithDefaults().KeepAliveAfter; ka > 0 && f.res.Held >= ka {
		last = max(last, f.res.Headers)
	}
	return last
}

// ManifestAdmission is a router admission config as a run's manifest records
// it (loadgen.Admission), defaults resolved: the one conversion for both
// worlds (the HTTP bench configures its embedded router with the same config).
func ManifestAdmission(c router.AdmissionConfig) *loadgen.Admission {
	c = c.WithDefaults()
	if c.Mode != router.AdmissionFit {
		return &loadgen.Admission{Mode: router.AdmissionOff}
	}
	return &loadgen.Admission{
		Mode: c.Mode, FillTarget: c.FillTarget, MaxHold: c.MaxHold, MaxQueue: c.MaxQueue,
		OnLimit: c.OnLimit, KeepAliveAfter: c.KeepAliveAfter,
	}
}

// keyOf is the session key the router is given for s: none when the scenario sends
// no key (session_header: none).
func (r *run) keyOf(s *loadgen.Session) string {
	if s == nil || r.sc.SessionHeader == loadgen.SessionHeaderNone {
		return ""
	}
	if r.cfg.Subagents != "" && r.cfg.Subagents != router.SubagentsKeep && s.Agent != "" && s.Key != "" {
		// As routerhttp.ExtractKey does with split_subagents or follow_subagents.
		return s.Key + "/agent/" + s.Agent
	}
	return s.Key
}

// convOf is the conversation of session s as the router's facts name it
// (router.Facts.Conv): its key, its parent's and its agent id.
func (r *run) convOf(s *loadgen.Session) router.ConvRef {
	c := router.ConvRef{Key: r.keyOf(s), Parent: r.parentKeyOf(s)}
	if s != nil && c.Key != "" {
		c.Agent = s.Agent
	}
	return c
}

// parentKeyOf is the parent's key of a subagent's session whose key is split
// (router.Facts.ParentKey), "" otherwise.
func (r *run) parentKeyOf(s *loadgen.Session) string {
	if r.cfg.Subagents == "" || r.cfg.Subagents == router.SubagentsKeep || s == nil || s.Agent == "" || r.sc.SessionHeader == loadgen.SessionHeaderNone {
		return ""
	}
	return s.Key
}
