package simhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/lmwarden/warden/sim"
)

// This file decodes the three generation request bodies and renders them to the
// sim.ChatMessage list the chat template turns into prompt tokens. The conversion
// follows vLLM: OpenAI messages go to the chat template as they are (text parts of a
// list content joined with "\n", vllm/entrypoints/chat_utils.py); Anthropic requests
// are first converted to an OpenAI chat request (vllm/entrypoints/anthropic/serving.py
// _convert_anthropic_to_openai_request), so the same conversation gives the same tokens
// through both APIs.

// chatRequest is the part of an OpenAI chat completion request the simulator reads.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []openAIMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Tools               []openAITool    `json:"tools"`
	sampling
}

// sampling holds vLLM's extra sampling parameters that change when the
// simulated model stops (vllm/sampling_params.py): ignore_eos makes it go on
// to the limit, min_tokens forbids a stop before that many tokens.
type sampling struct {
	MinTokens int  `json:"min_tokens"`
	IgnoreEOS bool `json:"ignore_eos"`
}

// natural returns when the simulated model stops on its own: after reply
// tokens, at least MinTokens, never with IgnoreEOS.
func (p sampling) natural(reply int) int {
	if p.IgnoreEOS {
		return math.MaxInt
	}
	return max(reply, p.MinTokens)
}

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

type openAIMessage struct {
	Role       string           `json:"role"`
	Content    json.RawMessage  `json:"content"`
	ToolCalls  []openAIToolCall `json:"tool_calls"`
	ToolCallID string           `json:"tool_call_id"`
}

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type openAITool struct {
	Type     string   `json:"type"`
	Function toolSpec `json:"function"`
}

// toolSpec is a tool definition in the one canonical form both APIs render.
type toolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// completionRequest is the part of an OpenAI (legacy) completion request the simulator
// reads. Prompt is a string, a list of one string, or a list of token ids.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	sampling
}

