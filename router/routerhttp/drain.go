package routerhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Shutdown in order (Router.Serve runs the steps; docs/router.md section 9,
// "Shutdown"):
//
//  1. BeginDrain: /ready answers 503, everything else is served as before
//     (drain_delay, so a load balancer takes the router out of its endpoints
//     while it still accepts).
//  2. StopHolding: the listener closes; a request held by admission, and any
//     the gate would hold from now on, gets 503 with Retry-After
//     (ShutdownRetryAfter) in its API's error shape at once, or the API's
//     error event when its response was committed (kept alive). Requests in
//     flight go on; those that settle from now on count as finished.
//  3. CutInFlight, at drain_timeout: every request still in flight has its
//     upstream attempt cancelled with ErrShutdown: a started SSE stream ends
//     with the API's error event, one without a response yet gets 503, and
//     none is retried elsewhere or counted against its replica.
//
// Held requests are refused rather than admitted: the gate holds only a new
// conversation's first request, which has no prefix cached anywhere yet, so
// sending it again through another router loses nothing, while admitting it
// would start a stream the drain_timeout may cut (it was held because the
// fleet's KV cache is full, so its prefill would wait too).

// ErrShutdown is the cause with which the router ends a request at shutdown:
// held by admission when the listener closed, or still in flight at
// drain_timeout. StatusFor maps it to 503.
var ErrShutdown = errors.New("router shutting down")

// ShutdownRetryAfter is the Retry-After of a 503 answered at shutdown: the
// router's peers behind the same load balancer take the request at once, and
// a single router restarted by its supervisor is back in about a second.
const ShutdownRetryAfter = time.Second

// DrainStats count what a shutdown did with the requests it found.
type DrainStats struct {
	// Finished: requests that ended on their own after the listener closed
	// (before or at drain_timeout).
	Finished int
	// Cut: requests still in flight at drain_timeout, ended by the router.
	Cut int
	// HeldRefused: requests held by admission, answered 503 at shutdown.
	HeldRefused int
}

// drainState is the Proxy's shutdown state. begun, stopCtx and the counters
// may be read from any goroutine; closing, cutting and the counts are guarded
// by Proxy.liveMu (with the registry of calls in flight).
type drainState struct {
	stopCtx context.Context // cancelled by StopHolding: held requests wake
	stop    context.CancelFunc

	closing  bool // StopHolding was called: settled calls count as finished
	cutting  bool // CutInFlight was called: a new attempt is cut at once
	finished int
	cut      int
	refused  int
}

func (d *drainState) init() {
	d.stopCtx, d.stop = context.WithCancel(context.Background())
}

// BeginDrain starts the shutdown: /ready answers 503 from now on. Requests
// are served as before.
func (p *Proxy) BeginDrain() { p.draining.Store(true) }

// Draining reports whether BeginDrain was called.
func (p *Proxy) Draining() bool { return p.draining.Load() }

// StopHolding refuses every request held by admission (they wake at once and
// get ErrShutdown's 503) and every request the gate would hold from now on;
// calls that settle from now on count as finished (DrainStats). It returns
// the requests in flight.
func (p *Proxy) StopHolding() int {
	p.draining.Store(true)
	p.liveMu.Lock()
	p.drain.closing = true
	p.liveMu.Unlock()
	p.drain.stop()
	return p.InFlight()
}

// InFlight returns the requests being forwarded now (those with an upstream
// attempt).
func (p *Proxy) InFlight() int {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	n := 0
	for _, set := range p.live {
		n += len(set)
	}
	return n
}

// stopped reports whether StopHolding was called.
func (p *Proxy) stopped() bool { return p.drain.stopCtx.Err() != nil }

// CutInFlight ends every request in flight with the cause ErrShutdown (and
// any attempt that starts later, at once), and returns how many it ended.
func (p *Proxy) CutInFlight() int {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	p.drain.cutting = true
	n := 0
	for _, set := range p.live {
		for c := range set {
			if !c.cut.Load() {
				c.cut.Store(true)
				c.cancel(ErrShutdown)
				n++
			}
		}
	}
	p.drain.cut += n
	return n
}

// DrainStats returns the counts of the shutdown so far.
func (p *Proxy) DrainStats() DrainStats {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	return DrainStats{Finished: p.drain.finished, Cut: p.drain.cut, HeldRefused: p.drain.refused}
}

// cutIfCuttingLocked ends c's new attempt at once when CutInFlight was
// called before it started (Proxy.liveMu held).
func (p *Proxy) cutIfCuttingLocked(c *call) {
	if p.drain.cutting && !c.cut.Load() {
		c.cut.Store(true)
		c.cancel(ErrShutdown)
		p.drain.cut++
	}
}

// noteSettled counts a call that ended after the listener closed and was not
// cut.
func (p *Proxy) noteSettled(c *call) {
	if !p.draining.Load() {
		return // set before closing: no lock on a request's path while serving
	}
	p.liveMu.Lock()
	if p.drain.closing && !c.cut.Load() {
		p.drain.finished++
	}
	p.liveMu.Unlock()
}

// noteRefused counts a held request refused at shutdown.
func (p *Proxy) noteRefused() {
	p.liveMu.Lock()
	p.drain.refused++
	p.liveMu.Unlock()
}

// writeShutdown answers a request refused at shutdown: 503 in the API's error
// shape (OpenAI service_unavailable, Anthropic overloaded_error) with
// Retry-After.
func writeShutdown(w http.ResponseWriter, api apiKind, msg string) int {
	w.Header().Set("Retry-After", strconv.Itoa(int(ShutdownRetryAfter.Seconds())))
	writeError(w, api, http.StatusServiceUnavailable, msg)
	return http.StatusServiceUnavailable
}
