package loadgenhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
)

// AnthropicVersion is the anthropic-version header Claude Code sends (docs/router.md
// section 4).
const AnthropicVersion = "2023-06-01"

// AnthropicClient sends turns as Claude Code does: POST {BaseURL}/v1/messages?beta=true
// with system and message content as text blocks, metadata.user_id (the JSON string
// of Session.UserID) and stream true, header anthropic-version.
type AnthropicClient struct {
	BaseURL       string        // server or router root (no /v1)
	Model         string        // served model name
	MaxTokens     int           // max_tokens per turn
	SessionHeader string        // SessionHeaderClaudeCode or SessionHeaderXSessionID ("" = claude-code)
	Header        http.Header   // extra request headers (e.g. x-api-key); may be nil
	HTTP          *http.Client  // nil = http.DefaultClient
	Timeout       time.Duration // per turn, simulated; 0 = none
	// Synth writes a trace replay's prompt (TurnRequest.Trace; nil = the
	// simulator's default, as OpenAIClient.Synth). The Messages API has no
	// min_tokens or ignore_eos, so a trace call's output_length is only its
	// max_tokens: the server's model may stop earlier.
	Synth *trace.Synth
}

var _ Client = (*AnthropicClient)(nil)

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

type anthropicRequest struct {
	Model     string             `json:"model"`
	Messages  []anthropicMessage `json:"messages"`
	System    []anthropicBlock   `json:"system,omitempty"`
	Metadata  *anthropicMetadata `json:"metadata,omitempty"`
	MaxTokens int                `json:"max_tokens"`
	Stream    bool               `json:"stream"`
}

type anthropicMetadata struct {
	UserID string `json:"user_id"`
}

// Do sends tr and streams the answer; see Client.
func (c *AnthropicClient) Do(ctx context.Context, tr loadgen.TurnRequest, clock simclock.Clock) (loadgen.Result, string) {
	r := tr.NewResult()
	body := anthropicRequest{Model: c.Model, MaxTokens: tr.OutputLimit(c.MaxTokens), Stream: true}
	if sys := tr.SystemPrompt(); sys != "" {
		body.System = []anthropicBlock{{Type: "text", Text: sys}}
	}
	if tr.Session != nil {
		if c.SessionHeader != loadgen.SessionHeaderXSessionID && c.SessionHeader != loadgen.SessionHeaderNone {
			body.Metadata = &anthropicMetadata{UserID: tr.Session.UserID()}
		}
	}
	if tt := tr.Trace; tt != nil {
		// One user message synthesized now, as OpenAIClient.traceBody.
		synth := c.Synth
		if synth == nil {
			synth = &trace.Synth{}
		}
		var sb strings.Builder
		sb.Grow(5 * synth.Words(&tt.Request))
		_ = synth.WriteContent(&sb, &tt.Request, tt.Index) // a Builder does not fail
		body.Messages = []anthropicMessage{{Role: "user", Content: []anthropicBlock{{Type: "text", Text: sb.String()}}}}
		body.MaxTokens, body.System = max(1, tt.Request.OutputLength), nil
	} else {
		body.Messages = make([]anthropicMessage, 0, len(tr.Messages))
		for _, m := range tr.Messages {
			body.Messages = append(body.Messages, anthropicMessage{Role: m.Role, Content: []anthropicBlock{{Type: "text", Text: m.Content}}})
		}
	}
	req, err := newJSONRequest(ctx, strings.TrimSuffix(c.BaseURL, "/")+wire.PathMessages+"?beta=true", body, c.Header)
	if err != nil {
		now := clock.Now()
		r.Sent, r.Done, r.Err = now, now, err.Error()
		return r, ""
	}
	req.Header.Set("anthropic-version", AnthropicVersion)
	setSessionHeader(req.Header, c.SessionHeader, tr.Session)
	h := httpTurn{HTTP: c.HTTP, Timeout: c.Timeout}
	reply := h.do(ctx, clock, &r, req, func(b io.Reader, r *loadgen.Result) string { return parseAnthropicStream(b, clock, r) })
	return r, reply
}

