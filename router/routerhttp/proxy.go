package routerhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// DefaultMaxAttempts bounds how many replicas one request is tried on when
// connecting fails before any byte reached the client.
const DefaultMaxAttempts = 3

// ProxiedPaths are the POST endpoints the proxy routes. Every one of them goes
// through Balancer.Acquire/Release, so each feeds the load counts (peers.md router
// case 3). Query strings pass through (Claude Code calls /v1/messages?beta=true).
var ProxiedPaths = []string{wire.PathChatCompletions, wire.PathCompletions, wire.PathMessages, wire.PathCountTokens}

var proxiedPath = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range ProxiedPaths {
		m[p] = true
	}
	return m
}()

// Upstream is where a replica is reached: a base URL and, for a DP rank behind a
// shared endpoint, the rank pinned with X-Data-Parallel-Rank (-1: not pinned).
type Upstream struct {
	Name string
	URL  *url.URL
	Rank int
}

// Pool is one model's replicas: Upstreams[i] is the Balancer's replica i.
// Upstreams is set before the pool serves; afterwards replicas are added only
// with AddUpstream and read with Upstream / UpstreamList (Router.AddReplica).
type Pool struct {
	Model     string // model name, or WildcardModel
	Balancer  *router.Balancer
	Upstreams []Upstream

	mu sync.RWMutex // guards Upstreams once the pool serves

	// lastModel is the latest "model" a client asked this pool for: the model
	// an ejected replica's probe asks for when the pool serves any model.
	lastModel atomic.Pointer[string]
}

// probeModel is the model a probe of the pool's replicas asks for.
func (p *Pool) probeModel() string {
	if p.Model != WildcardModel {
		return p.Model
	}
	if m := p.lastModel.Load(); m != nil {
		return *m
	}
	return ""
}

// Upstream returns replica i's upstream.
func (p *Pool) Upstream(i int) Upstream {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Upstreams[i]
}

// UpstreamList returns a copy of the upstreams (index = Balancer replica).
func (p *Pool) UpstreamList() []Upstream {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]Upstream(nil), p.Upstreams...)
}

// AddUpstream appends u and then the matching Balancer replica (healthy, no
// session moves; Balancer.AddReplica), in that order, so a request routed to the
// new index always finds its upstream. It returns the replica's index.
func (p *Pool) AddUpstream(u Upstream) int {
	p.mu.Lock()
	p.Upstreams = append(p.Upstreams, u)
	p.mu.Unlock()
	return p.Balancer.AddReplica(u.Name)
}

// ProxyConfig configures a Proxy. Zero values mean defaults.
type ProxyConfig struct {
	Pools     []*Pool   // at least one; at most one with Model WildcardModel
	Keys      KeyConfig // where session keys are read
	BodyLimit int64     // bytes; default DefaultBodyLimit
	// BodyReadTimeout bounds reading one request body, wall time from the
	// handler's start (408 past it); default DefaultBodyReadTimeout, negative
	// none.
	BodyReadTimeout time.Duration
	// BodyMemory caps the bytes all request bodies being read hold together
	// (503 with Retry-After for a request that would pass it); default
	// DefaultBodyMemoryBytes.
	BodyMemory  int64
	Transport   http.RoundTripper // to the upstreams; default NewTransport(DefaultDialTimeout, 0)
	MaxAttempts int               // default DefaultMaxAttempts
	Metrics     *Metrics          // optional
	Logger      *slog.Logger      // default slog.Default()
	// OnRoute, when set, is called once per routed API request right after its
	// replica is chosen (before forwarding), with the session key ("" when none),
	// the body size in bytes and the decision. It runs on the request's goroutine
	// and must be fast and non-blocking (the Router feeds its status card with it).
	OnRoute func(pool *Pool, key string, bodyBytes int, d router.Decision)
	// Clock, when set, is the clock a request held for admission waits on (the
	// Balancers' clock); default wall time.
	Clock simclock.Clock
}

