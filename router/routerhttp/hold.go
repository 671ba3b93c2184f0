package routerhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// Admission at the proxy (router/admission.go has the rule): a new
// conversation's first request the gate holds waits here, asking again every
// router.HoldPoll of the router's clock with its ticket, so the wait is
// measured on the clock the Balancer uses and the order is the core's FIFO. A
// client that disconnects while held leaves the queue at once (CancelHold).
//
// Nothing is written while a request is held, so a short hold keeps the plain
// HTTP answers: the retry before the first byte, 429/529 for a refusal at the
// limit, 503 for no replica. But Claude Code gives up after 5 minutes without
// a byte (docs/router.md section 4), and holds on the 7-GPU fleet reach 5-8 minutes.
//
// Keep-alive. A held request that streams ("stream": true in its body) and has
// been held keepalive_after (router.AdmissionConfig.KeepAliveAfter, default
// router.DefaultKeepAliveAfter = 1 min, of the router's clock) gets its
// response committed: 200, Content-Type text/event-stream, Cache-Control
// no-cache, X-Warden-Admission: waiting, X-Warden-Held-Ms the hold so far, and
// the trailers keepAliveTrailers (the final hold and admission, sent after the
// body, with the replica and decision when one was chosen). Then, at once and every
// router.KeepAliveInterval (15 s), the API's own keep-alive, flushed:
//
//   - Anthropic Messages: `event: ping` / `data: {"type": "ping"}`, the ping
//     event of the Messages API's streams ("Streaming Messages", docs.anthropic.com:
//     "Event streams may also include any number of ping events"); the
//     TypeScript SDK Claude Code uses skips it (src/core/streaming.ts:
//     `if (sse.event === 'ping') continue`);
//   - OpenAI chat/completions and Responses: the SSE comment `: keep-alive`,
//     which every SSE parser ignores (WHATWG HTML "Server-sent events", event
//     stream interpretation: a line starting with a colon is ignored). The
//     Responses API has no ping event of its own, and its first event,
//     response.created, names the response id only the replica can give; the
//     Codex CLI's SSE reader (eventsource-stream) skips comments.
//
// Such a request's hold is bounded by max_hold only. When admitted it goes
// upstream as usual: the retry before the upstream's first byte still works
// (nothing of the model's was sent), and the upstream's SSE body is copied
// without its headers (keptAliveWriter). A failure after the commit is the
// API's in-stream error event, then the stream ends (streamErrorFor): every
// attempt failing, a non-2xx answer (its message kept), no replica, or a
// refusal at the limit (overloaded_error / rate_limit_exceeded). The call is
// counted in warden_responses_total with the status it would have had, not the
// 200 on the wire, and outlier ejection sees the upstream's own status.
//
// A request that does not stream, or any when keepalive_after is negative,
// cannot be kept alive: its hold is capped at router.MaxSilentHold (4 min,
// Facts.HoldLimit), under Claude Code's 5 minutes.

// keepAliveTrailers are the headers a kept-alive response declares as
// trailers ("Trailer" before WriteHeader): its header block went out before the
// hold ended, so their final values follow the body. Only those every such
// response ends with are declared; the replica, decision and state headers,
// sent only when a replica was chosen, follow undeclared (setTrailers).
var keepAliveTrailers = []string{wire.HeaderHeldMs, wire.HeaderAdmission}

// setTrailers sets, on a committed response's header map h, the headers set
// writes, as trailers: the declared ones under their names, the others with
// http.TrailerPrefix, so no trailer is declared that is not sent.
func setTrailers(h http.Header, set func(http.Header)) {
	t := http.Header{}
	set(t)
	for k, v := range t {
		if !slices.Contains(keepAliveTrailers, k) {
			k = http.TrailerPrefix + k
		}
		h[k] = v
	}
}

// OverloadRetryAfter is the Retry-After the proxy sends with a request refused
// at an admission limit (router.AdmitLimitRefuse), in seconds: about the time a
// conversation takes to end and free room on the reference workload at 24-32
// sessions (a turn every 5-30 s, docs/routing.md "Admission").
const OverloadRetryAfter = 30 * time.Second

