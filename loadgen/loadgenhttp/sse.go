package loadgenhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	sse "github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// Client sends one turn and streams its response. Do never returns an error: a
// failed turn is data (Result.Status and Result.Err say why). It returns the
// Result with every instant taken from clock (simulated time) and the reply text
// (the concatenated streamed content) for Session.AddReply.
type Client interface {
	Do(ctx context.Context, tr loadgen.TurnRequest, clock simclock.Clock) (loadgen.Result, string)
}

// MaxEventSize bounds one SSE event (bytes); a larger event fails the turn. go-sse's
// default is 64 KiB; a vLLM event carries one or a few tokens (well under 1 KiB) and
// Anthropic's largest events are a few KiB, so 256 KiB is far above anything
// legitimate while bounding memory (and go-sse's rescanning of a partial event,
// quadratic in its size when it arrives in many small reads) for a broken server.
const MaxEventSize = 256 << 10

// errTurnTimeout is the context cause of a turn that exceeded its request timeout.
var errTurnTimeout = errors.New("request timeout exceeded")

// wallDurationer is implemented by clocks that run faster than wall time
// (simclock.Scaled): a simulated span is converted before arming a wall timer.
type wallDurationer interface {
	WallDuration(d time.Duration) time.Duration
}

// streamState accumulates what one response stream showed. Both API parsers feed
// it; it owns the rules shared by both (docs/bench.md, failure cases 1-3):
//   - FirstEvent is the first SSE event of any kind (a ping, the role-only chunk;
//     an SSE comment, as the router's keep-alive on OpenAI paths, is no event:
//     go-sse skips comment lines, as the WHATWG event-stream rules say);
//   - FirstToken/LastToken are set only by events carrying non-empty content,
//     reasoning or tool-call text, never by role-only, usage-only, finish-only or
//     terminator events;
//   - token counts come from the server's usage; without usage OutputTokens is the
//     number of content-carrying events (one token each in vLLM's streams);
//   - an error event fails the turn even inside an HTTP 200 stream;
//   - a stream that ends without its terminator ([DONE] / message_stop) fails.
type streamState struct {
	r          *loadgen.Result
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
//
// The instant passed to handle is when the event's last bytes were read: the
// instant the Read call that delivered them returned (arrivalReader), taken before
// go-sse splits the event and before handle decodes it, so neither parsing cost
// nor allocation in them delays the stamp. Events delivered by one Read share its
// instant (e.g. vLLM's role-only chunk and the first content chunk when both were
// already buffered).
func readEvents(body io.Reader, clock simclock.Clock, handle func(ev sse.Event, now time.Duration) bool) error {
	ar := &arrivalReader{r: body, clock: clock}
	for ev, err := range sse.Read(ar, &sse.ReadConfig{MaxEventSize: MaxEventSize}) {
		if err != nil {
			return err
		}
		if handle(ev, ar.at) {
			return nil
		}
	}
	return nil
}

// eventBytes returns an event's data as bytes without copying them (one allocation
// and copy per event less). The slice aliases the string's immutable memory, so it
// must only be read: json.Unmarshal and json.Valid only read their input, and
// Unmarshal copies whatever it keeps (strings, RawMessage).
func eventBytes(data string) []byte {
	return unsafe.Slice(unsafe.StringData(data), len(data))
}

// eventDecoder decodes the JSON data of a stream's events one after the other,
// with the result and error json.Unmarshal would give, but through one json.Decoder
// whose buffer, scanner and decode state serve every event of the stream
// (json.Unmarshal allocates them anew on every call: for a vLLM content chunk, 13
// allocations and ~780 bytes into openAIChunk against 2 and ~30 bytes here). The
// zero value is ready to use.
type eventDecoder struct {
	src strings.Reader // the current event's data
	dec *json.Decoder
}

// decode decodes data, one JSON value with no surrounding space (the caller trims
// it), into v. Like json.Unmarshal, it fills v only as far as data goes: the caller
// zeroes v first. Any failure, and a value followed by more bytes, is answered by
// json.Unmarshal itself, so errors and their texts are Unmarshal's.
func (d *eventDecoder) decode(data string, v any) error {
	if d.dec == nil {
		d.dec = json.NewDecoder(&d.src)
	}
	d.src.Reset(data)
	start := d.dec.InputOffset()
	if err := d.dec.Decode(v); err == nil && d.dec.InputOffset()-start == int64(len(data)) {
		return nil
	}
	// A Decoder's read errors are sticky and trailing bytes stay in its buffer:
	// start afresh next time.
	d.dec = nil
	return json.Unmarshal(eventBytes(data), v)
}

// arrivalReader stamps every Read that returns bytes with clock.Now(). go-sse's
// scanner reads only when the bytes it holds contain no complete event, so when
// an event is yielded the latest Read is the one that delivered the event's end,
// and at is that event's arrival instant.
type arrivalReader struct {
	r     io.Reader
	clock simclock.Clock
	at    time.Duration // instant the latest Read returning n > 0 returned
}

func (a *arrivalReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.at = a.clock.Now()
	}
	return n, err
}