// Proxy is the router's http.Handler for the API: it reads each request's model
// and session key, asks the model's Balancer for a replica, and forwards the
// request with httputil.ReverseProxy, streaming the response event by event.
//
// Per request: the body is read whole (limit BodyLimit, else 413) because the key
// may be in it; a POST body that is not a JSON object gets 400; an unknown model
// 404 (error in the OpenAI or Anthropic shape by path). The in-flight count taken by
// Acquire is released exactly once, when the response has been copied to the end,
// the upstream failed, or the client went away (peers.md router case 2). The
// response carries X-Warden-Replica and X-Warden-Decision (as trailers when it
// was committed while held for admission: hold.go). Headers pass through
// untouched (auth, anthropic-*, x-stainless-*) except X-Data-Parallel-Rank, which
// a client may not set: the proxy strips it and sets it itself for a DP-rank
// replica. The inbound context is forwarded, so a client disconnect cancels the
// upstream request.
//
// Failures: a connection that cannot be made (refused, unreachable, dial timeout)
// marks the replica unhealthy (passive health check) and the request is retried on
// another replica; another transport error before the response headers (e.g. a
// reset) is retried elsewhere without marking; nothing is retried once the client
// got a byte. A replica that stops answering with connections open (a hung or
// stopped process) is caught by the health check, which calls AbortSilent: its
// silent requests are retried elsewhere when no response had arrived, or ended
// with the stream error event when one had. A stream that breaks after it
// started ends with an error event in the API's own shape. Status codes come from StatusFor. The proxy sets no read or
// idle timeout of its own, so nothing cuts a live stream.
//
// Also served: GET /v1/models (from the configured model names; forwarded to a
// replica when a pool matches any model) and GET /health (200 when every model has
// a healthy replica, else 503).
type Proxy struct {
	pools       map[string]*Pool
	wildcard    *Pool
	order       []*Pool
	keys        KeyConfig
	limit       int64
	bodyTimeout time.Duration
	bodyMem     *bodyBudget
	maxAttempts int
	rp          *httputil.ReverseProxy
	m           *Metrics
	log         *slog.Logger
	onRoute     func(pool *Pool, key string, bodyBytes int, d router.Decision)
	clock       simclock.Clock

	liveMu sync.Mutex
	live   map[liveKey]map[*call]struct{} // requests in flight per replica (AbortSilent)
}

// liveKey names one replica of one pool.
type liveKey struct {
	pool    *Pool
	replica int
}

// ErrReplicaDown is the cause with which AbortSilent ends a request: its replica
// failed its health check and had sent nothing for the request in a while.
var ErrReplicaDown = errors.New("replica marked down by its health check and silent")

// NewTransport returns the HTTP transport the proxy uses to reach upstreams:
// keep-alive connections (idle ones closed after 4 s, under uvicorn's default 5 s
// keep-alive, so the proxy rarely reuses a connection the server is closing), no
// transparent compression (bytes pass as the upstream sent them), no environment
// proxy. headerTimeout 0 means none.
func NewTransport(dialTimeout, headerTimeout time.Duration) *http.Transport {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       4 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		DisableCompression:    true,
	}
}

// copyBufferSize is the size of the buffer a response body is copied through:
// httputil.ReverseProxy's own default (reverseproxy.go copyBuffer, 32 KiB). One
// Read of the upstream body fills at most this much, and it is written and flushed
// at once.
const copyBufferSize = 32 << 10

// copyBuffers recycles the response copy buffers. Without a BufferPool,
// ReverseProxy allocates and zeroes a fresh 32 KiB buffer per request, which was
// about two thirds of the proxy's bytes allocated per request and the main source
// of its GC work (BenchmarkProxyFirstEvent).
var copyBuffers httputil.BufferPool = &bufferPool{}

// bufferPool is an httputil.BufferPool over sync.Pool of *[]byte (Put allocates
// only the 24-byte slice header, not 32 KiB).
type bufferPool struct{ p sync.Pool }

func (bp *bufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, copyBufferSize)
}

func (bp *bufferPool) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	b = b[:copyBufferSize]
	bp.p.Put(&b)
}

