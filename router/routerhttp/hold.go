package routerhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lmwarden/warden/router"
)

// Admission at the proxy (router/admission.go has the rule): a new
// conversation's first request the gate holds waits here, before any byte goes
// to the client, asking again every router.HoldPoll of the router's clock with
// its ticket. So the retry-before-first-byte rule still holds (nothing was
// written), the wait is measured on the clock the Balancer uses, and a client
// that disconnects leaves the queue at once (CancelHold). The proxy sends no
// keep-alive bytes while it holds: Claude Code gives up after 5 minutes without
// a byte (brief clients.md), which router.DefaultMaxHold (4 minutes) stays
// under. A keep-alive would have to commit the response's status and headers
// before the replica is chosen, giving up the retry before the first byte and
// the right error status for a request refused at the limit.

// Response headers of admission.
const (
	// HeaderHeldMs: how long the router held the request before sending it
	// upstream, in milliseconds of the router's clock (0 when not held); on
	// every proxied response.
	HeaderHeldMs = "X-Warden-Held-Ms"
	// HeaderAdmission: what the admission gate decided (router.Admission:
	// pass, admitted, held, limit, capacity-unknown, refused); only when the
	// model's gate is on.
	HeaderAdmission = "X-Warden-Admission"
)

// OverloadRetryAfter is the Retry-After the proxy sends with a request refused
// at an admission limit (router.AdmitLimitRefuse), in seconds: about the time a
// conversation takes to end and free room on the reference workload at 24-32
// sessions (a turn every 5-30 s, docs/routing.md "Admission").
const OverloadRetryAfter = 30 * time.Second

// admit asks the pool's Balancer for a replica, waiting while the admission
// gate holds the request. It returns router.ErrOverloaded when the gate
// refuses it and the context's error when the client went away while held.
func (p *Proxy) admit(ctx context.Context, pool *Pool, c *call) (router.Decision, error) {
	b := pool.Balancer
	if c.facts.SessionKey != "" && b.AdmissionConfig().Mode == router.AdmissionFit {
		c.facts.Continuing = CarriesAssistantMessage(c.body)
	}
	// No byte is sent while held, so no hold may outlast a client's no-byte
	// timeout.
	c.facts.HoldLimit = router.MaxSilentHold
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
		if serr := p.sleep(ctx, router.HoldPoll); serr != nil {
			b.CancelHold(info.Ticket)
			p.m.countAdmissionOutcome(pool.Model, "gave_up")
			return router.Decision{}, fmt.Errorf("held for admission: %w", serr)
		}
	}
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

// setAdmissionHeaders adds the admission headers of a counted call.
func (c *call) setAdmissionHeaders(h http.Header) {
	h.Set(HeaderHeldMs, strconv.FormatInt(c.adm.Held.Milliseconds(), 10))
	if c.adm.Admission != router.AdmitNone {
		h.Set(HeaderAdmission, c.adm.Admission.String())
	}
}

// writeOverloaded answers a request refused at an admission limit in the API's
// own overload shape: OpenAI 429 with Retry-After and a rate_limit_exceeded
// error (as OpenAI answers when it sheds load), Anthropic 529 overloaded_error
// (the Messages API's overload status, which Claude Code retries).
func writeOverloaded(w http.ResponseWriter, api apiKind, msg string) int {
	w.Header().Set("Retry-After", strconv.Itoa(int(OverloadRetryAfter.Seconds())))
	w.Header().Set("Content-Type", "application/json")
	var v any
	status := http.StatusTooManyRequests
	if api == apiAnthropic {
		status = 529
		v = map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": msg}}
	} else {
		v = map[string]any{"error": map[string]any{"message": msg, "type": "rate_limit_exceeded", "param": nil, "code": status}}
	}
	body, _ := json.Marshal(v)
	w.WriteHeader(status)
	w.Write(body)
	return status
}

// CarriesAssistantMessage reports whether a chat body (OpenAI chat completions
// or Anthropic messages: both send "messages": [{"role": ...}]) already carries
// an assistant message: a conversation past its first turn, which admission
// never holds even when the router has forgotten its session. A quick byte scan
// rules most first turns out before the body is decoded.
func CarriesAssistantMessage(body []byte) bool {
	if !bytes.Contains(body, []byte(`"assistant"`)) {
		return false
	}
	var v struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	for _, m := range v.Messages {
		if m.Role == "assistant" {
			return true
		}
	}
	return false
}
