package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/internal/simclock"
)

// Client sends one turn and streams its response. Do never returns an error: a
// failed turn is data (Result.Status and Result.Err say why). It returns the
// Result with every instant taken from clock (simulated time) and the reply text
// (the concatenated streamed content) for Session.AddReply.
type Client interface {
	Do(ctx context.Context, tr TurnRequest, clock simclock.Clock) (Result, string)
}

// MaxEventSize bounds one SSE event (bytes); a larger event fails the turn. go-sse's
// default is 64 KiB; a vLLM event carries one or a few tokens (well under 1 KiB) and
// Anthropic's largest events are a few KiB, so 256 KiB is far above anything
// legitimate while bounding memory (and go-sse's rescanning of a partial event,
// quadratic in its size when it arrives in many small reads) for a broken server.
const MaxEventSize = 256 << 10

// ReplicaHeader is the response header the router sets to the replica that served
// the request (DESIGN-NOTES "Replica header").
const ReplicaHeader = "X-Warden-Replica"

// errTurnTimeout is the context cause of a turn that exceeded its request timeout.
var errTurnTimeout = errors.New("request timeout exceeded")

// wallDurationer is implemented by clocks that run faster than wall time
// (simclock.Scaled): a simulated span is converted before arming a wall timer.
type wallDurationer interface {
	WallDuration(d time.Duration) time.Duration
}

// streamState accumulates what one response stream showed. Both API parsers feed
// it; it owns the rules shared by both (peers.md cases 10-12):
//   - FirstEvent is the first SSE event of any kind (a ping, the role-only chunk);
//   - FirstToken/LastToken are set only by events carrying non-empty content,
//     reasoning or tool-call text, never by role-only, usage-only, finish-only or
//     terminator events;
//   - token counts come from the server's usage; without usage OutputTokens is the
//     number of content-carrying events (one token each in vLLM's streams);
//   - an error event fails the turn even inside an HTTP 200 stream;
//   - a stream that ends without its terminator ([DONE] / message_stop) fails.
type streamState struct {
	r          *Result
	reply      strings.Builder
	sawEvent   bool
	sawToken   bool
	contentEvs int
	usageOut   int
	hasOut     bool
	terminated bool
	failed     string
}

func (st *streamState) event(now time.Duration) {
	if !st.sawEvent {
		st.sawEvent = true
		st.r.FirstEvent = now
	}
}

// token records one content-carrying event; text goes into the reply (reasoning and
// tool-call arguments count as tokens but are not part of the reply text).
func (st *streamState) token(now time.Duration, text string) {
	if !st.sawToken {
		st.sawToken = true
		st.r.FirstToken = now
	}
	st.r.LastToken = now
	st.contentEvs++
	st.reply.WriteString(text)
}

// finish settles the Result once the stream loop is over; readErr is the error that
// ended reading (nil on EOF or after the terminator).
func (st *streamState) finish(now time.Duration, readErr error, terminator string) {
	st.r.Done = now
	if st.hasOut {
		st.r.OutputTokens = st.usageOut
	} else {
		st.r.OutputTokens = st.contentEvs
	}
	switch {
	case st.failed != "":
		st.r.Err = st.failed
	case readErr != nil:
		st.r.Err = fmt.Sprintf("reading stream: %v", readErr)
	case !st.terminated:
		st.r.Err = fmt.Sprintf("stream ended before %s", terminator)
	}
}

// readEvents feeds each SSE event of body to handle until handle returns true (stop)
// or the body ends. It returns the read error, nil at EOF. go-sse implements the
// WHATWG event-stream rules: LF, CR and CRLF line ends, comments, multi-line data,
// and a final event without its blank line is discarded.
func readEvents(body io.Reader, clock simclock.Clock, handle func(ev sse.Event, now time.Duration) bool) error {
	for ev, err := range sse.Read(body, &sse.ReadConfig{MaxEventSize: MaxEventSize}) {
		if err != nil {
			return err
		}
		if handle(ev, clock.Now()) {
			return nil
		}
	}
	return nil
}

// httpTurn is the part of Do shared by both APIs: send the request, record Sent,
// Headers, Status and Replica, and hand a 200 body to parse.
type httpTurn struct {
	HTTP    *http.Client
	Timeout time.Duration // simulated; 0 = none
}

func (h httpTurn) do(ctx context.Context, clock simclock.Clock, r *Result, req *http.Request,
	parse func(body io.Reader, r *Result) string) string {
	if h.Timeout > 0 {
		d := h.Timeout
		if wd, ok := clock.(wallDurationer); ok {
			d = wd.WallDuration(d)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errTurnTimeout)
		defer cancel()
	}
	// Sent is the instant the request was fully written (httptrace WroteRequest),
	// falling back to the instant it was handed to the transport.
	var wrote atomic.Int64
	var wroteOK atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		wrote.Store(int64(clock.Now()))
		wroteOK.Store(true)
	}}
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	client := h.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	r.Sent = clock.Now()
	resp, err := client.Do(req)
	now := clock.Now()
	if wroteOK.Load() {
		if t := time.Duration(wrote.Load()); t <= now && t >= r.Sent {
			r.Sent = t
		}
	}
	if err != nil {
		r.Done = now
		r.Err = h.describe(ctx, fmt.Errorf("sending request: %w", err))
		return ""
	}
	defer resp.Body.Close()
	r.Headers = now
	r.Status = resp.StatusCode
	r.Replica = resp.Header.Get(ReplicaHeader)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		r.Done = clock.Now()
		r.Err = fmt.Sprintf("http %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return ""
	}
	reply := parse(resp.Body, r)
	if r.Err != "" && ctx.Err() != nil {
		r.Err = h.describe(ctx, errors.New(r.Err))
	}
	return reply
}

// describe names a transport failure, telling a turn timeout and a cancellation apart.
func (h httpTurn) describe(ctx context.Context, err error) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTurnTimeout):
		return fmt.Sprintf("timeout: no complete response within %s (request_timeout): %v", h.Timeout, err)
	case cause != nil:
		return fmt.Sprintf("canceled: %v", err)
	}
	return err.Error()
}
