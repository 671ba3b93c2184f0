package routerhttp

import (
	"bytes"
	"encoding/json"
)

// maxUsageLine bounds the bytes usageScanner keeps of one SSE line that spans
// several reads; a longer line is skipped (a usage event is a few hundred bytes).
const maxUsageLine = 1 << 20

// usageScanner picks the token usage out of an SSE response as it streams past,
// for Balancer.ObserveCache: it looks only at "data:" lines that contain
// "usage" and decodes those. It understands both APIs' shapes:
//
//   - OpenAI chat/completions (the final chunk with stream_options.include_usage):
//     usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens (vLLM with
//     --enable-prompt-tokens-details);
//   - Anthropic messages (message_start's message.usage, message_delta's usage):
//     the prompt is input_tokens + cache_read_input_tokens +
//     cache_creation_input_tokens, the cached part cache_read_input_tokens
//     (Anthropic's semantics; vLLM's own server sends input_tokens only);
//   - OpenAI Responses (response.created's and response.completed's
//     response, or the whole response object): usage.input_tokens is the whole
//     prompt, usage.input_tokens_details.cached_tokens the cached part
//     (vLLM serving_responses.py ResponseUsage); the response's id is kept too
//     (responseID, for Balancer.LearnResponse).
//
// The last usage seen wins. A stream without a cache count yields nothing.
//
// A non-streaming response (one JSON document: OpenAI's chat.completion or
// completion object, Anthropic's message object, each with a top-level "usage"
// of the shapes above) goes through feedJSON and finishJSON instead: the body is
// kept up to maxUsageLine bytes and decoded once it has ended; a larger body is
// not read for usage.
type usageScanner struct {
	pending    []byte // the current line so far, when it spans reads; the body so far for JSON
	skip       bool   // the current line (or JSON body) outgrew maxUsageLine
	prompt     int
	cached     int
	haveCached bool
	output     int // completion / output tokens, for the trace recorder
	// streamErr is the message of an error event in a 200 stream (vLLM's
	// `data: {"error": {...}}`, Anthropic's `{"type": "error", ...}`), ""
	// when none came: the engine failed the request after the headers.
	streamErr  string
	responseID string // a Responses API response's id, "" when none was seen
	// onID, when set, is called when responseID is first seen or changes, from
	// inside feed/feedJSON: before the bytes that carry it reach the client.
	onID func(id string)
}

// setID records a Responses API response id.
func (u *usageScanner) setID(id string) {
	if id == "" || id == u.responseID {
		return
	}
	u.responseID = id
	if u.onID != nil {
		u.onID(id)
	}
}

// idMarker starts a Responses object's serialization (vLLM and OpenAI both put
// "id" first); earlyID reads it from a JSON body's first bytes so the id is
// known before the body has passed (finishJSON then confirms it).
var idMarker = []byte(`{"id":"`)

func (u *usageScanner) earlyID() {
	if u.responseID != "" || u.onID == nil {
		return
	}
	b := bytes.TrimLeft(u.pending, " \t\r\n")
	if !bytes.HasPrefix(b, idMarker) {
		return
	}
	b = b[len(idMarker):]
	if end := bytes.IndexByte(b, '"'); end > 0 && !bytes.ContainsRune(b[:end], '\\') {
		u.setID(string(b[:end]))
	}
}

// feedJSON takes the next bytes of a non-streaming JSON response.
func (u *usageScanner) feedJSON(b []byte) {
	if u.skip {
		return
	}
	if len(u.pending)+len(b) > maxUsageLine {
		u.skip, u.pending = true, nil
		return
	}
	u.pending = append(u.pending, b...)
	u.earlyID()
}

// finishJSON decodes the body given to feedJSON, once it has ended. A body that
// is not JSON, or has no usage, yields nothing.
func (u *usageScanner) finishJSON() {
	if u.skip || !bytes.Contains(u.pending, usageMarker) {
		u.pending = nil
		return
	}
	var p usageProbe
	if json.Unmarshal(u.pending, &p) == nil {
		u.use(p.Usage)
		if p.Object == "response" {
			u.setID(p.ID)
		}
	}
	u.pending = nil
}