// Draining after the terminator. net/http reuses a keep-alive connection only
// when the response body was read to EOF before Close; a stream read up to its
// terminator ([DONE] / message_stop) still holds the chunked encoding's last chunk,
// so closing it there makes the transport drop the connection and dial a new one
// for the next turn (a TCP handshake, a server-side accept and goroutine, and a
// socket in TIME_WAIT per turn). drainBody reads what follows the terminator, at
// most drainMax bytes and for at most drainWait (wall); a server that sends more or
// keeps the response open loses the connection instead, as before. The wait is
// spent only in that case (the turn's Result is settled before it; the next turn
// of the session is dispatched after it).
const drainMax = 4 << 10

// drainWait is a variable only so a test can lengthen it.
var drainWait = 100 * time.Millisecond

// drainBody reads body to EOF within drainMax bytes and drainWait; abort must
// make a blocked Read return (it cancels the request's context).
func drainBody(body io.Reader, abort func()) {
	t := time.AfterFunc(drainWait, abort)
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainMax))
}

// httpTurn is the part of Do shared by both APIs: send the request, record Sent,
// Headers, Status and Replica, and hand a 200 body to parse.
type httpTurn struct {
	HTTP    *http.Client
	Timeout time.Duration // simulated; 0 = none
}

func (h httpTurn) do(ctx context.Context, clock simclock.Clock, r *loadgen.Result, req *http.Request,
	parse func(body io.Reader, r *loadgen.Result) string) string {
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	// request_timeout is a no-byte timeout, as clients keep it: the Anthropic
	// SDK's timeout runs until the response headers (fetchWithTimeout in
	// anthropic-sdk-typescript src/client.ts), httpx's read timeout between
	// reads; a router's keep-alive events while it holds a request are bytes.
	active := func() {}
	if h.Timeout > 0 {
		d := h.Timeout
		if wd, ok := clock.(wallDurationer); ok {
			d = wd.WallDuration(d)
		}
		t := time.AfterFunc(d, func() { cancelCause(errTurnTimeout) })
		defer t.Stop()
		active = func() { t.Reset(d) }
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
	active()
	body := io.Reader(activeReader{resp.Body, active})
	r.Headers = now
	r.Status = resp.StatusCode
	takeRouterHeaders(resp.Header, r)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(body, 2048))
		r.Done = clock.Now()
		r.Err = fmt.Sprintf("http %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return ""
	}
	reply := parse(body, r)
	if r.Err != "" && ctx.Err() != nil {
		r.Err = h.describe(ctx, errors.New(r.Err))
		return reply
	}
	// The Result is settled: draining lets the connection be reused, and
	// brings the trailers of a response the router kept alive while it held
	// the request (also one that ended with an error event).
	drainBody(body, cancel)
	takeRouterHeaders(resp.Trailer, r)
	return reply
}

// takeRouterHeaders sets r.Replica and r.Held from the router's headers in h
// (the response's header, then its trailer), each when h has it.
func takeRouterHeaders(h http.Header, r *loadgen.Result) {
	if v := h.Get(wire.HeaderReplica); v != "" {
		r.Replica = v
	}
	if v := h.Get(wire.HeaderHeldMs); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			r.Held = time.Duration(ms * float64(time.Millisecond))
		}
	}
}

// describe names a transport failure, telling a turn timeout and a cancellation apart.
func (h httpTurn) describe(ctx context.Context, err error) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTurnTimeout):
		return fmt.Sprintf("timeout: no byte for %s (request_timeout): %v", h.Timeout, err)
	case cause != nil:
		return fmt.Sprintf("canceled: %v", err)
	}
	return err.Error()
}

// activeReader calls active after every read that brought bytes.
type activeReader struct {
	r      io.Reader
	active func()
}

func (a activeReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.active()
	}
	return n, err
}