type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	Delta *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// anthropicIgnored are the SSE event names whose data the parser does not need
// (Anthropic streaming docs: ping, and the block start/stop around each content
// block; a content_block_start's text is always empty).
var anthropicIgnored = map[string]bool{wire.EventPing: true, wire.EventContentBlockStart: true, wire.EventContentBlockStop: true}

// parseAnthropicStream reads a Messages API SSE body into r and returns the reply
// text (the text_delta texts). The event type is the SSE event name, or the JSON
// "type" when the name is absent. Content-carrying events are content_block_delta
// with a non-empty text_delta, input_json_delta or thinking_delta (not
// signature_delta, not the empty text of content_block_start). Token counts follow
// Anthropic's usage semantics: the prompt is input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens (input_tokens alone excludes what the cache served; a
// vLLM server reports input_tokens as the whole prompt and no cache fields, which
// this sum also handles), CachedTokens is cache_read_input_tokens (-1 when never
// reported), and output_tokens is taken from the last usage carrying it
// (message_delta holds the final count).
func parseAnthropicStream(body io.Reader, clock simclock.Clock, r *loadgen.Result) string {
	st := &streamState{r: r}
	var in, read, create int
	var haveIn bool
	useUsage := func(u *anthropicUsage) {
		if u == nil {
			return
		}
		if u.InputTokens != nil {
			in, haveIn = *u.InputTokens, true
		}
		if u.CacheReadInputTokens != nil {
			read = *u.CacheReadInputTokens
			r.CachedTokens = read
		}
		if u.CacheCreationInputTokens != nil {
			create = *u.CacheCreationInputTokens
		}
		if u.OutputTokens != nil {
			st.usageOut, st.hasOut = *u.OutputTokens, true
		}
	}
	var dec eventDecoder
	var e anthropicEvent // reused by every event of the stream (zeroed below)
	err := readEvents(body, clock, func(ev sse.Event, now time.Duration) bool {
		st.event(now)
		data := strings.TrimSpace(ev.Data)
		if anthropicIgnored[ev.Type] && json.Valid(eventBytes(data)) {
			// Named events that carry nothing the harness records: only checked
			// to be JSON (a malformed one still fails the turn below).
			return false
		}
		e = anthropicEvent{}
		if data != "" {
			if err := dec.decode(data, &e); err != nil {
				if ev.Type == "error" {
					st.failed = "stream error event: " + errorText(eventBytes(data))
				} else {
					st.failed = fmt.Sprintf("decoding stream event %q: %v", ev.Type, err)
				}
				return true
			}
		}
		typ := ev.Type
		if typ == "" {
			typ = e.Type
		}
		switch typ {
		case "error":
			msg := errorText(eventBytes(data))
			if len(e.Error) > 0 && string(e.Error) != "null" {
				msg = errorText(e.Error)
			}
			st.failed = "stream error event: " + msg
			return true
		case wire.EventMessageStart:
			if e.Message != nil {
				useUsage(e.Message.Usage)
			}
		case wire.EventMessageDelta:
			useUsage(e.Usage)
		case wire.EventContentBlockDelta:
			if d := e.Delta; d != nil {
				switch d.Type {
				case "text_delta":
					if d.Text != "" {
						st.token(now, d.Text)
					}
				case "input_json_delta":
					if d.PartialJSON != "" {
						st.token(now, "")
					}
				case "thinking_delta":
					if d.Thinking != "" {
						st.token(now, "")
					}
				}
			}
		case wire.EventMessageStop:
			st.terminated = true
			return true
		}
		return false
	})
	if haveIn {
		r.PromptTokens = in + read + create
	}
	st.finish(clock.Now(), err, wire.EventMessageStop)
	return st.reply.String()
}