// NewProxy checks cfg and builds a Proxy.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	p := &Proxy{
		pools:       map[string]*Pool{},
		keys:        cfg.Keys,
		limit:       cfg.BodyLimit,
		maxAttempts: cfg.MaxAttempts,
		m:           cfg.Metrics,
		log:         cfg.Logger,
		onRoute:     cfg.OnRoute,
		clock:       cfg.Clock,
	}
	if p.limit <= 0 {
		p.limit = DefaultBodyLimit
	}
	switch {
	case cfg.BodyReadTimeout == 0:
		p.bodyTimeout = DefaultBodyReadTimeout
	case cfg.BodyReadTimeout > 0:
		p.bodyTimeout = cfg.BodyReadTimeout
	}
	p.bodyMem = &bodyBudget{limit: cfg.BodyMemory}
	if p.bodyMem.limit <= 0 {
		p.bodyMem.limit = DefaultBodyMemoryBytes
	}
	if p.maxAttempts <= 0 {
		p.maxAttempts = DefaultMaxAttempts
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	var errs []error
	if len(cfg.Pools) == 0 {
		errs = append(errs, errors.New("pools: at least one is required"))
	}
	for i, pool := range cfg.Pools {
		switch {
		case pool == nil || pool.Balancer == nil:
			errs = append(errs, fmt.Errorf("pools[%d]: no balancer", i))
			continue
		case pool.Balancer.Len() != len(pool.Upstreams):
			errs = append(errs, fmt.Errorf("pools[%d]: %d upstreams for %d replicas", i, len(pool.Upstreams), pool.Balancer.Len()))
		case p.pools[pool.Model] != nil:
			errs = append(errs, fmt.Errorf("pools[%d]: model %q twice", i, pool.Model))
		}
		for j, u := range pool.Upstreams {
			if u.URL == nil {
				errs = append(errs, fmt.Errorf("pools[%d].upstreams[%d]: no url", i, j))
			}
		}
		p.pools[pool.Model] = pool
		p.order = append(p.order, pool)
		if pool.Model == WildcardModel {
			p.wildcard = pool
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("building proxy: %w", err)
	}
	tr := cfg.Transport
	if tr == nil {
		tr = NewTransport(DefaultDialTimeout, 0)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      &retryTransport{p: p, base: tr},
		FlushInterval:  -1, // flush after every write: SSE passes event by event
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		BufferPool:     copyBuffers,
	}
	return p, nil
}

// Pools returns the proxy's pools in configuration order.
func (p *Proxy) Pools() []*Pool { return p.order }

// Pool returns the pool serving model (the wildcard pool for unknown names), or nil.
func (p *Proxy) Pool(model string) *Pool {
	if pool := p.pools[model]; pool != nil {
		return pool
	}
	if p.wildcard != nil {
		return p.wildcard
	}
	// A request without a model goes to the only pool when there is one.
	if model == "" && len(p.order) == 1 {
		return p.order[0]
	}
	return nil
}

// track registers c's current attempt (replica c.dec.Replica) with the cancel
// function of the attempt's context, for AbortSilent.
func (p *Proxy) track(c *call, cancel context.CancelCauseFunc) {
	c.last.Store(time.Now().UnixNano())
	k := liveKey{c.pool, c.dec.Replica}
	p.liveMu.Lock()
	if p.live == nil {
		p.live = map[liveKey]map[*call]struct{}{}
	}
	set := p.live[k]
	if set == nil {
		set = map[*call]struct{}{}
		p.live[k] = set
	}
	set[c] = struct{}{}
	c.cancel, c.tracked, c.isTracked = cancel, k, true
	p.liveMu.Unlock()
}

// untrack removes c from the registry and cancels its attempt context (a no-op
// once the response was read to the end); safe to call more than once.
func (p *Proxy) untrack(c *call) {
	p.liveMu.Lock()
	if !c.isTracked {
		p.liveMu.Unlock()
		return
	}
	delete(p.live[c.tracked], c)
	c.isTracked = false
	cancel := c.cancel
	p.liveMu.Unlock()
	cancel(nil)
}

// AbortSilent ends the requests in flight on the given replicas of pool that
// have received nothing from their upstream for at least silentFor (wall time;
// counted from the request's send, then from each response read), with the cause
// ErrReplicaDown, and returns how many it ended. A request whose response had not
// started is retried on another replica (nothing reached the client yet; the
// replica is avoided for it); one whose SSE response had started ends with the
// API's stream error event; a started non-streaming response is cut. The Router
// calls it when a replica fails its health check, with silentFor = the probe's
// own timeout, so a replica that answers slowly but streams is left alone.
func (p *Proxy) AbortSilent(pool *Pool, replicas []int, silentFor time.Duration) int {
	cutoff := time.Now().Add(-silentFor).UnixNano()
	n := 0
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	for _, i := range replicas {
		for c := range p.live[liveKey{pool, i}] {
			if c.last.Load() <= cutoff {
				c.cancel(ErrReplicaDown)
				n++
			}
		}
	}
	return n
}

type callKey struct{}

// call is the state of one proxied request, shared by the handler, the transport
// and the response hooks (all on the handler's goroutine).
type call struct {
	pool    *Pool
	api     apiKind
	facts   router.Facts
	body    []byte
	inURL   url.URL
	counted bool // holds an in-flight count (false for /v1/models forwarding)
	held    bool
	dec     router.Decision
	adm     router.AdmitInfo // what the admission gate decided (hold.go)
	ka      *keepAlive       // the response was committed while held (hold.go)
	// stateWait: wall time the call's decisions waited on the shared state
	// (Balancer.AdmitWait, summed over admission polls and retries).
	stateWait time.Duration

	attempts int
	sentAt   time.Time
	// failed are the attempts that failed on a replica and were retried
	// elsewhere (settleOutcomes); retried5xx: a 5xx was retried already.
	failed       []failedAttempt
	retried5xx   bool
	gotFirstByte bool
	// last is when the current attempt last heard from its upstream (UnixNano:
	// the send, then every response read); cancel ends the attempt's context.
	// cancel, tracked and isTracked are guarded by Proxy.liveMu.
	last      atomic.Int64
	cancel    context.CancelCauseFunc
	tracked   liveKey
	isTracked bool

	usage        usageScanner // the response's usage (SSE or JSON), for Balancer.ObserveCache
	status       int
	upStatus     int // the upstream's response status (0: it never answered)
	err          error
	streamBroken error
}

// failedAttempt is one attempt of a call that failed on its replica: a 5xx
// response (status) or a connection that broke before any response (status 0).
type failedAttempt struct {
	replica int
	status  int
	why     string
}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

func (c *call) upstream() Upstream { return c.pool.Upstream(c.dec.Replica) }

// release ends the call's in-flight count; safe to call more than once.
func (c *call) release() {
	if c.held {
		c.held = false
		c.pool.Balancer.ReleaseSession(c.dec.Replica, c.facts.SessionKey)
	}
}

func (c *call) setHeaders(h http.Header) {
	h.Set(wire.HeaderReplica, c.upstream().Name)
	if c.counted {
		h.Set(wire.HeaderDecision, c.dec.Reason.String())
		c.setAdmissionHeaders(h)
		c.setStateHeader(h)
	}
}

// ServeHTTP implements http.Handler: the router's own endpoints are answered
// here; a proxied request is read (readRequest), routed (acquire), forwarded,
// and settled when it ends (settle: release, policy feedback, metrics, log).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case wire.PathHealth:
		p.serveHealth(w, r)
		return
	case wire.PathModels:
		p.serveModels(w, r)
		return
	}
	api := apiFor(r.URL.Path)
	body, info, ok := p.readRequest(w, r, api)
	if !ok {
		return
	}
	c, ok := p.acquire(w, r, api, body, info)
	if !ok {
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		p.settle(r, c, sw, start, v != nil)
		if v != nil {
			panic(v) // http.ErrAbortHandler from ReverseProxy: the server drops the connection
		}
	}()
	p.forwardCall(sw, r, c)
}

