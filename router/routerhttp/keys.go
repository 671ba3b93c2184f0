package routerhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/lmwarden/warden/internal/wire"
)

// DefaultSessionHeaders are the extra header names read for a session key after
// X-Claude-Code-Session-Id and the body's metadata.user_id.
var DefaultSessionHeaders = []string{wire.HeaderSessionID}

// MaxKeyLen bounds a session key; longer values are cut (keys are hashed anyway, the
// bound only keeps a hostile header from costing hashing time).
const MaxKeyLen = 256

// KeySource says where a session key came from.
type KeySource uint8

const (
	KeyNone           KeySource = iota // no key found
	KeyClaudeHeader                    // X-Claude-Code-Session-Id
	KeyMetadataJSON                    // metadata.user_id, JSON form {"session_id": ...}
	KeyMetadataLegacy                  // metadata.user_id, legacy user_..._session_<uuid>
	KeyHeader                          // a configured header (X-Session-ID by default)
	KeyOpenAIUser                      // the OpenAI "user" field (when configured)
	KeyCodexHeader                     // the Codex CLI's session-id / thread-id (or older session_id / conversation_id)
	KeyPromptCacheKey                  // the Responses / chat body's prompt_cache_key
)

// String names the source for logs.
func (s KeySource) String() string {
	return [...]string{"none", "claude-header", "metadata-json", "metadata-legacy", "header", "openai-user", "codex-header", "prompt-cache-key"}[s]
}

// KeyConfig says where to look for session keys besides Claude Code's own.
type KeyConfig struct {
	// Headers are read in order after X-Claude-Code-Session-Id and metadata.user_id.
	// nil means DefaultSessionHeaders; an empty non-nil slice means none.
	Headers []string
	// UseOpenAIUser takes the OpenAI request field "user" as the session key, last.
	UseOpenAIUser bool
	// SplitSubagents gives a Claude Code subagent (header X-Claude-Code-Agent-Id)
	// its own key, session + "/agent/" + agent id, so it is placed on its own. By
	// default a subagent keeps its parent's session id and so its replica.
	SplitSubagents bool
	// FollowSubagents splits a subagent's key as SplitSubagents does and names
	// its parent's key (RequestInfo.ParentKey), so its first call starts on the
	// parent's replica while that replica is under the overflow threshold
	// (router.Facts.ParentKey).
	FollowSubagents bool
}

// RequestInfo is what the router reads from a request before routing it.
type RequestInfo struct {
	Model      string    // the body's "model" field; "" when absent
	SessionKey string    // "" when none was found
	Source     KeySource // where SessionKey came from
	// Stream: the body asks for a streamed response ("stream": true); what
	// keep-alive needs (hold.go).
	Stream bool
	// Continuing: the body's "messages" (Responses API: "input" items) already
	// carry an assistant message, a conversation past its first turn, which
	// admission never holds even when the router has forgotten its session
	// (hold.go).
	Continuing bool
	// ResponseID is the body's previous_response_id (Responses API), "" when
	// absent: the response the request continues.
	ResponseID string
	// NoStore: the body says "store": false, so the server keeps no response a
	// later request could continue (the router then learns no response id).
	NoStore bool
	// ParentKey: a subagent's parent session key when its key was split
	// (SplitSubagents, FollowSubagents), "" otherwise; FollowParent: under
	// FollowSubagents.
	ParentKey    string
	FollowParent bool
	// Agent: the X-Claude-Code-Agent-Id header of a subagent's request (""
	// none), whatever the subagent rule; Tools: the body's "tools" is a
	// non-empty list (router.Facts.Agent, router.Facts.Tools).
	Agent string
	Tools bool
}

// CodexSessionHeaders are the headers the Codex CLI names its conversation
// with, read in this order after Claude Code's sources: codex-cli 0.171.0
// sends session-id and thread-id (the same thread id); earlier releases sent
// session_id and conversation_id (docs/responses-api.md).
var CodexSessionHeaders = []string{wire.HeaderCodexSession, wire.HeaderCodexThread, wire.HeaderCodexLegacySession, wire.HeaderCodexConversation}

// ErrBadBody: a POST body that is not a JSON object (the proxy answers 400).
var ErrBadBody = errors.New("request body is not a JSON object")

