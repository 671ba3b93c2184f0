package loadgenhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// ResponsesClient sends turns to the OpenAI Responses API as the Codex CLI does
// (docs/responses-api.md): POST {BaseURL}/v1/responses, stream true, store false,
// the whole conversation as input message items each turn (no
// previous_response_id), the system prompt as instructions and prompt_cache_key =
// the session key.
type ResponsesClient struct {
	BaseURL       string        // server or router root (no /v1)
	Model         string        // served model name
	MaxTokens     int           // max_output_tokens per turn
	SessionHeader string        // loadgen.SessionHeader* style ("" = claude-code)
	Header        http.Header   // extra request headers (e.g. Authorization); may be nil
	HTTP          *http.Client  // nil = http.DefaultClient
	Timeout       time.Duration // per turn, simulated; 0 = none
}

var _ Client = (*ResponsesClient)(nil)

type responsesPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type responsesInputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content []responsesPart `json:"content"`
}

type responsesRequestBody struct {
	Model           string               `json:"model"`
	Instructions    string               `json:"instructions,omitempty"`
	Input           []responsesInputItem `json:"input"`
	MaxOutputTokens int                  `json:"max_output_tokens"`
	Stream          bool                 `json:"stream"`
	Store           bool                 `json:"store"`
	PromptCacheKey  string               `json:"prompt_cache_key,omitempty"`
}

// Do sends tr and streams the answer; see Client.
func (c *ResponsesClient) Do(ctx context.Context, tr loadgen.TurnRequest, clock simclock.Clock) (loadgen.Result, string) {
	r := tr.NewResult()
	body := responsesRequestBody{Model: c.Model, Instructions: tr.SystemPrompt(), MaxOutputTokens: tr.OutputLimit(c.MaxTokens), Stream: true}
	body.Input = make([]responsesInputItem, 0, len(tr.Messages))
	for _, m := range tr.Messages {
		part := "input_text"
		if m.Role == "assistant" {
			part = "output_text"
		}
		body.Input = append(body.Input, responsesInputItem{Type: "message", Role: m.Role, Content: []responsesPart{{Type: part, Text: m.Content}}})
	}
	if tr.Session != nil && c.SessionHeader != loadgen.SessionHeaderNone {
		body.PromptCacheKey = tr.Session.Key
	}
	req, err := newJSONRequest(ctx, strings.TrimSuffix(c.BaseURL, "/")+wire.PathResponses, body, c.Header)
	if err != nil {
		now := clock.Now()
		r.Sent, r.Done, r.Err = now, now, err.Error()
		return r, ""
	}
	setSessionHeader(req.Header, c.SessionHeader, tr.Session)
	h := httpTurn{HTTP: c.HTTP, Timeout: c.Timeout}
	reply := h.do(ctx, clock, &r, req, func(b io.Reader, r *loadgen.Result) string { return parseResponsesStream(b, clock, r) })
	return r, reply
}

// responsesEvent is the part of a Responses API stream event the harness reads.
type responsesEvent struct {
	Type     string `json:"type"`
	Delta    string `json:"delta"`
	Response *struct {
		Status string `json:"status"`
		Usage  *struct {
			InputTokens        *int `json:"input_tokens"`
			OutputTokens       *int `json:"output_tokens"`
			InputTokensDetails *struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	} `json:"response"`
}

// responsesContent are the delta events that carry generated content (OpenAI's
// streaming-events reference; vLLM serving_responses.py): output text, reasoning
// text or summary, function-call arguments. TTFB is the first of them with a
// non-empty delta.
var responsesContent = map[string]bool{
	wire.EventOutputTextDelta:   true,
	wire.EventReasoningDelta:    true,
	wire.EventReasoningSumDelta: true,
	wire.EventFunctionArgsDelta: true,
	wire.EventRefusalDelta:      true,
}

// parseResponsesStream reads a Responses API SSE body into r and returns the reply
// text (the output_text deltas). The event type is the SSE event name, or the
// JSON "type" when absent. Usage comes from response.completed (input_tokens,
// input_tokens_details.cached_tokens, output_tokens); response.completed or
// response.incomplete ends the stream normally; "error" and response.failed fail
// the turn.
func parseResponsesStream(body io.Reader, clock simclock.Clock, r *loadgen.Result) string {
	st := &streamState{r: r}
	var dec eventDecoder
	var e responsesEvent
	err := readEvents(body, clock, func(ev sse.Event, now time.Duration) bool {
		st.event(now)
		data := strings.TrimSpace(ev.Data)
		if data == "" {
			return false
		}
		e = responsesEvent{}
		if err := dec.decode(data, &e); err != nil {
			st.failed = fmt.Sprintf("decoding stream event %q: %v", ev.Type, err)
			return true
		}
		typ := ev.Type
		if typ == "" {
			typ = e.Type
		}
		switch {
		case responsesContent[typ]:
			if e.Delta != "" {
				text := ""
				if typ == wire.EventOutputTextDelta {
					text = e.Delta
				}
				st.token(now, text)
			}
		case typ == "error":
			st.failed = "stream error event: " + errorText(eventBytes(data))
			return true
		case typ == wire.EventResponseFailed:
			msg := wire.EventResponseFailed
			if e.Response != nil && e.Response.Error != nil {
				msg += ": " + e.Response.Error.Message
			}
			st.failed = msg
			return true
		case typ == wire.EventResponseCompleted || typ == wire.EventResponseIncomplete:
			if e.Response != nil && e.Response.Usage != nil {
				u := e.Response.Usage
				if u.InputTokens != nil {
					r.PromptTokens = *u.InputTokens
				}
				if u.OutputTokens != nil {
					st.usageOut, st.hasOut = *u.OutputTokens, true
				}
				if u.InputTokensDetails != nil && u.InputTokensDetails.CachedTokens != nil {
					r.CachedTokens = *u.InputTokensDetails.CachedTokens
				}
			}
			st.terminated = true
			return true
		}
		return false
	})
	st.finish(clock.Now(), err, wire.EventResponseCompleted)
	return st.reply.String()
}