// readRequest checks the path and method, reads the body and extracts the model
// and session key. On a problem it answers the client and returns false.
func (p *Proxy) readRequest(w http.ResponseWriter, r *http.Request, api apiKind) ([]byte, RequestInfo, bool) {
	if !proxiedPath[r.URL.Path] {
		p.fail(w, api, fmt.Errorf("%w: %s", errNotFound, r.URL.Path), false)
		return nil, RequestInfo{}, false
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		p.fail(w, api, fmt.Errorf("%w: %s %s", errMethod, r.Method, r.URL.Path), false)
		return nil, RequestInfo{}, false
	}
	body, err := p.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		gone := r.Context().Err() != nil || clientHungUp(err)
		switch {
		case errors.Is(err, errBodyTimeout), errors.Is(err, errBodyMemory):
			gone = false
		case errors.As(err, &tooBig):
			err = fmt.Errorf("%w: limit is %d bytes", errTooLarge, p.limit)
		case gone:
			err = fmt.Errorf("reading body: client went away: %w", err)
		default:
			err = fmt.Errorf("%w: reading body: %w", ErrBadBody, err)
		}
		p.fail(w, api, err, gone)
		return nil, RequestInfo{}, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		p.fail(w, api, fmt.Errorf("%w: the body is empty", ErrBadBody), false)
		return nil, RequestInfo{}, false
	}
	info, err := ExtractKey(r.Header, body, p.keys)
	if err != nil {
		p.fail(w, api, err, false)
		return nil, RequestInfo{}, false
	}
	return body, info, true
}

// acquire finds the model's pool and asks its Balancer for a replica; the call
// returned holds the in-flight count until settle. On a problem it answers the
// client and returns false.
func (p *Proxy) acquire(w http.ResponseWriter, r *http.Request, api apiKind, body []byte, info RequestInfo) (*call, bool) {
	pool := p.Pool(info.Model)
	if pool == nil {
		p.failModel(w, api, info.Model, fmt.Errorf("%w: %q", errUnknownModel, info.Model), false)
		return nil, false
	}
	if m := pool.lastModel.Load(); info.Model != "" && (m == nil || *m != info.Model) {
		pool.lastModel.Store(&info.Model)
	}
	c := &call{pool: pool, api: api, facts: router.Facts{SessionKey: info.SessionKey, BodyBytes: len(body), NoPrefill: r.URL.Path == wire.PathCountTokens}, body: body, inURL: *r.URL, counted: true}
	d, err := p.admit(r.Context(), w, pool, c)
	if err != nil {
		name := pool.Model
		if name == WildcardModel {
			name = info.Model // the pool serves any model: name the one asked for
		}
		if p.failKeptAlive(w, r, c, fmt.Sprintf("model %q: %v", name, err), err) {
			return nil, false
		}
		if errors.Is(err, router.ErrOverloaded) {
			c.setAdmissionHeaders(w.Header())
			p.m.countResponse(pool.Model, writeOverloaded(w, api, fmt.Sprintf("model %q: %v", name, err)))
			return nil, false
		}
		p.failModel(w, api, pool.Model, fmt.Errorf("model %q: %w", name, err), r.Context().Err() != nil)
		return nil, false
	}
	c.dec, c.held = d, true
	if p.onRoute != nil {
		p.onRoute(pool, c.facts.SessionKey, len(body), d)
	}
	return c, true
}