// admit asks the pool's Balancer for a replica, waiting while the admission
// gate holds the request, and keeps a held streaming request alive on w once
// it has waited keepalive_after (c.ka set). It returns router.ErrOverloaded
// when the gate refuses it, the context's error when the client went away
// while held, and ErrShutdown when it is held at shutdown (StopHolding: at
// once, or when the gate would hold it after).
func (p *Proxy) admit(ctx context.Context, w http.ResponseWriter, pool *Pool, c *call) (router.Decision, error) {
	b := pool.Balancer
	// held wakes a held request when the client leaves or the shutdown stops
	// holding (set at the first hold).
	var held context.Context
	for {
		t0 := time.Now()
		d, info, wait, err := b.AdmitWait(c.facts)
		p.m.observeDecision(time.Since(t0))
		c.stateWait += wait
		c.adm = info
		if !errors.Is(err, router.ErrHold) {
			c.facts.Ticket = 0 // consumed: a retry elsewhere asks as an admitted conversation
			p.m.observeAdmission(pool.Model, info, err)
			return d, err
		}
		c.facts.Ticket = info.Ticket
		if p.stopped() {
			return router.Decision{}, p.refuseHeld(pool, info.Ticket)
		}
		if held == nil {
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(p.drain.stopCtx, cancel)()
			held = hctx
		}
		// Per ask: a PUT of the admission config applies to the waiters too.
		after := b.AdmissionConfig().WithDefaults().KeepAliveAfter
		switch {
		case c.ka != nil:
		case !c.stream || after < 0:
			// No byte is sent while held, so no hold may outlast a client's
			// no-byte timeout.
			c.facts.HoldLimit = p.maxSilentHold
		default:
			c.facts.HoldLimit = 0
			if info.Held >= after {
				c.ka = commitKeepAlive(w, c, p.keepAliveInterval)
			}
		}
		if c.ka != nil {
			if err := c.ka.ping(p.now()); err != nil {
				b.CancelHold(info.Ticket)
				p.m.countAdmissionOutcome(pool.Model, "gave_up")
				return router.Decision{}, fmt.Errorf("held for admission: sending a keep-alive: %w", err)
			}
		}
		if serr := p.sleep(held, router.HoldPoll); serr != nil && ctx.Err() == nil {
			return router.Decision{}, p.refuseHeld(pool, info.Ticket) // StopHolding woke it
		} else if serr != nil {
			b.CancelHold(info.Ticket)
			p.m.countAdmissionOutcome(pool.Model, "gave_up")
			return router.Decision{}, fmt.Errorf("held for admission: %w", serr)
		}
	}
}

// refuseHeld takes a held request out of pool's queue at shutdown and returns
// its error (ErrShutdown).
func (p *Proxy) refuseHeld(pool *Pool, ticket uint64) error {
	pool.Balancer.CancelHold(ticket)
	p.m.countAdmissionOutcome(pool.Model, "shutdown")
	return fmt.Errorf("%w: held for admission as a new conversation, not admitted; send it again", ErrShutdown)
}

// keepAlive is a held request whose response was committed (commitKeepAlive).
type keepAlive struct {
	w        http.ResponseWriter
	api      apiKind
	interval time.Duration // between keep-alive events (Proxy.keepAliveInterval)
	pinged   bool
	last     time.Duration // when the latest keep-alive event was sent (Proxy.now)
	broken   error         // a keep-alive that could not be written: the client is gone
}

// Keep-alive events: Anthropic's ping event and an SSE comment for OpenAI (see
// the comment at the top of this file for the sources).
var (
	anthropicPing = []byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")
	sseKeepAlive  = []byte(": keep-alive\n\n")
)

// commitKeepAlive writes the status and headers of c's kept-alive response,
// whose keep-alive events then follow every interval.
func commitKeepAlive(w http.ResponseWriter, c *call, interval time.Duration) *keepAlive {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set(wire.HeaderHeldMs, strconv.FormatInt(c.adm.Held.Milliseconds(), 10))
	h.Set(wire.HeaderAdmission, wire.AdmissionWaiting)
	h.Set("Trailer", strings.Join(keepAliveTrailers, ", "))
	w.WriteHeader(http.StatusOK)
	return &keepAlive{w: w, api: c.api, interval: interval}
}

// ping sends a keep-alive event when none was sent yet or the last one is
// k.interval old at now.
func (k *keepAlive) ping(now time.Duration) error {
	if k.pinged && now-k.last < k.interval {
		return nil
	}
	k.pinged, k.last = true, now
	ev := sseKeepAlive
	if k.api == apiAnthropic {
		ev = anthropicPing
	}
	return k.write(ev)
}

// write writes and flushes b, remembering a failure.
func (k *keepAlive) write(b []byte) error {
	if k.broken != nil {
		return k.broken
	}
	if _, err := k.w.Write(b); err != nil {
		k.broken = err
		return err
	}
	if err := http.NewResponseController(k.w).Flush(); err != nil {
		k.broken = err
	}
	return k.broken
}

// failKeptAlive ends a kept-alive call that will not go upstream (err from
// admit: refused at the limit, no replica, the client gone) with the API's
// in-stream error event and the trailers, and counts it with the status a
// response not kept alive would have had. It reports false, writing nothing,
// when c was not kept alive.
func (p *Proxy) failKeptAlive(w http.ResponseWriter, r *http.Request, c *call, msg string, err error) bool {
	if c.ka == nil {
		return false
	}
	var status int
	switch {
	case r.Context().Err() != nil || c.ka.broken != nil:
		status = StatusClientClosed
	case errors.Is(err, router.ErrOverloaded):
		status = overloadedStatus(c.api)
		c.ka.write(streamErrorFor(c.api, status, msg))
	default:
		status = StatusFor(err, false)
		c.ka.write(streamErrorFor(c.api, status, msg))
	}
	setTrailers(w.Header(), c.setAdmissionHeaders)
	p.m.countResponse(c.pool.Model, status)
	return true
}

