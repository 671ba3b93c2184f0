package simhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/sim"
)

// The OpenAI Responses API as vLLM serves it (vllm/entrypoints/openai/
// serving_responses.py, protocol.py ResponsesRequest/ResponsesResponse; facts and
// sources in docs/responses-api.md). The simulated model writes plain text, so every
// answer is one "message" output item with one "output_text" part.

// responsesRequest is the part of a Responses request the simulator reads. Store is
// a pointer because its default is true (protocol.py ResponsesRequest.store).
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Tools              []responsesTool `json:"tools"`
	PromptCacheKey     *string         `json:"prompt_cache_key"`
	Background         bool            `json:"background"`
}

// responsesTool is a Responses tool definition; only "function" tools carry a
// schema the chat template renders (Codex also sends "custom", "web_search", ...).
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// responsesItem is one input item: a message (type "message", or no type with a
// role), a function_call, a function_call_output, or a reasoning item (no text for
// the template).
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
}

func decodeResponses(body []byte) (*responsesRequest, *apiError) {
	var r responsesRequest
	if e := decodeJSON(body, &r); e != nil {
		return nil, e
	}
	if in := bytes.TrimSpace(r.Input); len(in) == 0 || string(in) == "null" {
		return nil, badRequest("input", "Field required: input")
	}
	return &r, nil
}

// partsText reads Responses content: a string or a list of parts whose input_text,
// output_text and text parts are joined with "\n".
func partsText(raw json.RawMessage, what string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("input", "%s: %v", what, err)
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest("input", "%s must be a string or a list of content parts: %v", what, err)
	}
	var texts []string
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// inputMessages converts the request's input to template messages
// (serving_responses.py _construct_input_messages): a string is one user message;
// items map message -> its role and text, function_call -> an assistant tool call,
// function_call_output -> a "tool" message.
func (r *responsesRequest) inputMessages() ([]sim.ChatMessage, *apiError) {
	raw := bytes.TrimSpace(r.Input)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("input", "input: %v", err)
		}
		return []sim.ChatMessage{{Role: "user", Content: s}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of items: %v", err)
	}
	msgs := make([]sim.ChatMessage, 0, len(items))
	for i, it := range items {
		what := fmt.Sprintf("input[%d].content", i)
		switch it.Type {
		case "message", "":
			if it.Role == "" {
				return nil, badRequest("input", "input[%d]: role is required", i)
			}
			text, e := partsText(it.Content, what)
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, sim.ChatMessage{Role: it.Role, Content: text})
		case "function_call":
			msgs = append(msgs, sim.ChatMessage{Role: "assistant", Content: renderToolCall(it.Name, it.Arguments)})
		case "function_call_output":
			text, e := partsText(it.Output, fmt.Sprintf("input[%d].output", i))
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, sim.ChatMessage{Role: "tool", Content: text})
		}
	}
	return msgs, nil
}