// settle ends a proxied call, whether it finished, failed or panicked: it
// releases the in-flight count, feeds the outcome back to the policy
// (feedback), and counts and logs the request with its final status.
func (p *Proxy) settle(r *http.Request, c *call, sw *statusWriter, start time.Time, panicked bool) {
	c.release()
	p.untrack(c)
	c.feedback()
	p.settleOutcomes(r, c)
	status := c.finalStatus(r.Context().Err() != nil, panicked, sw.status)
	up := c.upstream()
	p.m.countRequest(c.pool.Model, up.Name, c.dec.Reason)
	if c.counted && c.pool.Balancer.Shared() {
		p.m.observeStateWait(c.stateWait)
	}
	p.m.countResponse(c.pool.Model, status)
	// The arguments (Redact formats, the values are boxed) cost allocations on
	// every request: build them only when the line is written.
	if p.log.Enabled(r.Context(), slog.LevelDebug) {
		p.log.Debug("proxied", "model", c.pool.Model, "replica", up.Name, "decision", c.dec.Reason.String(),
			"session", Redact(c.facts.SessionKey), "status", status, "attempts", c.attempts,
			"duration", time.Since(start))
	}
}

// settleOutcomes tells the Balancer which replicas failed the call and which
// served it (ObserveOutcome: consecutive failures eject a replica), and logs
// an ejection. A request that got a 5xx from two replicas counts against
// neither: it is the request (llama-server answers a malformed body with 500),
// not the replicas. A connection that broke before any response always counts.
// The final replica served when it answered below 500; a timeout, a client
// that left first, or a stream that broke later counts neither way.
func (p *Proxy) settleOutcomes(r *http.Request, c *call) {
	if !c.counted {
		return
	}
	n5xx := 0
	for _, f := range c.failed {
		if f.status >= 500 {
			n5xx++
		}
	}
	final := c.upStatus >= 500
	if final {
		n5xx++
	}
	b := c.pool.Balancer
	observe := func(replica int, failed bool, why string) {
		if e, ok := b.ObserveOutcome(replica, failed, why); ok {
			p.logEjection(c.pool, e)
		}
	}
	for _, f := range c.failed {
		if f.status == 0 || n5xx < 2 {
			observe(f.replica, true, f.why)
		}
	}
	switch {
	case final && n5xx < 2:
		observe(c.dec.Replica, true, "status "+strconv.Itoa(c.upStatus))
	case c.upStatus > 0 && !final && c.streamBroken == nil && r.Context().Err() == nil:
		observe(c.dec.Replica, false, "")
	}
}

// logEjection logs one ejection (once per ejection; the return is logged by
// the Router's probe).
func (p *Proxy) logEjection(pool *Pool, e router.Ejection) {
	p.log.Warn("replica ejected: its requests fail; its conversations re-home until a probe succeeds", "model", pool.Model,
		"replica", pool.Upstream(e.Replica).Name, "reason", e.Reason, "for", e.For, "ejections_in_row", e.InRow)
}

// feedback tells the Balancer what the finished call showed: the prefix-cache
// read of a whole 200 response (ObserveCache) and its prompt size for the
// bytes-per-token estimate (ObserveSize); and a placement whose request the
// upstream refused with a 4xx is undone (Unplace).
func (c *call) feedback() {
	b := c.pool.Balancer
	complete := c.status == http.StatusOK && c.streamBroken == nil
	if prompt, cached, ok := c.usage.result(); ok && complete {
		b.ObserveCache(c.facts.SessionKey, c.dec.Replica, prompt, cached)
	}
	if complete && c.usage.prompt > 0 {
		b.ObserveSize(len(c.body), c.usage.prompt)
	}
	if c.dec.Reason == router.ReasonPlaced && c.upStatus >= 400 && c.upStatus < 500 {
		_, wait := b.UnplaceWait(c.facts.SessionKey, c.dec.Replica)
		c.stateWait += wait // after the response: in MetricStateWait, not in wire.HeaderStateMs
	}
}

// finalStatus is the status the call is counted with: StatusClientClosed when
// the client went away before a clean end, else the call's own status, else
// what was written to the client, else 502.
func (c *call) finalStatus(clientGone, panicked bool, written int) int {
	switch {
	case clientGone && (panicked || c.err != nil || written == 0):
		return StatusClientClosed
	case c.status == 0 && written != 0:
		return written
	case c.status == 0:
		return http.StatusBadGateway
	}
	return c.status
}

// bodyChunk is the most readBody allocates for a body before any of it
// arrived: a small body gets its Content-Length (plus bytes.MinRead), a larger
// one starts here and doubles as its bytes arrive (at most to its
// Content-Length), so a client that only claims a large Content-Length, or
// sends slowly, holds memory in proportion to what it sent, not to what it
// claimed. A 52 KB Claude Code body takes two doublings.
const bodyChunk = 16 << 10

