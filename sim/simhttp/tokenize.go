package simhttp

import (
	"net/http"

	"github.com/lmwarden/warden/sim"
)

// tokenizeRequest is vLLM's POST /tokenize body (vllm/entrypoints/openai/protocol.py
// TokenizeCompletionRequest or TokenizeChatRequest): a prompt, or chat messages
// rendered with the chat template (add_generation_prompt defaults to true).
type tokenizeRequest struct {
	Model               string          `json:"model"`
	Prompt              *string         `json:"prompt"`
	Messages            []openAIMessage `json:"messages"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Tools               []openAITool    `json:"tools"`
}

// handleTokenize serves POST /tokenize as vLLM does: {"count", "max_model_len",
// "tokens"}; a body with neither prompt nor messages is a 400.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r, func(b []byte) (*tokenizeRequest, *apiError) {
		var t tokenizeRequest
		if e := decodeJSON(b, &t); e != nil {
			return nil, e
		}
		if t.Prompt == nil && t.Messages == nil {
			return nil, badRequest("prompt", "Field required: prompt or messages")
		}
		return &t, nil
	})
	if !ok {
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeOpenAIError(w, e)
		return
	}
	var toks []uint32
	if req.Prompt != nil {
		toks = sim.Tokenize(nil, *req.Prompt)
	} else {
		msgs, e := (&chatRequest{Messages: req.Messages, Tools: req.Tools}).chatMessages()
		if e != nil {
			writeOpenAIError(w, e)
			return
		}
		gen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		toks = sim.RenderChat(nil, msgs, gen)
	}
	if toks == nil {
		toks = []uint32{}
	}
	writeJSON(w, http.StatusOK, struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}{len(toks), s.maxModelLen, toks})
}