// forwardCall forwards c, the upstream's response of a kept-alive call
// through a keptAliveWriter.
func (p *Proxy) forwardCall(w http.ResponseWriter, r *http.Request, c *call) {
	if c.ka == nil {
		p.forward(w, r, c)
		return
	}
	kw := &keptAliveWriter{w: w, hdr: http.Header{}}
	p.forward(kw, r, c)
	kw.finish(c, r.Context().Err() != nil)
}

// errorBodyMax bounds the bytes of an upstream's error body a keptAliveWriter
// keeps for the in-stream error event.
const errorBodyMax = 16 << 10

// keptAliveWriter is the http.ResponseWriter the reverse proxy writes a
// kept-alive call's upstream response to: its status and headers went out
// already, so the upstream's are kept aside (hdr, status); a 2xx body passes
// through, another body is kept (at most errorBodyMax bytes) for the error
// event finish writes. Unwrap lets the proxy's flushes reach the connection.
type keptAliveWriter struct {
	w      http.ResponseWriter
	hdr    http.Header
	status int
	body   []byte
}

func (k *keptAliveWriter) Header() http.Header { return k.hdr }

func (k *keptAliveWriter) WriteHeader(code int) {
	if k.status == 0 && code >= 200 { // 1xx (103 Early Hints) are informational
		k.status = code
	}
}

func (k *keptAliveWriter) Write(b []byte) (int, error) {
	if k.status == 0 {
		k.status = http.StatusOK
	}
	if k.status < 300 {
		return k.w.Write(b)
	}
	k.body = append(k.body, b[:min(len(b), errorBodyMax-len(k.body))]...)
	return len(b), nil
}

func (k *keptAliveWriter) Unwrap() http.ResponseWriter { return k.w }

// finish ends a kept-alive call's stream: an answer that was not 2xx (the
// upstream's, or the proxy's error for a failed attempt) becomes the API's
// in-stream error event with its message, unless the client is gone; then the
// trailers get their final values.
func (k *keptAliveWriter) finish(c *call, gone bool) {
	if k.status >= 300 && !gone {
		msg := errorMessage(k.body)
		if c.upStatus == k.status { // the upstream's own answer, not errorHandler's
			msg = fmt.Sprintf("upstream %s answered %d: %s", c.upstream().Name, k.status, msg)
		}
		k.w.Write(streamErrorFor(c.api, k.status, msg))
		http.NewResponseController(k.w).Flush()
	}
	setTrailers(k.w.Header(), c.setHeaders)
}

// errorMessage is the message of an error body: OpenAI/vLLM
// {"error":{"message"}}, Anthropic {"type":"error","error":{"message"}}, older
// vLLM {"object":"error","message"}, {"error":"text"}, or else the text itself
// (at most 512 bytes).
func errorMessage(body []byte) string {
	var v struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		}
	}
	t := strings.TrimSpace(string(body))
	if len(t) > 512 {
		t = t[:512]
	}
	if t == "" {
		return "no error message"
	}
	return t
}

// now is the router's clock: the Balancers' clock, else wall time (since the
// Unix epoch).
func (p *Proxy) now() time.Duration {
	if p.clock != nil {
		return p.clock.Now()
	}
	return time.Duration(time.Now().UnixNano())
}

// sleep waits d on the router's clock, or d of wall time if that comes first
// (a clock that stands still, as a test's manual clock, still lets the waiter
// ask again); it returns ctx's error when the client went away.
func (p *Proxy) sleep(ctx context.Context, d time.Duration) error {
	if p.clock != nil {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		p.clock.SleepUntil(wctx, p.clock.Now()+d)
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// setAdmissionHeaders adds the admission headers of a routed call.
func (c *call) setAdmissionHeaders(h http.Header) {
	h.Set(wire.HeaderHeldMs, strconv.FormatInt(c.adm.Held.Milliseconds(), 10))
	if c.adm.Admission != router.AdmitNone {
		h.Set(wire.HeaderAdmission, c.adm.Admission.String())
	}
}

// overloadedStatus is the status of a request refused at an admission limit:
// OpenAI 429 (as OpenAI answers when it sheds load), Anthropic 529 (the
// Messages API's overload status, which Claude Code retries).
func overloadedStatus(api apiKind) int {
	if api == apiAnthropic {
		return 529
	}
	return http.StatusTooManyRequests
}

// writeOverloaded answers a request refused at an admission limit in the API's
// own overload shape (overloadedStatus; errorBody: rate_limit_exceeded,
// overloaded_error), with Retry-After.
func writeOverloaded(w http.ResponseWriter, api apiKind, msg string) int {
	w.Header().Set("Retry-After", strconv.Itoa(int(OverloadRetryAfter.Seconds())))
	status := overloadedStatus(api)
	writeError(w, api, status, msg)
	return status
}