func (r *responsesRequest) toolSpecs() []toolSpec {
	var out []toolSpec
	for _, t := range r.Tools {
		if t.Type == "function" {
			out = append(out, toolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	return out
}

// storedResponse is what a server keeps of a stored response to continue from it:
// the conversation it answered (without the system message) and its output text
// (serving_responses.py msg_store and response_store).
type storedResponse struct {
	msgs   []sim.ChatMessage
	output string
}

// responseStore is one server's response store. vLLM keeps it in the API-server
// process's memory and never evicts (its FIXME); so does this, which is why it is
// off by default (Config.ResponsesStore).
type responseStore struct {
	mu sync.Mutex
	m  map[string]storedResponse
}

func (st *responseStore) get(id string) (storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	v, ok := st.m[id]
	return v, ok
}

func (st *responseStore) put(id string, v storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = make(map[string]storedResponse)
	}
	st.m[id] = v
}

// errResponseNotFound is vLLM's answer to an unknown previous_response_id
// (serving_responses.py _make_not_found_error).
func errResponseNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, errType: "invalid_request_error",
		message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// errBackgroundNeedsStore is vLLM's answer to background: true with the store off
// (serving_responses.py create_responses).
func errBackgroundNeedsStore() *apiError {
	return &apiError{status: http.StatusBadRequest, errType: "invalid_request_error",
		message: "This vLLM engine does not support `store=True` and therefore does not support the background mode. To enable these features, set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."}
}

// Response shapes (protocol.py ResponsesResponse, ResponseUsage; openai-python
// types.responses for the items). Field order follows vLLM's serialisation.

type responsesUsage struct {
	InputTokens         int                  `json:"input_tokens"`
	InputTokensDetails  responsesInputDetail `json:"input_tokens_details"`
	OutputTokens        int                  `json:"output_tokens"`
	OutputTokensDetails responsesOutDetail   `json:"output_tokens_details"`
	TotalTokens         int                  `json:"total_tokens"`
}

type responsesInputDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

type responsesOutDetail struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

func newResponsesUsage(prompt, completion, cached int) *responsesUsage {
	return &responsesUsage{InputTokens: prompt, InputTokensDetails: responsesInputDetail{CachedTokens: cached},
		OutputTokens: completion, TotalTokens: prompt + completion}
}

type outputText struct {
	Type        string      `json:"type"`
	Text        string      `json:"text"`
	Annotations []struct{}  `json:"annotations"`
	Logprobs    *[]struct{} `json:"logprobs,omitempty"` // only on content_part.added, as vLLM
}

type outputMessage struct {
	ID      string       `json:"id"`
	Content []outputText `json:"content"`
	Role    string       `json:"role"`
	Status  string       `json:"status"`
	Type    string       `json:"type"`
}

type responsesResponse struct {
	ID                 string          `json:"id"`
	CreatedAt          int64           `json:"created_at"`
	IncompleteDetails  *struct{}       `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	Metadata           *struct{}       `json:"metadata"`
	Model              string          `json:"model"`
	Object             string          `json:"object"`
	Output             []outputMessage `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	ToolChoice         string          `json:"tool_choice"`
	Tools              []responsesTool `json:"tools"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Status             string          `json:"status"`
	Store              bool            `json:"store"`
	Usage              *responsesUsage `json:"usage"`
}

// responsesEvent is one streamed event; the fields a type does not use are omitted.
type responsesEvent struct {
	Type           string             `json:"type"`
	SequenceNumber int                `json:"sequence_number"`
	Response       *responsesResponse `json:"response,omitempty"`
	OutputIndex    *int               `json:"output_index,omitempty"`
	ItemID         string             `json:"item_id,omitempty"`
	ContentIndex   *int               `json:"content_index,omitempty"`
	Item           *outputMessage     `json:"item,omitempty"`
	Part           *outputText        `json:"part,omitempty"`
	Delta          *string            `json:"delta,omitempty"`
	Text           *string            `json:"text,omitempty"`
	Logprobs       *[]struct{}        `json:"logprobs,omitempty"`
}

// handleResponses serves POST /v1/responses as vLLM's create_responses does: model
// check, store downgrade when the server's store is off, previous_response_id lookup
// (404 when unknown), then a streamed or a whole answer.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r, decodeResponses)
	if !ok {
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeOpenAIError(w, e)
		return
	}
	wantStore := req.Store == nil || *req.Store
	if req.Background {
		if wantStore && !s.cfg.ResponsesStore {
			writeOpenAIError(w, errBackgroundNeedsStore())
		} else {
			writeOpenAIError(w, badRequest("background", "the simulator does not serve background responses"))
		}
		return
	}
	store := wantStore && s.cfg.ResponsesStore
	var prev *storedResponse
	if req.PreviousResponseID != nil {
		p, found := s.responses.get(*req.PreviousResponseID)
		if !found {
			writeOpenAIError(w, errResponseNotFound(*req.PreviousResponseID))
			return
		}
		prev = &p
	}
	input, e := req.inputMessages()
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	var conv []sim.ChatMessage
	if prev != nil {
		conv = append(conv, prev.msgs...)
		conv = append(conv, sim.ChatMessage{Role: "assistant", Content: prev.output})
	}
	conv = append(conv, input...)
	msgs := conv
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append([]sim.ChatMessage{{Role: "system", Content: *req.Instructions}}, conv...)
	}
	msgs = withTools(msgs, req.toolSpecs())
	prompt := sim.RenderChat(nil, msgs, true)
	id := "resp_" + s.nextID()
	sub, e := s.submit(r, id, prompt, req.MaxOutputTokens, sampling{})
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	defer sub.done()
	base := responsesResponse{
		ID: id, CreatedAt: time.Now().Unix(), Instructions: req.Instructions, Model: s.cfg.Model,
		Object: "response", Output: []outputMessage{}, ParallelToolCalls: true, ToolChoice: "auto",
		Tools: req.Tools, MaxOutputTokens: req.MaxOutputTokens, PreviousResponseID: req.PreviousResponseID,
		Status: "in_progress", Store: store,
	}
	if base.Tools == nil {
		base.Tools = []responsesTool{}
	}
	keep := func(text string) {
		if store {
			s.responses.put(id, storedResponse{msgs: conv, output: text})
		}
	}
	if req.Stream {
		s.streamResponses(w, r, sub, base, keep)
		return
	}
	out, cached, err := sub.collect(r.Context())
	if err != nil {
		if r.Context().Err() == nil {
			writeOpenAIError(w, errUnavailable(err))
		}
		return
	}
	text := sim.Detokenize(out)
	keep(text)
	writeJSON(w, http.StatusOK, completedResponse(base, "msg_"+id, text, len(out), cached, sub))
}

// completedResponse is base finished: one completed message, status "completed"
// (vLLM's non-Harmony path reports "completed" also when max_output_tokens cut the
// text, responses_full_generator), and usage.
func completedResponse(base responsesResponse, itemID, text string, completion, cached int, sub *submission) responsesResponse {
	base.Output = []outputMessage{{ID: itemID, Content: []outputText{{Type: "output_text", Text: text, Annotations: []struct{}{}}},
		Role: "assistant", Status: "completed", Type: "message"}}
	base.Status = "completed"
	base.Usage = newResponsesUsage(sub.prompt, completion, cached)
	return base
}

// streamResponses writes the event sequence of _process_simple_streaming_events:
// response.created and response.in_progress at once; at the first token
// response.output_item.added and response.content_part.added; one
// response.output_text.delta per token; then output_text.done, content_part.done,
// output_item.done and response.completed with usage. An engine failure mid-stream
// is an "error" event (OpenAI's streaming error event) after which the stream ends.
func (s *Server) streamResponses(w http.ResponseWriter, r *http.Request, sub *submission, base responsesResponse, keep func(string)) {
	sw := startSSE(w)
	seq := 0
	send := func(ev responsesEvent) error {
		ev.SequenceNumber = seq
		seq++
		return sw.send(ev.Type, mustJSON(ev))
	}
	zero := 0
	itemID := "msg_" + base.ID
	if send(responsesEvent{Type: wire.EventResponseCreated, Response: &base}) != nil ||
		send(responsesEvent{Type: wire.EventResponseInProgress, Response: &base}) != nil {
		return
	}
	var text strings.Builder
	completion, cached := 0, 0
	started := false
	err := sub.follow(r.Context(), func(u update) error {
		if !u.started {
			return nil
		}
		cached = u.cachedTokens
		for _, t := range u.tokens {
			if !started {
				started = true
				item := outputMessage{ID: itemID, Content: []outputText{}, Role: "assistant", Status: "in_progress", Type: "message"}
				if err := send(responsesEvent{Type: wire.EventOutputItemAdded, OutputIndex: &zero, Item: &item}); err != nil {
					return err
				}
				noLogprobs := []struct{}{}
				part := outputText{Type: "output_text", Annotations: []struct{}{}, Logprobs: &noLogprobs}
				if err := send(responsesEvent{Type: wire.EventContentPartAdded, OutputIndex: &zero, ItemID: itemID, ContentIndex: &zero, Part: &part}); err != nil {
					return err
				}
			}
			piece := sim.DetokenizeToken(t, completion == 0)
			completion++
			text.WriteString(piece)
			empty := []struct{}{}
			if err := send(responsesEvent{Type: wire.EventOutputTextDelta, OutputIndex: &zero, ItemID: itemID, ContentIndex: &zero, Delta: &piece, Logprobs: &empty}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if r.Context().Err() == nil {
			_ = sw.send("error", mustJSON(struct {
				Type           string  `json:"type"`
				SequenceNumber int     `json:"sequence_number"`
				Code           *string `json:"code"`
				Message        string  `json:"message"`
				Param          *string `json:"param"`
			}{Type: "error", SequenceNumber: seq, Message: err.Error()}))
		}
		return
	}
	full := text.String()
	keep(full)
	done := completedResponse(base, itemID, full, completion, cached, sub)
	if started {
		empty := []struct{}{}
		part := done.Output[0].Content[0]
		if send(responsesEvent{Type: wire.EventOutputTextDone, OutputIndex: &zero, ItemID: itemID, ContentIndex: &zero, Text: &full, Logprobs: &empty}) != nil ||
			send(responsesEvent{Type: wire.EventContentPartDone, OutputIndex: &zero, ItemID: itemID, ContentIndex: &zero, Part: &part}) != nil ||
			send(responsesEvent{Type: wire.EventOutputItemDone, OutputIndex: &zero, Item: &done.Output[0]}) != nil {
			return
		}
	} else {
		done.Output = []outputMessage{}
	}
	_ = send(responsesEvent{Type: wire.EventResponseCompleted, Response: &done})
}
