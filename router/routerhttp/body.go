package routerhttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

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
// wrapping *http.MaxBytesError past limit bytes, or at once when the
// Content-Length says more) within the body read timeout
// (errBodyTimeout past it: the connection's read deadline, so a client that
// trickles bytes is cut too) and within the body memory budget (errBodyMemory
// when the buffer cannot grow). The buffer starts at the Content-Length when
// that is under bodyChunk, else at bodyChunk, and doubles as bytes arrive,
// never past Content-Length + bytes.MinRead when that is known.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	if r.ContentLength > p.limit {
		// Refused on the header: nothing of the body is read.
		return nil, p.refuseBody(w, rc, &http.MaxBytesError{Limit: p.limit})
	}
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
