package routerhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// StatusClientClosed is the status logged when the client went away before the
// response ended (nginx's 499; nothing reaches the client).
const StatusClientClosed = 499

var (
	errUnknownModel = errors.New("model not served")
	errNotFound     = errors.New("no such endpoint")
	errMethod       = errors.New("method not allowed")
	errTooLarge     = errors.New("request body too large")
	errBodyTimeout  = errors.New("request body too slow")
	errBodyMemory   = errors.New("router's body memory is full")
)

// bodyMemoryRetryAfter is the Retry-After of a 503 for a full body memory:
// bodies in transit free their memory as they finish, most within a second.
const bodyMemoryRetryAfter = time.Second

// StatusFor maps an error met while handling a request to the HTTP status the
// router answers, in one place: no replica or shutdown 503, upstream timeout
// 504, client gone 499, other upstream error 502; plus the request's own faults:
// bad body 400, unknown model or path 404, wrong method 405, body not received
// within the body read timeout 408, body too large 413, body memory full 503.
// clientGone says the client's context ended.
func StatusFor(err error, clientGone bool) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrBadBody):
		return http.StatusBadRequest
	case errors.Is(err, errUnknownModel), errors.Is(err, errNotFound):
		return http.StatusNotFound
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed
	case errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errBodyTimeout):
		return http.StatusRequestTimeout
	case errors.Is(err, errBodyMemory):
		return http.StatusServiceUnavailable
	case errors.Is(err, router.ErrNoReplica), errors.Is(err, ErrShutdown):
		return http.StatusServiceUnavailable
	case clientGone:
		return StatusClientClosed
	case isTimeout(err):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isDialError says the connection to the upstream was never made (refused,
// unreachable, dial timeout): the request certainly did not reach it.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// clientHungUp says a read of the client's request body failed because the
// client's connection ended before the body did (the peer closed or reset it): a
// client cancellation (499), not a malformed body (400). net/http reports a
// body cut short of its Content-Length or last chunk as io.ErrUnexpectedEOF.
func clientHungUp(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, context.Canceled)
}

// apiKind is the API shape of a path, for error bodies and stream error events.
type apiKind uint8

const (
	apiOpenAI apiKind = iota
	apiAnthropic
	// apiResponses: OpenAI's Responses API (/v1/responses): OpenAI's error body,
	// its own in-stream error event (streamErrorFor).
	apiResponses
)

func apiFor(path string) apiKind {
	switch {
	case strings.HasPrefix(path, wire.PathMessages):
		return apiAnthropic
	case path == wire.PathResponses:
		return apiResponses
	}
	return apiOpenAI
}

// errorBody renders an error response in the API's own shape: OpenAI
// {"error":{"message","type","param","code"}} (as vLLM's ErrorResponse), Anthropic
// {"type":"error","error":{"type","message"}}.
func errorBody(api apiKind, status int, msg string) []byte {
	var v any
	if api == apiAnthropic {
		v = map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": msg}}
	} else {
		v = map[string]any{"error": map[string]any{"message": msg, "type": openAIErrorType(status), "param": nil, "code": status}}
	}
	b, _ := json.Marshal(v)
	return b
}

func anthropicErrorType(status int) string {
	switch status {
	case 400, 405:
		return "invalid_request_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	case 408, 504:
		return "timeout_error"
	}
	return "api_error"
}

func openAIErrorType(status int) string {
	switch status {
	case 400, 405, 413:
		return "invalid_request_error"
	case 404:
		return "not_found_error"
	case 429:
		return "rate_limit_exceeded"
	case 503:
		return "service_unavailable"
	case 408, 504:
		return "timeout"
	}
	return "upstream_error"
}

// writeError answers with an error in the API's shape.
func writeError(w http.ResponseWriter, api apiKind, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	w.Write(errorBody(api, status, msg))
}

// streamErrorEvent is the SSE event that ends a client's stream when the upstream
// stream broke (streamErrorFor with 502).
func streamErrorEvent(api apiKind, msg string) []byte {
	return streamErrorFor(api, http.StatusBadGateway, msg)
}

// streamErrorFor is the SSE event that ends a client's stream with the error
// a response not yet started would have had as its status (errorBody's shape):
// OpenAI "data: {"error":...}" followed by "data: [DONE]", as vLLM ends a 200
// stream that failed (vllm/entrypoints/openai/serving_chat.py
// chat_completion_stream_generator: create_streaming_error_response's
// {"error": {"message", "type", "code"}} chunk, then the final [DONE]; the
// OpenAI SDKs raise APIError on a data event with an "error" member,
// openai-python src/openai/_streaming.py); Anthropic "event: error" with
// {"type":"error","error":{"type","message"}}, after which the Messages API
// sends nothing ("Streaming Messages", docs.anthropic.com, Error events: e.g.
// overloaded_error, "which would normally correspond to an HTTP 529");
// Responses "event: error" with {"type":"error","code","message","param",
// "sequence_number"}, the Responses API's error event (OpenAI API reference,
// Responses streaming events, "error"), after which the stream ends (the
// Codex CLI reports it; codex-rs/codex-api/src/sse/responses.rs).
func streamErrorFor(api apiKind, status int, msg string) []byte {
	switch api {
	case apiAnthropic:
		return fmt.Appendf(nil, "event: error\ndata: %s\n\n", errorBody(api, status, msg))
	case apiResponses:
		b, _ := json.Marshal(map[string]any{"type": wire.EventError, "code": openAIErrorType(status), "message": msg, "param": nil, "sequence_number": 0})
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", wire.EventError, b)
	}
	return fmt.Appendf(nil, "data: %s\n\ndata: [DONE]\n\n", errorBody(api, status, msg))
}
