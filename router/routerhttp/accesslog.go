package routerhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// AccessLog writes one JSON line per request as it ends (warden route
// --access-log): which replica served which conversation, why, and how it
// went; a request the router answered itself (a bad body, an unknown model,
// admission refused) gets a line with decision "rejected" and the error. No request text and no key is written: the session key and the agent
// id appear as KeyHash of them, so an operator who knows a session id can find
// its lines (`printf %s "$id" | sha256sum | cut -c1-16`). Each line is one
// Write, so a crash loses at most the line being written. Safe for
// concurrent use.
type AccessLog struct {
	mu  sync.Mutex
	w   io.Writer
	err error
	// Written counts the lines written.
	Written int
}

// AccessEntry is one line of the access log. Durations are milliseconds;
// TTFBMs is -1 when no response byte came back.
type AccessEntry struct {
	Time         string  `json:"time"`          // when the request ended, RFC 3339 with nanoseconds, UTC
	Model        string  `json:"model"`         // the pool's model ("*" for a catch-all pool)
	Session      string  `json:"session"`       // KeyHash of the session key, "" when the request had none
	Agent        string  `json:"agent"`         // KeyHash of X-Claude-Code-Agent-Id, "" when absent
	Replica      string  `json:"replica"`       // the replica that served the last attempt
	Decision     string  `json:"decision"`      // the routing reason (X-Warden-Decision)
	Admission    string  `json:"admission"`     // what the admission gate did ("none" when off)
	HeldMs       float64 `json:"held_ms"`       // time held by the admission gate
	Status       int     `json:"status"`        // the status the client got (499: it went away first)
	Attempts     int     `json:"attempts"`      // upstream attempts (retries on another replica add one)
	TTFBMs       float64 `json:"ttfb_ms"`       // from the last attempt's send to its first response byte
	DurationMs   float64 `json:"duration_ms"`   // from routing to the end of the response
	PromptTokens int     `json:"prompt_tokens"` // the response's usage; 0 when it had none
	CachedTokens int     `json:"cached_tokens"` // usage prompt_tokens_details.cached_tokens (messages: cache_read_input_tokens)
	OutputTokens int     `json:"output_tokens"` // usage completion / output tokens
	StreamBroken bool    `json:"stream_broken"` // the upstream broke the stream after it started
	// StreamError: the message of an error event the upstream sent inside a 200
	// stream (the engine failed the request after the headers); "" none.
	StreamError string `json:"stream_error,omitempty"`
	Shared      bool   `json:"shared_state"`   // the pool's state is shared with other routers (Redis)
	Path        string `json:"path,omitempty"` // the request path
	// Error: why the router answered the request itself without a replica
	// (decision "rejected": a bad body, an unknown model, admission refused,
	// no healthy replica), the error message the client got; "" otherwise.
	Error string `json:"error,omitempty"`
}

// NewAccessLog returns an AccessLog writing to w.
func NewAccessLog(w io.Writer) *AccessLog { return &AccessLog{w: w} }

// KeyHash is the first 16 hex digits of the SHA-256 of key, "" for "".
func KeyHash(key string) string {
	if key == "" {
		return ""
	}
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:8])
}

// Write appends e as one line. The first write error is kept (Err) and later
// lines are dropped.
func (a *AccessLog) Write(e AccessEntry) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	if _, err := a.w.Write(b); err != nil {
		a.err = fmt.Errorf("access log: %w", err)
		return
	}
	a.Written++
}

// Err returns the first write error, nil if none.
func (a *AccessLog) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// SetAccessLog starts writing an access log line per routed request to l
// (nil stops).
func (p *Proxy) SetAccessLog(l *AccessLog) { p.access.Store(l) }

// logAccess writes c's line when an access log is set.
func (p *Proxy) logAccess(c *call, agent, path string, status int, start, firstByte time.Time) {
	l := p.access.Load()
	if l == nil || !c.routed {
		return
	}
	now := time.Now()
	ttfb := -1.0
	if !firstByte.IsZero() && !c.sentAt.IsZero() && !firstByte.Before(c.sentAt) {
		ttfb = ms(firstByte.Sub(c.sentAt))
	}
	l.Write(AccessEntry{
		Time: now.UTC().Format(time.RFC3339Nano), Model: c.pool.Model,
		Session: KeyHash(c.facts.SessionKey), Agent: KeyHash(agent),
		Replica: c.upstream().Name, Decision: c.dec.Reason.String(),
		Admission: c.adm.Admission.String(), HeldMs: ms(c.adm.Held),
		Status: status, Attempts: c.attempts, TTFBMs: ttfb, DurationMs: ms(now.Sub(start)),
		PromptTokens: c.usage.prompt, CachedTokens: c.usage.cached, OutputTokens: c.usage.output,
		StreamBroken: c.streamBroken != nil, StreamError: c.usage.streamErr, Shared: c.pool.Balancer.Shared(), Path: path,
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rejectWriter keeps the status and the start of the body of a response the
// router writes itself (an API error), for the access log.
type rejectWriter struct {
	statusWriter
	body []byte
}

// maxRejectBody bounds what rejectWriter keeps of an error body.
const maxRejectBody = 1024

func (w *rejectWriter) Write(b []byte) (int, error) {
	if n := min(len(b), maxRejectBody-len(w.body)); n > 0 {
		w.body = append(w.body, b[:n]...)
	}
	return w.statusWriter.Write(b)
}

// logRejected writes the line of a request the router answered itself,
// before or instead of routing it (info as far as it was read).
func (p *Proxy) logRejected(r *http.Request, info RequestInfo, w *rejectWriter, start time.Time) {
	l := p.access.Load()
	if l == nil {
		return
	}
	status := w.status
	if status == 0 {
		status = 499 // nothing was written: the client went away
	}
	now := time.Now()
	l.Write(AccessEntry{
		Time: now.UTC().Format(time.RFC3339Nano), Model: info.Model,
		Session: KeyHash(info.SessionKey), Agent: KeyHash(r.Header.Get(wire.HeaderClaudeAgent)),
		Decision: "rejected", Admission: "none", Status: status, TTFBMs: -1,
		DurationMs: ms(now.Sub(start)), Path: r.URL.Path, Error: errorMessage(w.body), // hold.go
	})
}
