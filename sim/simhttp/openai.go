package simhttp

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/sim"
)

// Response shapes of vLLM's OpenAI-compatible server (vllm/entrypoints/openai/
// chat_completion/protocol.py, completion/protocol.py, engine/protocol.py). Field order
// follows vLLM's serialisation.

type usageInfo struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails *promptTokenDetails `json:"prompt_tokens_details"`
}

type promptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func newUsage(prompt, completion, cached int) *usageInfo {
	return &usageInfo{PromptTokens: prompt, TotalTokens: prompt + completion, CompletionTokens: completion,
		PromptTokensDetails: &promptTokenDetails{CachedTokens: cached}}
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatStreamChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	// StopReason is null on the finishing chunk and absent elsewhere, as vLLM sends it.
	StopReason json.RawMessage `json:"stop_reason,omitempty"`
}

type chatChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []chatStreamChoice `json:"choices"`
	Usage   *usageInfo         `json:"usage,omitempty"`
}

type chatMessageOut struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	Refusal          *string    `json:"refusal"`
	ToolCalls        []struct{} `json:"tool_calls"`
	ReasoningContent *string    `json:"reasoning_content"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     *struct{}      `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
	StopReason   *string        `json:"stop_reason"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       *string      `json:"service_tier"`
	SystemFingerprint *string      `json:"system_fingerprint"`
	Usage             *usageInfo   `json:"usage"`
	PromptLogprobs    *struct{}    `json:"prompt_logprobs"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   *string   `json:"stop_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usageInfo         `json:"usage,omitempty"`
}

// mustJSON marshals response structs that cannot fail to marshal.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("simhttp: marshalling a response: " + err.Error())
	}
	return b
}

// streamErrorEvent is vLLM's in-stream error: a data event carrying ErrorResponse.
func streamErrorEvent(err error) []byte {
	return mustJSON(errUnavailable(err).openAI())
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r, decodeChat)
	if !ok {
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeOpenAIError(w, e)
		return
	}
	msgs, e := req.chatMessages()
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	prompt := sim.RenderChat(nil, msgs, true)
	id := "chatcmpl-" + s.nextID()
	sub, e := s.submit(r, id, prompt, req.maxTokens(), req.sampling)
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	defer sub.done()
	created := time.Now().Unix()
	if req.Stream {
		s.streamChat(w, r, sub, req.StreamOptions, id, created)
		return
	}
	out, cached, err := sub.collect(r.Context())
	completion := len(out)
	text := sim.Detokenize(out)
	if err != nil {
		if r.Context().Err() == nil {
			writeOpenAIError(w, errUnavailable(err))
		}
		return
	}
	writeJSON(w, http.StatusOK, chatCompletion{
		ID: id, Object: "chat.completion", Created: created, Model: s.cfg.Model,
		Choices: []chatChoice{{
			Message:      chatMessageOut{Role: "assistant", Content: text, ToolCalls: []struct{}{}},
			FinishReason: sub.finish,
		}},
		Usage: newUsage(sub.prompt, completion, cached),
	})
}

// streamChat writes a chat completion as vLLM streams it: headers at once; when the
// first token exists, a role-only delta {"role":"assistant","content":""}; one content
// delta per token, the last carrying finish_reason; with include_usage a final chunk
// with "choices":[] and usage; then "data: [DONE]".
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, sub *submission, opts *streamOptions, id string, created int64) {
	sw := startSSE(w)
	includeUsage := opts != nil && opts.IncludeUsage
	continuous := includeUsage && opts.ContinuousUsageStats
	sentRole := false
	completion, cached := 0, 0
	chunk := func(delta chatDelta, finish *string) []byte {
		c := chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.cfg.Model,
			Choices: []chatStreamChoice{{Delta: delta, FinishReason: finish}}}
		if finish != nil {
			c.Choices[0].StopReason = json.RawMessage("null")
		}
		if continuous {
			c.Usage = newUsage(sub.prompt, completion, cached)
		}
		return mustJSON(c)
	}
	err := sub.follow(r.Context(), func(u update) error {
		if !u.started {
			return nil
		}
		cached = u.cachedTokens
		if !sentRole {
			sentRole = true
			empty := ""
			if err := sw.send("", chunk(chatDelta{Role: "assistant", Content: &empty}, nil)); err != nil {
				return err
			}
		}
		for i, t := range u.tokens {
			text := sim.DetokenizeToken(t, completion == 0)
			completion++
			var finish *string
			if u.finished && i == len(u.tokens)-1 {
				finish = &sub.finish
			}
			if err := sw.send("", chunk(chatDelta{Content: &text}, finish)); err != nil {
				return err
			}
		}
		if u.finished && len(u.tokens) == 0 {
			empty := ""
			return sw.send("", chunk(chatDelta{Content: &empty}, &sub.finish))
		}
		return nil
	})
	var usage []byte
	if err == nil && includeUsage {
		usage = mustJSON(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.cfg.Model,
			Choices: []chatStreamChoice{}, Usage: newUsage(sub.prompt, completion, cached)})
	}
	endOpenAIStream(r.Context(), sw, err, usage)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r, decodeCompletion)
	if !ok {
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeOpenAIError(w, e)
		return
	}
	prompt, e := req.promptTokens()
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	id := "cmpl-" + s.nextID()
	sub, e := s.submit(r, id, prompt, req.MaxTokens, req.sampling)
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	defer sub.done()
	created := time.Now().Unix()
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	continuous := includeUsage && req.StreamOptions.ContinuousUsageStats
	completion, cached := 0, 0
	if !req.Stream {
		out, c, err := sub.collect(r.Context())
		completion, cached = len(out), c
		text := sim.Detokenize(out)
		if err != nil {
			if r.Context().Err() == nil {
				writeOpenAIError(w, errUnavailable(err))
			}
			return
		}
		writeJSON(w, http.StatusOK, completionResponse{
			ID: id, Object: "text_completion", Created: created, Model: s.cfg.Model,
			Choices: []completionChoice{{Text: text, FinishReason: &sub.finish}},
			Usage:   newUsage(sub.prompt, completion, cached),
		})
		return
	}
	sw := startSSE(w)
	chunk := func(text string, finish *string) []byte {
		c := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Model,
			Choices: []completionChoice{{Text: text, FinishReason: finish}}}
		if continuous {
			c.Usage = newUsage(sub.prompt, completion, cached)
		}
		return mustJSON(c)
	}
	err := sub.follow(r.Context(), func(u update) error {
		cached = u.cachedTokens
		for i, t := range u.tokens {
			text := sim.DetokenizeToken(t, completion == 0)
			completion++
			var finish *string
			if u.finished && i == len(u.tokens)-1 {
				finish = &sub.finish
			}
			if err := sw.send("", chunk(text, finish)); err != nil {
				return err
			}
		}
		if u.finished && len(u.tokens) == 0 {
			return sw.send("", chunk("", &sub.finish))
		}
		return nil
	})
	var usage []byte
	if err == nil && includeUsage {
		usage = mustJSON(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Model,
			Choices: []completionChoice{}, Usage: newUsage(sub.prompt, completion, cached)})
	}
	endOpenAIStream(r.Context(), sw, err, usage)
}

// endOpenAIStream ends a chat or completions stream: after err an error event
// and [DONE] (unless the client is gone, ctx done); else the usage chunk, when
// not nil, then [DONE].
func endOpenAIStream(ctx context.Context, sw *sseWriter, err error, usage []byte) {
	if err != nil {
		if ctx.Err() == nil {
			_ = sw.send("", streamErrorEvent(err))
			_ = sw.send("", []byte(wire.SSEDone))
		}
		return
	}
	if usage != nil && sw.send("", usage) != nil {
		return
	}
	_ = sw.send("", []byte(wire.SSEDone))
}
