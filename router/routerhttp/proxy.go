package routerhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

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
// the upstream failed, or the client went away (docs/router.md, failure case 2). The
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
// replica when a pool matches any model), GET /health (200 when every model has
// a healthy replica, else 503) and GET /ready (as /health, and 503 once the
// shutdown began: drain.go).
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

	// maxSilentHold and keepAliveInterval are router.MaxSilentHold and
	// router.KeepAliveInterval (hold.go); a test of the package may shorten
	// them before the Proxy serves.
	maxSilentHold, keepAliveInterval time.Duration

	liveMu sync.Mutex
	live   map[liveKey]map[*call]struct{} // requests in flight per replica (AbortSilent, CutInFlight)

	// draining: BeginDrain was called (/ready answers 503); drain: the rest of
	// the shutdown's state (drain.go).
	draining atomic.Bool
	drain    drainState

	recorder atomic.Pointer[Recorder]  // nil: not recording (SetRecorder)
	access   atomic.Pointer[AccessLog] // nil: no access log (SetAccessLog)
}

// SetRecorder starts writing the requests served to rec (nil stops); the
// previous recorder, if any, is returned for the caller to Close.
func (p *Proxy) SetRecorder(rec *Recorder) *Recorder { return p.recorder.Swap(rec) }

// liveKey names one replica of one pool.
type liveKey struct {
	pool    *Pool
	replica int
}

// ErrReplicaDown is the cause with which AbortSilent ends a request: its replica
// failed its health check and had sent nothing for the request in a while.
var ErrReplicaDown = errors.New("replica marked down by its health check and silent")

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

		maxSilentHold:     router.MaxSilentHold,
		keepAliveInterval: router.KeepAliveInterval,
	}
	p.drain.init()
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
	p.cutIfCuttingLocked(c)
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

// ServeHTTP implements http.Handler: the router's own endpoints are answered
// here; a proxied request is read (readRequest), routed (acquire), forwarded,
// and settled when it ends (settle: release, policy feedback, metrics, log).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case wire.PathHealth:
		p.serveHealth(w, r)
		return
	case wire.PathReady:
		p.serveReady(w, r)
		return
	case wire.PathLive:
		writeJSON(w, http.StatusOK, struct {
			Status string `json:"status"`
		}{"alive"})
		return
	case wire.PathModels:
		p.serveModels(w, r)
		return
	}
	api := apiFor(r.URL.Path)
	start := time.Now()
	rw := &rejectWriter{statusWriter: statusWriter{ResponseWriter: w}}
	body, info, ok := p.readRequest(rw, r, api)
	if !ok {
		p.logRejected(r, info, rw, start)
		return
	}
	c, ok := p.acquire(rw, r, api, body, info)
	if !ok {
		p.logRejected(r, info, rw, start)
		return
	}
	start = time.Now()
	sw := &statusWriter{ResponseWriter: w}
	rec := p.recorder.Load()
	var recording *Recording
	if rec != nil {
		recording = rec.begin(p.now(), body, info.SessionKey, r.Header.Get(wire.HeaderClaudeAgent), api)
	}
	defer func() {
		v := recover()
		p.settle(r, c, sw, start, v != nil)
		if recording != nil {
			rec.End(recording, c.status == http.StatusOK && c.streamBroken == nil && c.usage.streamErr == "" && v == nil && r.Context().Err() == nil, c.usage.prompt, c.usage.output)
		}
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
