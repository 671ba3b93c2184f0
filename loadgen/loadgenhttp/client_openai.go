package loadgenhttp

import (
	"bytes"
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

// UserAgent is sent on every harness request.
const UserAgent = "lmwarden-loadgen/1"

// OpenAIClient sends turns to an OpenAI-compatible chat endpoint (vLLM's
// POST {BaseURL}/v1/chat/completions) with stream true and
// stream_options.include_usage, the system prompt as the first message.
type OpenAIClient struct {
	BaseURL       string        // server or router root, e.g. "http://127.0.0.1:8080" (no /v1)
	Model         string        // served model name
	MaxTokens     int           // max_tokens per turn
	SessionHeader string        // SessionHeaderClaudeCode or SessionHeaderXSessionID ("" = claude-code)
	Header        http.Header   // extra request headers (e.g. Authorization); may be nil
	HTTP          *http.Client  // nil = http.DefaultClient
	Timeout       time.Duration // per turn, simulated; 0 = none
	// Trace replays (TurnRequest.Trace): Synth writes the prompt (nil = the
	// simulator's default, trace.Synth with Overhead 0) and Force names how the
	// server is made to generate exactly output_length tokens (ForceVLLM,
	// ForceLlamaCpp; "" = ForceVLLM).
	Synth *trace.Synth
	Force string
}

// How a trace replay forces the output length (OpenAIClient.Force).
const (
	// ForceVLLM sends min_tokens = max_tokens and ignore_eos (vLLM's and
	// SGLang's sampling parameters; vllm/sampling_params.py, sglang
	// sampling_params.py).
	ForceVLLM = "vllm"
	// ForceLlamaCpp sends n_predict and ignore_eos (llama.cpp server
	// tools/server/README.md, /completion options, also read on
	// /v1/chat/completions).
	ForceLlamaCpp = "llamacpp"
)

var _ Client = (*OpenAIClient)(nil)

type openAIMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type openAIRequest struct {
	Model         string          `json:"model"`
	Messages      []openAIMessage `json:"messages"`
	MaxTokens     int             `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Trace replays only (see OpenAIClient.Force).
	MinTokens int  `json:"min_tokens,omitempty"`
	NPredict  int  `json:"n_predict,omitempty"`
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
}

// Do sends tr and streams the answer; see Client.
func (c *OpenAIClient) Do(ctx context.Context, tr loadgen.TurnRequest, clock simclock.Clock) (loadgen.Result, string) {
	r := tr.NewResult()
	body := openAIRequest{Model: c.Model, MaxTokens: tr.OutputLimit(c.MaxTokens), Stream: true}
	body.StreamOptions.IncludeUsage = true
	if tr.Trace != nil {
		c.traceBody(&body, tr.Trace)
	} else {
		body.Messages = make([]openAIMessage, 0, len(tr.Messages)+1)
		if sys := tr.SystemPrompt(); sys != "" {
			body.Messages = append(body.Messages, openAIMessage{Role: "system", Content: sys})
		}
		for _, m := range tr.Messages {
			body.Messages = append(body.Messages, openAIMessage(m))
		}
	}
	req, err := newJSONRequest(ctx, strings.TrimSuffix(c.BaseURL, "/")+wire.PathChatCompletions, body, c.Header)
	if err != nil {
		now := clock.Now()
		r.Sent, r.Done, r.Err = now, now, err.Error()
		return r, ""
	}
	setSessionHeader(req.Header, c.SessionHeader, tr.Session)
	h := httpTurn{HTTP: c.HTTP, Timeout: c.Timeout}
	reply := h.do(ctx, clock, &r, req, func(b io.Reader, r *loadgen.Result) string { return parseOpenAIStream(b, clock, r) })
	return r, reply
}

// traceBody fills body for a trace request: one user message synthesized now
// (the text exists while this request is built and sent) and the output length
// forced.
func (c *OpenAIClient) traceBody(body *openAIRequest, tt *loadgen.TraceTurn) {
	synth := c.Synth
	if synth == nil {
		synth = &trace.Synth{}
	}
	var sb strings.Builder
	sb.Grow(5 * synth.Words(&tt.Request))
	_ = synth.WriteContent(&sb, &tt.Request, tt.Index) // a Builder does not fail
	body.Messages = []openAIMessage{{Role: "user", Content: sb.String()}}
	n := max(1, tt.Request.OutputLength)
	body.MaxTokens, body.IgnoreEOS = n, true
	if c.Force == ForceLlamaCpp {
		body.NPredict = n
	} else {
		body.MinTokens = n
	}
}

// openAIChunk is the part of a chat.completion.chunk the harness reads. The delta's
// texts are plain strings, not pointers: a JSON null and "" both mean "no token",
// and a pointer would cost an allocation per event.
type openAIChunk struct {
	Object  string `json:"object"`
	Message string `json:"message"` // on {"object":"error",...}
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			ToolCalls        []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        *int `json:"prompt_tokens"`
		CompletionTokens    *int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// reset zeroes c for the next event but keeps the Choices array: encoding/json
// decodes a JSON array's elements into a slice's spare capacity without zeroing
// them, so the elements are cleared here first (a field absent from the next event
// must not keep this one's value). One allocation per event less.
func (c *openAIChunk) reset() {
	choices := c.Choices[:cap(c.Choices)]
	clear(choices)
	*c = openAIChunk{Choices: choices[:0]}
}

// parseOpenAIStream reads a chat-completions SSE body into r (FirstEvent,
// FirstToken, LastToken, Done, token counts, Err) and returns the reply text.
// Content-carrying deltas are non-empty content, reasoning_content / reasoning, or a
// tool call with a non-empty name or arguments (vLLM's first role-only chunk with
// content "" is not one: docs/bench.md, failure case 1). Usage, when sent, is taken
// from the last
// event carrying it (vLLM's continuous_usage_stats repeats it on every chunk).
func parseOpenAIStream(body io.Reader, clock simclock.Clock, r *loadgen.Result) string {
	st := &streamState{r: r}
	var ch openAIChunk // reused by every event of the stream (reset below)
	var dec eventDecoder
	err := readEvents(body, clock, func(ev sse.Event, now time.Duration) bool {
		st.event(now)
		data := strings.TrimSpace(ev.Data)
		if data == wire.SSEDone {
			st.terminated = true
			return true
		}
		if data == "" || ev.Type == wire.EventPing {
			return false
		}
		if ev.Type == "error" {
			st.failed = "stream error event: " + errorText(eventBytes(data))
			return true
		}
		ch.reset()
		if err := dec.decode(data, &ch); err != nil {
			st.failed = fmt.Sprintf("decoding stream event: %v", err)
			return true
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			st.failed = "stream error event: " + errorText(ch.Error)
			return true
		}
		if ch.Object == "error" {
			st.failed = "stream error event: " + ch.Message
			return true
		}
		for _, c := range ch.Choices {
			d := c.Delta
			if d.Content != "" {
				st.token(now, d.Content)
				continue
			}
			if d.ReasoningContent != "" || d.Reasoning != "" {
				st.token(now, "")
				continue
			}
			for _, tc := range d.ToolCalls {
				if tc.Function.Name != "" || tc.Function.Arguments != "" {
					st.token(now, "")
					break
				}
			}
		}
		if u := ch.Usage; u != nil {
			if u.PromptTokens != nil {
				r.PromptTokens = *u.PromptTokens
			}
			if u.CompletionTokens != nil {
				st.usageOut, st.hasOut = *u.CompletionTokens, true
			}
			if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil {
				r.CachedTokens = *u.PromptTokensDetails.CachedTokens
			}
		}
		return false
	})
	st.finish(clock.Now(), err, wire.SSEDone)
	return st.reply.String()
}

// errorText extracts a message from an error payload: {"message": ...},
// {"error": {"message": ...}}, a JSON string, or the raw text.
func errorText(raw []byte) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil {
		if e.Message != "" {
			if e.Type != "" {
				return e.Type + ": " + e.Message
			}
			return e.Message
		}
		if len(e.Error) > 0 && string(e.Error) != "null" {
			return errorText(e.Error)
		}
	}
	const maxLen = 300
	if len(raw) > maxLen {
		raw = raw[:maxLen]
	}
	return string(raw)
}

// newJSONRequest builds a POST with a JSON body and the common headers.
func newJSONRequest(ctx context.Context, url string, body any, extra http.Header) (*http.Request, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	for k, vs := range extra {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", UserAgent)
	}
	return req, nil
}

// setSessionHeader sets the session key header of the given style.
func setSessionHeader(h http.Header, style string, s *loadgen.Session) {
	if s == nil || s.Key == "" || style == loadgen.SessionHeaderNone {
		return // keyless (a trace replay without session keys)
	}
	switch style {
	case loadgen.SessionHeaderNone:
	case loadgen.SessionHeaderXSessionID:
		h.Set(wire.HeaderSessionID, s.Key)
	case loadgen.SessionHeaderCodex:
		h.Set(wire.HeaderCodexSession, s.Key)
		h.Set(wire.HeaderCodexThread, s.Key)
	default:
		h.Set(wire.HeaderClaudeSession, s.Key)
		if s.Agent != "" {
			h.Set(wire.HeaderClaudeAgent, s.Agent)
		}
	}
}
