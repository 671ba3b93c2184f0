package simhttp

import (
	"net/http"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/sim"
)

// Anthropic Messages shapes as vLLM serves them (vllm/entrypoints/anthropic/protocol.py
// and serving.py message_stream_converter). Usage also carries cache_read_input_tokens,
// the prefix-cache hit, with Anthropic's own semantics: input_tokens then counts only
// the prompt tokens not read from the cache, so the prompt is input_tokens +
// cache_read_input_tokens (anthropicUsageOf). vLLM's server itself (serving.py,
// 2026) sends the whole prompt as input_tokens and no cache fields; the harness
// reads both forms (loadgen/client_anthropic.go).

// anthropicUsageOf is the usage of a request of prompt tokens, cached of them
// read from the prefix cache, and completion output tokens.
func anthropicUsageOf(prompt, cached, completion int) anthropicUsage {
	return anthropicUsage{InputTokens: prompt - cached, OutputTokens: completion, CacheReadInputTokens: cached}
}

type anthropicUsage struct {
	InputTokens          int `json:"input_tokens"`
	OutputTokens         int `json:"output_tokens"`
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
}

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicMessageOut struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Content      []anthropicText `json:"content"`
	Model        string          `json:"model"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        anthropicUsage  `json:"usage"`
}

// anthropicMessageFinal is the non-streaming response (vLLM drops null fields there).
type anthropicMessageFinal struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Role       string          `json:"role"`
	Content    []anthropicText `json:"content"`
	Model      string          `json:"model"`
	StopReason string          `json:"stop_reason"`
	Usage      anthropicUsage  `json:"usage"`
}

type messageStartEvent struct {
	Type    string              `json:"type"`
	Message anthropicMessageOut `json:"message"`
}

type blockStartEvent struct {
	Type         string        `json:"type"`
	Index        int           `json:"index"`
	ContentBlock anthropicText `json:"content_block"`
}

type blockDeltaEvent struct {
	Type  string        `json:"type"`
	Index int           `json:"index"`
	Delta anthropicText `json:"delta"`
}

type blockStopEvent struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

type messageDelta struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

type messageDeltaEvent struct {
	Type  string         `json:"type"`
	Delta messageDelta   `json:"delta"`
	Usage anthropicUsage `json:"usage"`
}

type typeOnlyEvent struct {
	Type string `json:"type"`
}

type errorEvent struct {
	Type  string             `json:"type"`
	Error anthropicErrorInfo `json:"error"`
}

// stopReason maps vLLM's finish_reason to Anthropic's (serving.py stop_reason_map).
func stopReason(finish string) string {
	if finish == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

// handleMessages serves POST /v1/messages (and ?beta=true, the same path). Request
// validation errors use vLLM's OpenAI error body, because in vLLM they come from the
// app-wide RequestValidationError handler; errors raised while serving (unknown model,
// too long) use the Anthropic body, as vLLM's translate_error_response does.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r, decodeMessages)
	if !ok {
		return
	}
	if req.MaxTokens == nil {
		writeOpenAIError(w, badRequest("max_tokens", "Field required: max_tokens"))
		return
	}
	if *req.MaxTokens <= 0 {
		writeOpenAIError(w, badRequest("max_tokens", "max_tokens must be positive"))
		return
	}
	msgs, ok := s.messagesOf(w, req)
	if !ok {
		return
	}
	prompt := sim.RenderChat(nil, msgs, true)
	// vLLM reuses the chat completion id for the message (serving.py).
	id := "chatcmpl-" + s.nextID()
	sub, e := s.submit(r, id, prompt, req.MaxTokens, sampling{})
	if e != nil {
		writeAnthropicError(w, e)
		return
	}
	defer sub.done()
	if req.Stream {
		s.streamMessages(w, r, sub, id)
		return
	}
	out, cached, err := sub.collect(r.Context())
	completion := len(out)
	text := sim.Detokenize(out)
	if err != nil {
		if r.Context().Err() == nil {
			writeAnthropicError(w, errUnavailable(err))
		}
		return
	}
	content := []anthropicText{}
	if text != "" {
		content = append(content, anthropicText{Type: "text", Text: text})
	}
	writeJSON(w, http.StatusOK, anthropicMessageFinal{
		ID: id, Type: "message", Role: "assistant", Content: content, Model: s.cfg.Model,
		StopReason: stopReason(sub.finish),
		Usage:      anthropicUsageOf(sub.prompt, cached, completion),
	})
}

// streamMessages writes Anthropic events as vLLM converts its chat stream: message_start
// when the first token exists, content_block_start before the first non-empty text,
// one content_block_delta (text_delta) per token, then content_block_stop,
// message_delta (stop_reason, usage), message_stop.
func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, sub *submission, id string) {
	sw := startSSE(w)
	started, blockOpen := false, false
	completion, cached := 0, 0
	err := sub.follow(r.Context(), func(u update) error {
		if !u.started {
			return nil
		}
		cached = u.cachedTokens
		if !started {
			started = true
			ev := messageStartEvent{Type: wire.EventMessageStart, Message: anthropicMessageOut{
				ID: id, Type: "message", Role: "assistant", Content: []anthropicText{}, Model: s.cfg.Model,
				Usage: anthropicUsageOf(sub.prompt, cached, 0),
			}}
			if err := sw.send(wire.EventMessageStart, mustJSON(ev)); err != nil {
				return err
			}
		}
		for _, t := range u.tokens {
			text := sim.DetokenizeToken(t, completion == 0)
			completion++
			if text == "" {
				continue
			}
			if !blockOpen {
				blockOpen = true
				ev := blockStartEvent{Type: wire.EventContentBlockStart, ContentBlock: anthropicText{Type: "text"}}
				if err := sw.send(wire.EventContentBlockStart, mustJSON(ev)); err != nil {
					return err
				}
			}
			ev := blockDeltaEvent{Type: wire.EventContentBlockDelta, Delta: anthropicText{Type: "text_delta", Text: text}}
			if err := sw.send(wire.EventContentBlockDelta, mustJSON(ev)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if r.Context().Err() == nil {
			ev := errorEvent{Type: "error", Error: anthropicErrorInfo{Type: "internal_error", Message: err.Error()}}
			_ = sw.send("error", mustJSON(ev))
		}
		return
	}
	if blockOpen {
		if sw.send(wire.EventContentBlockStop, mustJSON(blockStopEvent{Type: wire.EventContentBlockStop})) != nil {
			return
		}
	}
	md := messageDeltaEvent{Type: wire.EventMessageDelta, Delta: messageDelta{StopReason: stopReason(sub.finish)},
		Usage: anthropicUsageOf(sub.prompt, cached, completion)}
	if sw.send(wire.EventMessageDelta, mustJSON(md)) != nil {
		return
	}
	_ = sw.send(wire.EventMessageStop, mustJSON(typeOnlyEvent{Type: wire.EventMessageStop}))
}

// handleCountTokens answers {"input_tokens": n, "context_management":
// {"original_input_tokens": n}}, n being the rendered prompt's length including the
// generation prompt (vLLM renders the converted chat request, serving.py count_tokens).
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r, decodeMessages)
	if !ok {
		return
	}
	msgs, ok := s.messagesOf(w, req)
	if !ok {
		return
	}
	n := len(sim.RenderChat(nil, msgs, true))
	type contextManagement struct {
		OriginalInputTokens int `json:"original_input_tokens"`
	}
	writeJSON(w, http.StatusOK, struct {
		InputTokens       int               `json:"input_tokens"`
		ContextManagement contextManagement `json:"context_management"`
	}{n, contextManagement{n}})
}

// messagesOf returns req's messages as chat messages after checking its model;
// on a problem it writes the error (as the endpoints above always did) and
// returns ok false.
func (s *Server) messagesOf(w http.ResponseWriter, req *messagesRequest) ([]sim.ChatMessage, bool) {
	msgs, e := req.chatMessages()
	if e != nil {
		writeOpenAIError(w, e)
		return nil, false
	}
	if e := s.checkModel(req.Model); e != nil {
		writeAnthropicError(w, e)
		return nil, false
	}
	return msgs, true
}