// feed takes the next bytes of the stream.
func (u *usageScanner) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !u.skip {
				if len(u.pending)+len(b) > maxUsageLine {
					u.skip, u.pending = true, u.pending[:0]
				} else {
					u.pending = append(u.pending, b...)
				}
			}
			return
		}
		line := b[:i]
		if len(u.pending) > 0 {
			u.pending = append(u.pending, line...)
			line = u.pending
		}
		if !u.skip {
			u.line(line)
		}
		u.pending, u.skip = u.pending[:0], false
		b = b[i+1:]
	}
}

var (
	dataPrefix  = []byte("data:")
	usageMarker = []byte(`"usage"`)
	errorMarker = []byte(`"error"`)
)

// errorProbe is what marks an SSE data line as an error event: a top-level
// "error" object or string (OpenAI and vLLM streams), or "type" / "object"
// "error" (Anthropic's error event, older vLLM).
type errorProbe struct {
	Error  json.RawMessage `json:"error"`
	Type   string          `json:"type"`
	Object string          `json:"object"`
}

type usageFields struct {
	PromptTokens  *int `json:"prompt_tokens"`
	PromptDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokens  *int `json:"input_tokens"`
	InputDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// Output: OpenAI completion_tokens, Anthropic and Responses output_tokens.
	CompletionTokens *int `json:"completion_tokens"`
	OutputTokens     *int `json:"output_tokens"`
	CacheRead        *int `json:"cache_read_input_tokens"`
	CacheCreate      *int `json:"cache_creation_input_tokens"`
}

type usageProbe struct {
	Usage   *usageFields `json:"usage"`
	Message *struct {
		Usage *usageFields `json:"usage"`
	} `json:"message"`
	// Responses API: the response object itself (non-streaming), or inside
	// response.* events.
	ID       string `json:"id"`
	Object   string `json:"object"`
	Response *struct {
		ID    string       `json:"id"`
		Usage *usageFields `json:"usage"`
	} `json:"response"`
}

// line handles one complete line (without its newline).
func (u *usageScanner) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte{'\r'})
	if !bytes.HasPrefix(l, dataPrefix) {
		return
	}
	if u.streamErr == "" && bytes.Contains(l, errorMarker) {
		data := bytes.TrimSpace(l[len(dataPrefix):])
		var e errorProbe
		if json.Unmarshal(data, &e) == nil && (len(e.Error) > 0 && string(e.Error) != "null" || e.Type == "error" || e.Object == "error") {
			if u.streamErr = errorMessage(data); u.streamErr == "" {
				u.streamErr = "error event"
			}
		}
	}
	if !bytes.Contains(l, usageMarker) {
		return
	}
	var p usageProbe
	if json.Unmarshal(bytes.TrimSpace(l[len(dataPrefix):]), &p) != nil {
		return
	}
	u.use(p.Usage)
	if p.Message != nil {
		u.use(p.Message.Usage)
	}
	if p.Response != nil {
		u.use(p.Response.Usage)
		u.setID(p.Response.ID)
	}
}

func (u *usageScanner) use(f *usageFields) {
	if f != nil && f.CompletionTokens != nil {
		u.output = *f.CompletionTokens
	}
	if f != nil && f.OutputTokens != nil {
		u.output = *f.OutputTokens
	}
	switch {
	case f == nil:
	case f.PromptTokens != nil:
		u.prompt = *f.PromptTokens
		if f.PromptDetails != nil && f.PromptDetails.CachedTokens != nil {
			u.cached, u.haveCached = *f.PromptDetails.CachedTokens, true
		}
	case f.InputTokens != nil && f.InputDetails != nil:
		u.prompt = *f.InputTokens
		if f.InputDetails.CachedTokens != nil {
			u.cached, u.haveCached = *f.InputDetails.CachedTokens, true
		}
	case f.InputTokens != nil:
		read, create := 0, 0
		if f.CacheRead != nil {
			read = *f.CacheRead
			u.cached, u.haveCached = read, true
		}
		if f.CacheCreate != nil {
			create = *f.CacheCreate
		}
		u.prompt = *f.InputTokens + read + create
	}
}

// result returns the prompt and cached token counts of the stream, and whether
// both were reported.
func (u *usageScanner) result() (prompt, cached int, ok bool) {
	return u.prompt, u.cached, u.prompt > 0 && u.haveCached
}
