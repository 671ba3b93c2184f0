package routerhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

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

func (p *Proxy) modifyResponse(resp *http.Response) error {
	c := callFrom(resp.Request.Context())
	if c == nil {
		return nil
	}
	c.setHeaders(resp.Header)
	c.status, c.upStatus = resp.StatusCode, resp.StatusCode
	if resp.StatusCode == http.StatusOK && len(c.facts.Prefix) > 0 {
		c.pool.Balancer.RecordPrefix(c.dec.Replica, c.facts.Prefix)
	}
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
	if errors.Is(err, ErrShutdown) {
		// Cut at drain_timeout before the upstream answered (counted in the
		// shutdown's log line).
		writeShutdown(w, api, fmt.Sprintf("%v: request cut at drain_timeout before %s answered", err, name))
		return
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
			b.c.firstByte = time.Now()
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
	shut := err != nil && errors.Is(context.Cause(b.ctx), ErrShutdown)
	if err != nil && err != io.EOF && b.sse && (b.ctx.Err() == nil || down || shut) {
		up := b.c.upstream().Name
		var ev []byte
		switch {
		case shut:
			// Cut at drain_timeout (counted in the shutdown's log line): the
			// 503 error event, as a request refused at shutdown gets.
			err = ErrShutdown
			ev = streamErrorFor(b.c.api, http.StatusServiceUnavailable, fmt.Sprintf("%v: stream from %s cut at drain_timeout", err, up))
		case down:
			err = ErrReplicaDown
			fallthrough
		default:
			b.p.log.Warn("upstream stream broke", "replica", up, "bytes", b.n, "err", err)
			ev = streamErrorEvent(b.c.api, fmt.Sprintf("upstream %s: stream ended early: %v", up, err))
		}
		b.c.streamBroken = err
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