// bodyBudget is the memory all request bodies being read may hold together
// (ProxyConfig.BodyMemory): readBody takes each growth of its buffer from it
// and gives it all back when the body is read (or the read failed).
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes; false, reserving nothing, when the total would pass
// the limit.
func (b *bodyBudget) take(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *bodyBudget) give(n int64) { b.used.Add(-n) }

// readBody reads r's body whole through http.MaxBytesReader(limit) (an error
// wrapping *http.MaxBytesError past limit bytes) within the body read timeout
// (errBodyTimeout past it: the connection's read deadline, so a client that
// trickles bytes is cut too) and within the body memory budget (errBodyMemory
// when the buffer cannot grow). The buffer starts at the Content-Length when
// that is under bodyChunk, else at bodyChunk, and doubles as bytes arrive,
// never past Content-Length + bytes.MinRead when that is known.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	deadline := p.bodyTimeout > 0 && rc.SetReadDeadline(time.Now().Add(p.bodyTimeout)) == nil
	var reserved int64
	defer func() { p.bodyMem.give(reserved) }()
	grow := func(buf []byte, to int64) ([]byte, bool) {
		if !p.bodyMem.take(to - int64(cap(buf))) {
			return buf, false
		}
		reserved += to - int64(cap(buf))
		nb := make([]byte, len(buf), to)
		copy(nb, buf)
		return nb, true
	}
	known := r.ContentLength > 0 && r.ContentLength <= p.limit
	first := int64(bodyChunk)
	if known {
		first = min(r.ContentLength+bytes.MinRead, bodyChunk)
	}
	buf, ok := grow(nil, first)
	if !ok {
		return nil, p.refuseBody(w, rc, errBodyMemory)
	}
	rd := http.MaxBytesReader(w, r.Body, p.limit)
	for {
		if len(buf) == cap(buf) {
			to := 2 * int64(cap(buf))
			if known && r.ContentLength+bytes.MinRead > int64(cap(buf)) {
				to = min(to, r.ContentLength+bytes.MinRead)
			}
			to = min(to, p.limit+bytes.MinRead) // room for the Read that sees the limit
			if buf, ok = grow(buf, to); !ok {
				return nil, p.refuseBody(w, rc, errBodyMemory)
			}
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			if deadline {
				rc.SetReadDeadline(time.Time{}) // a stream's connection must not time out
			}
			return buf, nil
		case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
			return nil, p.refuseBody(w, nil, fmt.Errorf("%w: not received within %v", errBodyTimeout, p.bodyTimeout))
		case err != nil:
			return nil, err
		}
	}
}

// refuseBody prepares the answer to a request whose body the router will not
// finish reading: the connection closes after the answer, with its read
// deadline (rc non-nil) moved to now, so the server does not wait for the rest
// of a slow body before closing it. It returns err.
func (p *Proxy) refuseBody(w http.ResponseWriter, rc *http.ResponseController, err error) error {
	w.Header().Set("Connection", "close")
	if rc != nil {
		rc.SetReadDeadline(time.Now())
	}
	if errors.Is(err, errBodyMemory) {
		w.Header().Set("Retry-After", strconv.Itoa(int(bodyMemoryRetryAfter/time.Second)))
		err = fmt.Errorf("%w: %d bytes of request bodies are being read (body_memory_bytes)", errBodyMemory, p.bodyMem.limit)
	}
	return err
}

// forward hands the request to the reverse proxy with the call attached.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, c *call) {
	r2 := r.WithContext(context.WithValue(r.Context(), callKey{}, c))
	r2.Body = io.NopCloser(bytes.NewReader(c.body))
	r2.ContentLength = int64(len(c.body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.body)), nil }
	p.rp.ServeHTTP(w, r2)
}

// fail answers a request the router itself refuses, in the API's error shape, and
// counts it in warden_responses_total under the model it asked for ("" when not
// known yet).
func (p *Proxy) fail(w http.ResponseWriter, api apiKind, err error, clientGone bool) {
	p.failModel(w, api, "", err, clientGone)
}

func (p *Proxy) failModel(w http.ResponseWriter, api apiKind, model string, err error, clientGone bool) {
	status := StatusFor(err, clientGone)
	p.m.countResponse(model, status)
	if status == StatusClientClosed {
		// Logged as settle logs a proxied request the client left.
		p.log.Debug("client went away", "model", model, "status", status, "err", err)
		return
	}
	writeError(w, api, status, err.Error())
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	c := callFrom(pr.In.Context())
	up := c.upstream()
	pr.SetURL(up.URL)
	setRank(pr.Out.Header, up.Rank)
}

func setRank(h http.Header, rank int) {
	h.Del(wire.HeaderDPRank)
	if rank >= 0 {
		h.Set(wire.HeaderDPRank, strconv.Itoa(rank))
	}
}

