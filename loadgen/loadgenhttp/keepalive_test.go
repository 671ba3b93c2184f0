package loadgenhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// keptAliveGap is the wall time between a keptAliveServer's keep-alive events
// and the replica's stream.
const keptAliveGap = 100 * time.Millisecond

// keptAliveServer answers as the router answers a request it held past
// keepalive_after (router/routerhttp/hold.go): 200 and the SSE headers at once
// with the hold so far (1 s) and declared trailers, keep-alive events (ping
// events or SSE comments), then the replica's stream, then the trailers with
// the final hold (16 s) and the replica. trailers false: the trailers stay
// empty (a router that could not set them).
func keptAliveServer(t *testing.T, keepAlive, reply string, trailers bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set(wire.HeaderHeldMs, "1000")
		h.Set("X-Warden-Admission", "waiting")
		h.Set("Trailer", wire.HeaderHeldMs+", "+wire.HeaderReplica)
		w.WriteHeader(http.StatusOK)
		for range 3 {
			io.WriteString(w, keepAlive)
			w.(http.Flusher).Flush()
		}
		time.Sleep(keptAliveGap)
		io.WriteString(w, reply)
		if trailers {
			h.Set(wire.HeaderHeldMs, "16000")
			h.Set(wire.HeaderReplica, "r1")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Through a router that keeps a held request alive, TTFB
// is still the first content token (not a ping event, not an SSE comment: go-sse
// skips comment lines), and the hold and the replica come from the trailers,
// else the hold from the header.
func TestKeptAliveResponse(t *testing.T) {
	openAI := sseOpenAI(roleChunk, content("ok"), usageChunk, "[DONE]")
	anthropic := readFixture(t, "anthropic-stream.txt")
	for _, tc := range []struct {
		name, api, keepAlive, reply string
		trailers                    bool
		held                        time.Duration
		replica                     string
	}{
		{"anthropic ping", loadgen.APIAnthropicMessages, "event: ping\ndata: {\"type\": \"ping\"}\n\n", anthropic, true, 16 * time.Second, "r1"},
		{"openai comment", loadgen.APIOpenAIChat, ": keep-alive\n\n", openAI, true, 16 * time.Second, "r1"},
		// No trailers: the header's hold so far is all there is.
		{"openai no trailers", loadgen.APIOpenAIChat, ": keep-alive\n\n", openAI, false, time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := keptAliveServer(t, tc.keepAlive, tc.reply, tc.trailers)
			sc := loadgen.TinyScenario()
			sc.API = tc.api
			tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
			r, reply := NewClient(sc, srv.URL, srv.Client(), nil).Do(context.Background(), tr, simclock.NewScaled(1))
			if !r.OK() || reply == "" {
				t.Fatalf("turn: ok %v err %q reply %q", r.OK(), r.Err, reply)
			}
			if r.Held != tc.held || r.Replica != tc.replica {
				t.Errorf("held %v replica %q, want %v %q", r.Held, r.Replica, tc.held, tc.replica)
			}
			// The keep-alives came keptAliveGap before the replica's stream: a
			// ping is an event (FirstEvent), a comment is none; neither is
			// the first token.
			if gap := r.FirstToken - r.Headers; gap < keptAliveGap*8/10 || r.TTFB() != r.FirstToken-r.Sent {
				t.Errorf("first token %v after the headers, want the replica's token (>= %v)", gap, keptAliveGap*8/10)
			}
			firstEvent := r.FirstEvent - r.Headers
			if tc.api == loadgen.APIAnthropicMessages && firstEvent >= keptAliveGap/2 {
				t.Errorf("first event %v after the headers, want the ping, at once", firstEvent)
			}
			if tc.api == loadgen.APIOpenAIChat && firstEvent < keptAliveGap*8/10 {
				t.Errorf("first event %v after the headers, want the role chunk (a comment is no event)", firstEvent)
			}
			if r.OutputTokens == 0 {
				t.Errorf("no output tokens: %+v", r)
			}
		})
	}
}

// A kept-alive response that ends with the router's in-stream error (refused
// at the limit after the commit) fails the turn with the error's text, and the
// final hold still comes from the trailer.
func TestKeptAliveResponseEndingInError(t *testing.T) {
	refusal := "event: error\ndata: {\"error\":{\"message\":\"model \\\"m\\\": overloaded: admission limit reached: held 3s, max_hold 2s\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n"
	srv := keptAliveServer(t, "event: ping\ndata: {\"type\": \"ping\"}\n\n", refusal, true)
	sc := loadgen.TinyScenario()
	sc.API = loadgen.APIAnthropicMessages
	tr, _ := loadgen.NewWorkload(sc).Session(0).NextTurn(0)
	r, _ := NewClient(sc, srv.URL, srv.Client(), nil).Do(context.Background(), tr, newStepClock())
	if r.OK() || !strings.Contains(r.Err, "overloaded") || r.Status != 200 {
		t.Fatalf("turn: status %d err %q, want a failed turn naming the overload", r.Status, r.Err)
	}
	if r.Held != 16*time.Second || r.FirstToken != 0 {
		t.Errorf("held %v first token %v, want the trailer's 16 s and no token", r.Held, r.FirstToken)
	}
}
