package routerhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"
)

// DefaultMaxAttempts bounds how many replicas one request is tried on when
// connecting fails before any byte reached the client.
const DefaultMaxAttempts = 3

// failedAttempt is one attempt of a call that failed on its replica: a 5xx
// response (status) or a connection that broke before any response (status 0).
type failedAttempt struct {
	replica int
	status  int
	why     string
}

// retryTransport moves a request to another replica when its replica could not be
// reached, before anything was sent to the client.
type retryTransport struct {
	p    *Proxy
	base http.RoundTripper
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := callFrom(req.Context())
	if c == nil || !c.routed {
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
		if errors.Is(context.Cause(actx), ErrShutdown) {
			return nil, ErrShutdown // cut at drain_timeout: not retried, not the replica's fault
		}
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
		c.dec, c.inFlight = d, true
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
	c.dec, c.inFlight = d, true
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