// requestBody is the part of an OpenAI or Anthropic request body the router reads.
// Everything else (messages, tools: most of a 50 KB Claude Code body) is skipped.
type requestBody struct {
	Model    json.RawMessage
	Metadata json.RawMessage
	User     json.RawMessage
	// PromptCacheKey and PreviousResponseID: the Responses API's (the former
	// also on chat completions).
	PromptCacheKey     json.RawMessage
	PreviousResponseID json.RawMessage
	Store              json.RawMessage
	// Stream: "stream": true (OpenAI and Anthropic alike). Assistant: an
	// element of "messages" (or of the Responses API's "input") has "role":
	// "assistant" (a conversation past its first turn).
	Stream, Assistant bool
	// Tools: "tools" is a non-empty array (a coding agent's main-loop call;
	// Claude Code's side requests send none or [], its captured requests show).
	Tools bool
}

// readRequestBody checks that body is one valid JSON object (scanJSON, which
// accepts exactly what json.Valid accepts) and, in the same pass, picks its
// top-level "model", "metadata" and "user" members without decoding the rest: a
// Claude Code body is 50 KB to 1 MB, mostly conversation, and a full decode with
// encoding/json costs about 4x json.Valid. Member names match exactly (as vLLM's
// request models do, unlike encoding/json's case-insensitive match); the last of
// duplicated members wins.
func readRequestBody(body []byte) (requestBody, error) {
	var rb requestBody
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return rb, ErrBadBody
	}
	ok := scanJSON(trimmed, func(name, value []byte) {
		switch string(name) { // no allocation: the compiler optimizes this conversion
		case "model":
			rb.Model = value
		case "metadata":
			rb.Metadata = value
		case "user":
			rb.User = value
		case "prompt_cache_key":
			rb.PromptCacheKey = value
		case "previous_response_id":
			rb.PreviousResponseID = value
		case "store":
			rb.Store = value
		case "stream":
			rb.Stream = string(value) == "true"
		case "tools":
			rb.Tools = nonEmptyArray(value)
		}
	}, func(top, name, value []byte) {
		// Chat completions and Messages send "messages": [{"role": ...}]; the
		// Responses API's "input" items carry a role too.
		if (string(top) == "messages" || string(top) == "input") && string(name) == "role" && string(value) == `"assistant"` {
			rb.Assistant = true
		}
	})
	if !ok {
		return requestBody{}, fmt.Errorf("%w: invalid JSON%s", ErrBadBody, syntaxErrorAt(body))
	}
	return rb, nil
}

// syntaxErrorAt says where encoding/json finds body invalid (" at byte N: what"),
// for the error message; "" when it finds nothing to say. Only called on the error
// path, so its cost (a full json.Unmarshal validation pass) does not matter.
func syntaxErrorAt(body []byte) string {
	var se *json.SyntaxError
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); errors.As(err, &se) {
		return fmt.Sprintf(" at byte %d: %v", se.Offset, se)
	} else if err != nil {
		return ": " + err.Error()
	}
	return ""
}

// ExtractKey reads the model and the session key of a request, from its headers and
// its JSON body. Sources, first found wins (docs/router.md section 4):
//
//  1. header X-Claude-Code-Session-Id (Claude Code >= 2.1.86);
//  2. body metadata.user_id, a string: either a JSON document whose "session_id" is
//     taken (Claude Code >= 2.1.78), or the legacy
//     user_<hex>_account_<uuid or empty>_session_<uuid>, whose last uuid is taken;
//  3. the configured headers, in order (default X-Session-ID);
//  4. the OpenAI "user" field, when cfg.UseOpenAIUser.
//
// A subagent's request (X-Claude-Code-Agent-Id) keeps its parent's key unless
// cfg.SplitSubagents or cfg.FollowSubagents (both also set ParentKey). Keys are trimmed of spaces and cut at MaxKeyLen bytes.
//
// body may be empty (no key or model from it). A non-empty body that is not a JSON
// object gives an error wrapping ErrBadBody. Fields of unexpected types (a numeric
// model, a non-string user_id) are ignored, not errors: routing must not reject
// what the upstream may accept.
func ExtractKey(h http.Header, body []byte, cfg KeyConfig) (RequestInfo, error) {
	var info RequestInfo
	var rb requestBody
	if len(bytes.TrimSpace(body)) > 0 {
		var err error
		if rb, err = readRequestBody(body); err != nil {
			return info, err
		}
		info.Model = jsonString(rb.Model)
		info.ResponseID = cleanKey(jsonString(rb.PreviousResponseID))
		info.NoStore = string(bytes.TrimSpace(rb.Store)) == "false"
		info.Stream, info.Continuing, info.Tools = rb.Stream, rb.Assistant, rb.Tools
	}
	mdKey, mdSrc := metadataSession(rb.Metadata)
	switch {
	case setKey(&info, h.Get(wire.HeaderClaudeSession), KeyClaudeHeader):
	case setKey(&info, mdKey, mdSrc):
	case setCodexKey(&info, h):
	case setKey(&info, jsonString(rb.PromptCacheKey), KeyPromptCacheKey):
	default:
		hdrs := cfg.Headers
		if hdrs == nil {
			hdrs = DefaultSessionHeaders
		}
		for _, name := range hdrs {
			if setKey(&info, h.Get(name), KeyHeader) {
				break
			}
		}
		if info.SessionKey == "" && cfg.UseOpenAIUser {
			setKey(&info, jsonString(rb.User), KeyOpenAIUser)
		}
	}
	if info.SessionKey != "" {
		info.Agent = cleanKey(h.Get(wire.HeaderClaudeAgent))
	}
	if (cfg.SplitSubagents || cfg.FollowSubagents) && info.SessionKey != "" {
		if agent := info.Agent; agent != "" {
			info.ParentKey, info.FollowParent = info.SessionKey, cfg.FollowSubagents
			info.SessionKey = cleanKey(info.SessionKey + "/agent/" + agent)
		}
	}
	return info, nil
}