// retryTransport moves a request to another replica when its replica could not be
// reached, before anything was sent to the client.
type retryTransport struct {
	p    *Proxy
	base http.RoundTripper
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := callFrom(req.Context())
	if c == nil || !c.counted {
		return t.base.RoundTrip(req)
	}
	parent := req.Context()
	for {
		c.attempts++
		c.sentAt = time.Now()
		actx, cancel := context.WithCancelCause(parent)
		req = req.WithContext(actx)
		t.p.track(c, cancel)
		resp, err := t.base.RoundTrip(req)
		if err == nil {
			if retry := t.retry5xx(c, resp, parent); retry != nil {
				req = retry
				continue
			}
			return resp, nil
		}
		down := errors.Is(context.Cause(actx), ErrReplicaDown)
		t.p.untrack(c)
		if down {
			err = ErrReplicaDown // the transport's own error only says the context ended
		}
		if parent.Err() != nil || c.attempts >= t.p.maxAttempts {
			return nil, err
		}
		dial := isDialError(err)
		if !dial && !down && isTimeout(err) {
			return nil, err // the upstream may still be working on it: no duplicate
		}
		if !dial && !down {
			// A reset or closed connection: counts towards ejecting the replica.
			c.failed = append(c.failed, failedAttempt{replica: c.dec.Replica, why: "connection failed: " + err.Error()})
		}
		failed := c.upstream()
		if dial {
			c.pool.Balancer.SetHealthy(c.dec.Replica, false)
		}
		t.p.log.Warn("upstream failed before responding; retrying elsewhere", "model", c.pool.Model,
			"replica", failed.Name, "marked_unhealthy", dial || down, "err", err)
		t.p.m.countRetry(c.pool.Model, failed.Name)
		if c.dec.Replica < 64 {
			c.facts.Avoid |= 1 << uint(c.dec.Replica)
		}
		c.release()
		d, _, wait, aerr := c.pool.Balancer.AdmitWait(c.facts)
		c.stateWait += wait
		if aerr != nil {
			return nil, errors.Join(aerr, err)
		}
		c.dec, c.held = d, true
		req = c.retryRequest(req.WithContext(parent))
	}
}

// retry5xx decides whether resp, a response of the call's current replica, is
// a 5xx to try once on another replica (nothing has reached the client yet):
// not a 504 (the upstream's own timeout: the work may still be running), not
// when a 5xx was retried already, and only when another replica can take it.
// It then discards resp, notes the failed attempt, moves the call and returns
// the request for the new replica; else nil (resp goes to the client).
func (t *retryTransport) retry5xx(c *call, resp *http.Response, parent context.Context) *http.Request {
	if resp.StatusCode < 500 || resp.StatusCode == http.StatusGatewayTimeout || c.retried5xx || c.attempts >= t.p.maxAttempts {
		return nil
	}
	facts := c.facts
	if c.dec.Replica < 64 {
		facts.Avoid |= 1 << uint(c.dec.Replica)
	}
	d, _, wait, err := c.pool.Balancer.AdmitWait(facts)
	c.stateWait += wait
	if err != nil {
		return nil
	}
	failed := c.upstream()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	t.p.untrack(c)
	c.failed = append(c.failed, failedAttempt{replica: c.dec.Replica, status: resp.StatusCode, why: "status " + strconv.Itoa(resp.StatusCode)})
	t.p.log.Warn("upstream answered 5xx before the first byte; retrying once elsewhere", "model", c.pool.Model,
		"replica", failed.Name, "status", resp.StatusCode)
	t.p.m.countRetry(c.pool.Model, failed.Name)
	c.release()
	c.facts, c.retried5xx = facts, true
	c.dec, c.held = d, true
	return c.retryRequest(resp.Request.WithContext(parent))
}

// retryRequest rebuilds the outgoing request for the call's current replica.
func (c *call) retryRequest(prev *http.Request) *http.Request {
	out := prev.Clone(prev.Context())
	u := c.inURL
	out.URL = &u
	pr := &httputil.ProxyRequest{Out: out}
	up := c.upstream()
	pr.SetURL(up.URL)
	setRank(out.Header, up.Rank)
	out.Body = io.NopCloser(bytes.NewReader(c.body))
	out.ContentLength = int64(len(c.body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.body)), nil }
	return out
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	c := callFrom(resp.Request.Context())
	if c == nil {
		return nil
	}
	c.setHeaders(resp.Header)
	c.status, c.upStatus = resp.StatusCode, resp.StatusCode
	enc := resp.Header.Get("Content-Encoding")
	identity := enc == "" || enc == "identity"
	resp.Body = &watchedBody{
		rc: resp.Body, c: c, p: p, ctx: resp.Request.Context(),
		sse:  isEventStream(resp.Header.Get("Content-Type")) && identity,
		json: resp.StatusCode == http.StatusOK && isJSON(resp.Header.Get("Content-Type")) && identity,
	}
	return nil
}