// messagesRequest is the part of an Anthropic Messages request the simulator reads
// (vllm/entrypoints/anthropic/protocol.py AnthropicMessagesRequest).
type messagesRequest struct {
	Model     string             `json:"model"`
	Messages  []anthropicMessage `json:"messages"`
	MaxTokens *int               `json:"max_tokens"`
	System    json.RawMessage    `json:"system"`
	Stream    bool               `json:"stream"`
	Tools     []anthropicTool    `json:"tools"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// billingHeaderPrefix starts Claude Code's per-request attribution block in system;
// vLLM drops it because its hash changes every request and would defeat prefix caching
// (vllm/entrypoints/anthropic/serving.py _convert_system_message).
const billingHeaderPrefix = "x-anthropic-billing-header"

// decodeJSON unmarshals a request body, mapping failures to vLLM's 400.
func decodeJSON(body []byte, v any) *apiError {
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("", "JSON decode error: %v", err)
	}
	return nil
}

// decodeChat parses an OpenAI chat completion body.
func decodeChat(body []byte) (*chatRequest, *apiError) {
	var r chatRequest
	if e := decodeJSON(body, &r); e != nil {
		return nil, e
	}
	if r.Messages == nil {
		return nil, badRequest("messages", "Field required: messages")
	}
	return &r, nil
}

// decodeCompletion parses an OpenAI completion body.
func decodeCompletion(body []byte) (*completionRequest, *apiError) {
	var r completionRequest
	if e := decodeJSON(body, &r); e != nil {
		return nil, e
	}
	if len(r.Prompt) == 0 || string(r.Prompt) == "null" {
		return nil, badRequest("prompt", "Field required: prompt")
	}
	return &r, nil
}

// decodeMessages parses an Anthropic Messages or count_tokens body. count_tokens has
// no max_tokens, so its presence is checked by the caller.
func decodeMessages(body []byte) (*messagesRequest, *apiError) {
	var r messagesRequest
	if e := decodeJSON(body, &r); e != nil {
		return nil, e
	}
	if r.Model == "" {
		return nil, badRequest("model", "Model is required")
	}
	if r.Messages == nil {
		return nil, badRequest("messages", "Field required: messages")
	}
	return &r, nil
}

// textOf reads OpenAI message content: null, a string, or a list of parts whose text
// parts are joined with "\n" (other part types carry no text here).
func textOf(raw json.RawMessage) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("messages", "content: %v", err)
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest("messages", "content must be a string or a list of content parts: %v", err)
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// renderToolCall renders one assistant tool call the way Qwen-style chat templates do.
func renderToolCall(name, arguments string) string {
	return "\n<tool_call>\n{\"name\": " + quote(name) + ", \"arguments\": " + arguments + "}\n</tool_call>"
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// toolsPreamble is appended to the system prompt when a request carries tools, in the
// manner of Qwen3's chat template (one JSON object per tool inside <tools> tags).
func toolsPreamble(tools []toolSpec) string {
	var b strings.Builder
	b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n")
	b.WriteString("You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for _, t := range tools {
		if len(t.Parameters) > 0 {
			var c bytes.Buffer
			if json.Compact(&c, t.Parameters) == nil {
				t.Parameters = c.Bytes()
			} else {
				t.Parameters = nil
			}
		}
		js, _ := json.Marshal(t)
		b.WriteString("\n")
		b.Write(js)
	}
	b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.")
	return b.String()
}

// withTools puts the tools preamble after the system prompt (a system message is
// created when the conversation has none).
func withTools(msgs []sim.ChatMessage, tools []toolSpec) []sim.ChatMessage {
	if len(tools) == 0 {
		return msgs
	}
	pre := toolsPreamble(tools)
	if len(msgs) > 0 && msgs[0].Role == "system" {
		out := append([]sim.ChatMessage(nil), msgs...)
		out[0].Content = out[0].Content + "\n\n" + pre
		return out
	}
	return append([]sim.ChatMessage{{Role: "system", Content: pre}}, msgs...)
}

// chatMessages converts an OpenAI chat request to template messages.
func (r *chatRequest) chatMessages() ([]sim.ChatMessage, *apiError) {
	msgs := make([]sim.ChatMessage, 0, len(r.Messages)+1)
	for i, m := range r.Messages {
		if m.Role == "" {
			return nil, badRequest("messages", "messages[%d]: role is required", i)
		}
		text, e := textOf(m.Content)
		if e != nil {
			return nil, e
		}
		for _, tc := range m.ToolCalls {
			text += renderToolCall(tc.Function.Name, tc.Function.Arguments)
		}
		msgs = append(msgs, sim.ChatMessage{Role: m.Role, Content: text})
	}
	tools := make([]toolSpec, 0, len(r.Tools))
	for _, t := range r.Tools {
		tools = append(tools, t.Function)
	}
	return withTools(msgs, tools), nil
}

// maxTokens returns the client's output limit (max_completion_tokens wins over
// max_tokens, as in vLLM), or nil.
func (r *chatRequest) maxTokens() *int {
	if r.MaxCompletionTokens != nil {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// promptTokens renders a completion prompt to token ids.
func (r *completionRequest) promptTokens() ([]uint32, *apiError) {
	raw := bytes.TrimSpace(r.Prompt)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("prompt", "prompt: %v", err)
		}
		return sim.Tokenize(nil, s), nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		if len(strs) != 1 {
			return nil, badRequest("prompt", "the simulator serves one prompt per request: got %d", len(strs))
		}
		return sim.Tokenize(nil, strs[0]), nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, badRequest("prompt", "prompt must be a string, a list of one string or a list of token ids")
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id > 1<<32-1 {
			return nil, badRequest("prompt", "token id %d out of range", id)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// blocksOf reads Anthropic content: a string (one text block) or a list of blocks.
func blocksOf(raw json.RawMessage, what string) (str string, blocks []anthropicBlock, isString bool, e *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, false, nil
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &str); err != nil {
			return "", nil, false, badRequest(what, "%s: %v", what, err)
		}
		return str, nil, true, nil
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, false, badRequest(what, "%s must be a string or a list of content blocks: %v", what, err)
	}
	return "", blocks, false, nil
}

// toolResultText reads a tool_result block's content: a string or a list of blocks
// whose text blocks are joined with "\n".
func toolResultText(raw json.RawMessage) string {
	s, blocks, isString, e := blocksOf(raw, "tool_result content")
	if e != nil {
		return ""
	}
	if isString {
		return s
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// chatMessages converts an Anthropic request to template messages the way vLLM
// converts it to an OpenAI chat request: the system prompt is the top-level system
// text blocks followed by any role "system" messages' text, joined with "" and without
// Claude Code's billing header block; tool_use blocks become tool calls; a user's
// tool_result blocks become "tool" messages placed before that user message's text;
// thinking and other blocks carry no text.
func (r *messagesRequest) chatMessages() ([]sim.ChatMessage, *apiError) {
	var system []string
	addSystem := func(raw json.RawMessage, what string) *apiError {
		s, blocks, isString, e := blocksOf(raw, what)
		if e != nil {
			return e
		}
		if isString {
			if s != "" {
				system = append(system, s)
			}
			return nil
		}
		for _, b := range blocks {
			if b.Type == "text" && b.Text != "" && !strings.HasPrefix(b.Text, billingHeaderPrefix) {
				system = append(system, b.Text)
			}
		}
		return nil
	}
	if e := addSystem(r.System, "system"); e != nil {
		return nil, e
	}
	for i, m := range r.Messages {
		if m.Role == "system" {
			if e := addSystem(m.Content, fmt.Sprintf("messages[%d].content", i)); e != nil {
				return nil, e
			}
		}
	}
	var msgs []sim.ChatMessage
	if len(system) > 0 {
		msgs = append(msgs, sim.ChatMessage{Role: "system", Content: strings.Join(system, "")})
	}
	for i, m := range r.Messages {
		role := m.Role
		switch role {
		case "system":
			continue
		case "user", "assistant":
		case "ctx", "msg": // Claude Code >= 2.1.154; vLLM maps them to user
			role = "user"
		default:
			return nil, badRequest("messages", "messages[%d]: role must be user, assistant or system: got %q", i, m.Role)
		}
		what := fmt.Sprintf("messages[%d].content", i)
		s, blocks, isString, e := blocksOf(m.Content, what)
		if e != nil {
			return nil, e
		}
		if isString {
			msgs = append(msgs, sim.ChatMessage{Role: role, Content: s})
			continue
		}
		var texts []string
		var calls string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text != "" {
					texts = append(texts, b.Text)
				}
			case "tool_use":
				args := "{}"
				if in := bytes.TrimSpace(b.Input); len(in) > 0 && string(in) != "null" {
					var c bytes.Buffer
					if json.Compact(&c, in) == nil {
						args = c.String()
					}
				}
				calls += renderToolCall(b.Name, args)
			case "tool_result":
				if role == "user" {
					msgs = append(msgs, sim.ChatMessage{Role: "tool", Content: toolResultText(b.Content)})
				} else {
					texts = append(texts, "Tool result: "+toolResultText(b.Content))
				}
			}
		}
		if role == "user" && len(texts) == 0 {
			continue
		}
		msgs = append(msgs, sim.ChatMessage{Role: role, Content: strings.Join(texts, "\n") + calls})
	}
	tools := make([]toolSpec, 0, len(r.Tools))
	for _, t := range r.Tools {
		tools = append(tools, toolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return withTools(msgs, tools), nil
}