func setCodexKey(info *RequestInfo, h http.Header) bool {
	for _, name := range CodexSessionHeaders {
		if setKey(info, h.Get(name), KeyCodexHeader) {
			return true
		}
	}
	return false
}

func setKey(info *RequestInfo, v string, src KeySource) bool {
	v = cleanKey(v)
	if v == "" {
		return false
	}
	info.SessionKey, info.Source = v, src
	return true
}

func cleanKey(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > MaxKeyLen {
		v = cutRunes(v, MaxKeyLen)
	}
	return v
}

// cutRunes returns s cut to at most n bytes without splitting its last rune.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	j := len(s) - 1
	for j > 0 && j > len(s)-utf8.UTFMax && !utf8.RuneStart(s[j]) {
		j--
	}
	if j >= 0 && !utf8.FullRuneInString(s[j:]) {
		s = s[:j]
	}
	return s
}

// jsonString returns raw as a string when it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// metadataSession extracts the session id from an Anthropic metadata object.
func metadataSession(raw json.RawMessage) (string, KeySource) {
	if len(raw) == 0 || raw[0] != '{' {
		return "", KeyNone
	}
	// raw is a member of a validated body, so it is valid JSON.
	var userID json.RawMessage
	objectMembers(raw, func(name, value []byte) {
		if string(name) == "user_id" {
			userID = value
		}
	})
	uid := strings.TrimSpace(jsonString(userID))
	if strings.HasPrefix(uid, "{") {
		if !json.Valid([]byte(uid)) {
			return "", KeyNone
		}
		var sid json.RawMessage
		objectMembers([]byte(uid), func(name, value []byte) {
			if string(name) == "session_id" {
				sid = value
			}
		})
		return jsonString(sid), KeyMetadataJSON
	}
	return legacySession(uid), KeyMetadataLegacy
}

// legacySession parses user_<hex>_account_<uuid or empty>_session_<uuid> (Claude Code
// before 2.1.78) and returns the session uuid, or "" for any other shape.
func legacySession(uid string) string {
	if !strings.HasPrefix(uid, "user_") {
		return ""
	}
	acct := strings.Index(uid, "_account_")
	sess := strings.LastIndex(uid, "_session_")
	if acct < 0 || sess < acct {
		return ""
	}
	id := uid[sess+len("_session_"):]
	if !isUUIDish(id) {
		return ""
	}
	return id
}

// isUUIDish accepts 1..64 hex digits and dashes, the shape of the ids Claude Code
// sends; anything else is not taken as a session id.
func isUUIDish(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	hex := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			hex++
		case c == '-':
		default:
			return false
		}
	}
	return hex > 0
}

// Redact shortens a session key for logs: its first 6 bytes and its length, e.g.
// "80ea92…(36)". Keys of 8 bytes or fewer show nothing but their length. A key is
// never logged in full.
func Redact(key string) string {
	if key == "" {
		return "(none)"
	}
	if len(key) <= 8 {
		return fmt.Sprintf("…(%d)", len(key))
	}
	return fmt.Sprintf("%s…(%d)", cutRunes(key, 6), len(key))
}

// nonEmptyArray reports whether the JSON value v (valid, as scanJSON checked)
// is an array with at least one element.
func nonEmptyArray(v []byte) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 1 && v[0] == '[' && len(bytes.TrimSpace(v[1:len(v)-1])) > 0
}