// isEventStream reports whether a Content-Type is text/event-stream (any case,
// with or without parameters), as mime.ParseMediaType reads it; the exact value
// vLLM sends is checked first, without ParseMediaType's allocations.
func isEventStream(ct string) bool {
	if ct == "text/event-stream" || ct == "text/event-stream; charset=utf-8" {
		return true
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "text/event-stream"
}

// isJSON reports whether a Content-Type is application/json (vLLM's
// non-streaming responses), with or without parameters.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json"
}

func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	c := callFrom(r.Context())
	gone := r.Context().Err() != nil
	status := StatusFor(err, gone)
	api := apiOpenAI
	if c != nil {
		c.status, c.err, api = status, err, c.api
		c.setHeaders(w.Header())
	}
	if gone {
		return
	}
	name := ""
	if c != nil {
		name = c.upstream().Name
	}
	p.log.Warn("upstream request failed", "replica", name, "status", status, "err", err)
	writeError(w, api, status, fmt.Sprintf("upstream %s: %v", name, err))
}

// watchedBody wraps an upstream response body: it times the first byte and, for an
// SSE stream that breaks (a read error that is not the client leaving), ends the
// client's stream with an error event instead of cutting it.
type watchedBody struct {
	rc    io.ReadCloser
	c     *call
	p     *Proxy
	ctx   context.Context
	sse   bool
	json  bool   // a non-streaming 200 JSON body: read its usage at the end
	tail  []byte // error event still to send
	ended bool
	last  [2]byte
	n     int64
}

func (b *watchedBody) Read(buf []byte) (int, error) {
	if b.tail != nil {
		n := copy(buf, b.tail)
		b.tail = b.tail[n:]
		if len(b.tail) == 0 {
			b.tail, b.ended = nil, true
		}
		return n, nil
	}
	if b.ended {
		return 0, io.EOF
	}
	n, err := b.rc.Read(buf)
	if n > 0 {
		b.c.last.Store(time.Now().UnixNano())
		switch {
		case b.sse:
			b.c.usage.feed(buf[:n])
		case b.json:
			b.c.usage.feedJSON(buf[:n])
		}
		if !b.c.gotFirstByte {
			b.c.gotFirstByte = true
			b.p.m.observeTTFB(b.c.pool.Model, b.c.upstream().Name, time.Since(b.c.sentAt))
		}
		if n >= 2 {
			b.last = [2]byte{buf[n-2], buf[n-1]}
		} else {
			b.last = [2]byte{b.last[1], buf[0]}
		}
		b.n += int64(n)
	}
	if err == io.EOF && b.json {
		b.json = false
		b.c.usage.finishJSON()
	}
	down := err != nil && errors.Is(context.Cause(b.ctx), ErrReplicaDown)
	if err != nil && err != io.EOF && b.sse && (b.ctx.Err() == nil || down) {
		if down {
			err = ErrReplicaDown
		}
		b.c.streamBroken = err
		up := b.c.upstream().Name
		b.p.log.Warn("upstream stream broke", "replica", up, "bytes", b.n, "err", err)
		ev := streamErrorEvent(b.c.api, fmt.Sprintf("upstream %s: stream ended early: %v", up, err))
		switch {
		case b.n == 0 || b.last == [2]byte{'\n', '\n'}:
		case b.last[1] == '\n':
			ev = append([]byte("\n"), ev...)
		default:
			ev = append([]byte("\n\n"), ev...) // finish the partial event first
		}
		b.tail = ev
		return n, nil
	}
	return n, err
}

func (b *watchedBody) Close() error { return b.rc.Close() }

// statusWriter records the status written, and lets http.ResponseController reach
// the underlying writer's Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	type model struct {
		Model   string `json:"model"`
		Healthy int    `json:"healthy_replicas"`
		Total   int    `json:"replicas"`
	}
	out := struct {
		Status string  `json:"status"`
		Models []model `json:"models"`
	}{Status: "ok"}
	code := http.StatusOK
	for _, pool := range p.order {
		m := model{Model: pool.Model, Total: pool.Balancer.Len()}
		for i := range m.Total {
			if pool.Balancer.Healthy(i) {
				m.Healthy++
			}
		}
		if m.Healthy == 0 {
			out.Status, code = "degraded", http.StatusServiceUnavailable
		}
		out.Models = append(out.Models, m)
	}
	writeJSON(w, code, out)
}

func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		p.fail(w, apiOpenAI, errMethod, false)
		return
	}
	if p.wildcard != nil {
		// Model names are whatever the servers serve: ask one.
		pool := p.wildcard
		for i := range pool.UpstreamList() {
			if pool.Balancer.Healthy(i) {
				c := &call{pool: pool, inURL: *r.URL, dec: router.Decision{Replica: i}}
				p.forward(w, r, c)
				return
			}
		}
		p.fail(w, apiOpenAI, router.ErrNoReplica, false)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, pool := range p.order {
		out.Data = append(out.Data, model{ID: pool.Model, Object: "model", OwnedBy: "lm-warden"})
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
