package simhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// apiError is an error answered to a client, in vLLM's terms (vllm/entrypoints/openai/
// engine/serving.py create_error_response): an HTTP status, an error type named after
// the Python exception class, an optional parameter name and a message.
type apiError struct {
	status  int
	errType string
	param   string // "" = null
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.errType, e.message) }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, errType: "BadRequestError", param: param, message: fmt.Sprintf(format, args...)}
}

// errModelNotFound is vLLM's answer to an unknown model (OpenAIServing._check_model).
func errModelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, errType: "NotFoundError", param: "model",
		message: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// errInputTooLong is vLLM's answer when the prompt alone reaches max_model_len
// (OpenAIServing._validate_input).
func errInputTooLong(maxModelLen, promptTokens int) *apiError {
	return badRequest("input_tokens", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.",
		maxModelLen, promptTokens)
}

// errMaxTokensTooLarge is vLLM's answer when prompt + max_tokens exceeds max_model_len
// (OpenAIServing._validate_input).
func errMaxTokensTooLarge(maxTokens, maxModelLen, promptTokens int) *apiError {
	return badRequest("max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
		maxTokens, maxModelLen, promptTokens, maxTokens, maxModelLen, promptTokens)
}

func errUnavailable(err error) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, errType: "ServiceUnavailableError", message: err.Error()}
}

// openAIErrorBody is vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}
// with code the HTTP status (vllm/entrypoints/openai/engine/protocol.py ErrorInfo).
type openAIErrorBody struct {
	Error openAIErrorInfo `json:"error"`
}

type openAIErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func (e *apiError) openAI() openAIErrorBody {
	var p *string
	if e.param != "" {
		p = &e.param
	}
	return openAIErrorBody{Error: openAIErrorInfo{Message: e.message, Type: e.errType, Param: p, Code: e.status}}
}

// anthropicErrorBody is vLLM's AnthropicErrorResponse: {"type":"error","error":{"type",
// "message"}} (vllm/entrypoints/anthropic/api_router.py translate_error_response).
type anthropicErrorBody struct {
	Type  string             `json:"type"`
	Error anthropicErrorInfo `json:"error"`
}

type anthropicErrorInfo struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *apiError) anthropic() anthropicErrorBody {
	return anthropicErrorBody{Type: "error", Error: anthropicErrorInfo{Type: e.errType, Message: e.message}}
}

// writeJSON answers status with v as the JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeOpenAIError(w http.ResponseWriter, e *apiError) { writeJSON(w, e.status, e.openAI()) }

func writeAnthropicError(w http.ResponseWriter, e *apiError) { writeJSON(w, e.status, e.anthropic()) }
