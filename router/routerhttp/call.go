package routerhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

type callKey struct{}

// call is the state of one proxied request, shared by the handler, the transport
// and the response hooks (all on the handler's goroutine).
type call struct {
	pool  *Pool
	api   apiKind
	facts router.Facts
	body  []byte
	inURL url.URL
	// routed: the Balancer routed the request (admission, decision headers,
	// outcome feedback); false for /v1/models forwarding.
	routed bool
	// inFlight: the call holds an in-flight count on its replica, ended by
	// release (Balancer.ReleaseSession).
	inFlight bool
	stream   bool // the body asks for a streamed response (RequestInfo.Stream)
	dec      router.Decision
	adm      router.AdmitInfo // what the admission gate decided (hold.go)
	ka       *keepAlive       // the response was committed while held (hold.go)
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
	firstByte    time.Time // when gotFirstByte was set
	// last is when the current attempt last heard from its upstream (UnixNano:
	// the send, then every response read); cancel ends the attempt's context.
	// cancel, tracked and isTracked are guarded by Proxy.liveMu.
	last      atomic.Int64
	cancel    context.CancelCauseFunc
	tracked   liveKey
	isTracked bool
	// cut: CutInFlight ended the call at shutdown (set under Proxy.liveMu).
	cut atomic.Bool
	// learn: a Responses API call whose response the server may store: its id
	// is told to the Balancer (LearnResponse) as soon as the scanner sees it
	// (usage.onID), before the client can send a continuation.
	learn bool

	usage        usageScanner // the response's usage (SSE or JSON), for Balancer.ObserveCache
	status       int
	upStatus     int // the upstream's response status (0: it never answered)
	err          error
	streamBroken error
}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

func (c *call) upstream() Upstream { return c.pool.Upstream(c.dec.Replica) }

// release ends the call's in-flight count; safe to call more than once.
func (c *call) release() {
	if c.inFlight {
		c.inFlight = false
		c.pool.Balancer.ReleaseConv(c.dec.Replica, c.facts.Conv())
	}
}

func (c *call) setHeaders(h http.Header) {
	h.Set(wire.HeaderReplica, c.upstream().Name)
	if c.routed {
		h.Set(wire.HeaderDecision, c.dec.Reason.String())
		c.setAdmissionHeaders(h)
		c.setStateHeader(h)
	}
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
		pool.noteModel(info.Model)
	}
	c := &call{pool: pool, api: api, body: body, inURL: *r.URL, routed: true, stream: info.Stream, learn: api == apiResponses && !info.NoStore,
		facts: router.Facts{SessionKey: info.SessionKey, ParentKey: info.ParentKey, FollowParent: info.FollowParent, Agent: info.Agent, Tools: info.Tools, ResponseID: info.ResponseID, BodyBytes: len(body), NoPrefill: r.URL.Path == wire.PathCountTokens, Continuing: info.Continuing}}
	if info.SessionKey == "" && pool.Balancer.KeylessPrefix() {
		// Keyless placement by prefix: the body's leading bytes stand for the
		// prompt's (model, then messages / input, as clients send them).
		c.facts.Prefix = router.PrefixHashesBytes(nil, body, PrefixPieceBytes, MaxPrefixPieces)
	}
	d, err := p.admit(r.Context(), w, pool, c)
	if err != nil {
		name := pool.Model
		if name == WildcardModel {
			name = info.Model // the pool serves any model: name the one asked for
		}
		shutdown := errors.Is(err, ErrShutdown)
		if shutdown {
			p.noteRefused()
		}
		if p.failKeptAlive(w, r, c, fmt.Sprintf("model %q: %v", name, err), err) {
			return nil, false
		}
		if shutdown {
			c.setAdmissionHeaders(w.Header())
			p.m.countResponse(pool.Model, writeShutdown(w, api, fmt.Sprintf("model %q: %v", name, err)))
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
	c.dec, c.inFlight = d, true
	if c.learn {
		c.usage.onID = func(id string) {
			// On the response's path (the store's claim, one round trip with
			// state:), after the headers: in MetricStateWait, not in
			// wire.HeaderStateMs.
			c.stateWait += pool.Balancer.LearnResponse(id, c.dec.Replica)
		}
	}
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
	p.noteSettled(c)
	c.feedback()
	p.settleOutcomes(r, c)
	status := c.finalStatus(r.Context().Err() != nil, panicked, sw.status)
	up := c.upstream()
	p.m.countRequest(c.pool.Model, up.Name, c.dec.Reason)
	if c.routed && c.pool.Balancer.Shared() {
		p.m.observeStateWait(c.stateWait)
	}
	p.m.countResponse(c.pool.Model, status)
	p.logAccess(c, r.Header.Get(wire.HeaderClaudeAgent), r.URL.Path, status, start, c.firstByte)
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
// not the replicas. A connection that broke before any response always counts,
// and so does a stream the upstream broke after it started (watchedBody sets
// streamBroken only for the upstream's or its health check's cause, never the
// client's): Envoy's outlier detection counts a reset after the response began
// as a gateway failure too (envoyproxy.io, arch_overview/upstream/outlier:
// with split_external_local_origin_errors off, its default, locally originated
// errors such as resets are counted with the 5xx). The final replica served
// when it answered below 500; a timeout or a client that left first counts
// neither way.
func (p *Proxy) settleOutcomes(r *http.Request, c *call) {
	if !c.routed {
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
	case c.cut.Load():
		// Ended by the router's shutdown (CutInFlight): not the replica's fault.
	case c.streamBroken != nil:
		observe(c.dec.Replica, true, "stream broke: "+c.streamBroken.Error())
	case c.usage.streamErr != "":
		observe(c.dec.Replica, true, "error event in the stream: "+c.usage.streamErr)
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
	complete := c.status == http.StatusOK && c.streamBroken == nil && c.usage.streamErr == ""
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
