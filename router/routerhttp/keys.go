package routerhttp

import (
	"bytes"
	"encoding/binary"
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

// maxJSONDepth is the deepest nesting of objects and arrays json.Valid accepts
// (encoding/json scanner.go maxNestingDepth).
const maxJSONDepth = 10000

// validJSON reports whether b is exactly one JSON value (RFC 8259) with optional
// surrounding whitespace, accepting exactly what json.Valid accepts: string bytes
// are not checked for UTF-8 validity (only control bytes below 0x20 are refused),
// and nesting deeper than maxJSONDepth is refused. It exists for speed: json.Valid
// steps a state machine through a function call per byte (about 300 MB/s here,
// ~90% of ExtractKey on a Claude Code body), while most of a request body is
// string content, which validJSON skips 8 bytes at a time. FuzzValidJSON checks it
// against json.Valid.
func validJSON(b []byte) bool { return scanJSON(b, nil, nil) }

// scanJSON is validJSON that also calls visit, when not nil, with the name
// (unescaped) and raw value of each member of a top-level object, in order, as it
// passes them; and visitItem, when not nil, with the name of the top-level
// member, the name (unescaped) and the raw value of each member of an object
// that is an element of that member's array ("messages": [{"role": ...}]). On
// invalid input it returns false, possibly after some visits.
func scanJSON(b []byte, visit func(name, value []byte), visitItem func(top, name, value []byte)) bool {
	var (
		depth     [64]byte
		stack     = depth[:0] // open containers, '{' or '['
		name      []byte      // top-level member being read (visit, visitItem)
		valStart  int         // where its value starts
		item      []byte      // member of an array element being read (visitItem)
		itemStart int         // where its value starts
	)
	inItem := func() bool { return len(stack) == 3 && stack[1] == '[' && stack[2] == '{' }
	i := skipSpace(b, 0)
	// member reads an object member's name and colon at b[i], leaving i at its
	// value; for a top-level member it notes the name and where the value starts.
	member := func() bool {
		ns := i
		if i = validMemberName(b, i); i < 0 {
			return false
		}
		if (visit != nil || visitItem != nil) && len(stack) == 1 {
			name, valStart = memberName(b, ns), i
		} else if visitItem != nil && inItem() {
			item, itemStart = memberName(b, ns), i
		}
		return true
	}
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '{', '[':
			if len(stack) == maxJSONDepth {
				return false
			}
			open := b[i]
			stack = append(stack, open)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == open+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if open == '{' && !member() {
				return false
			}
			continue
		case '"':
			i = validString(b, i)
		case 't':
			i = validLiteral(b, i, "true")
		case 'f':
			i = validLiteral(b, i, "false")
		case 'n':
			i = validLiteral(b, i, "null")
		default:
			i = validNumber(b, i)
		}
		if i < 0 {
			return false
		}
		// A value ended at b[i-1], inside stack's last container: close
		// containers, or a comma and the next value.
		for {
			if visit != nil && len(stack) == 1 && stack[0] == '{' {
				visit(name, b[valStart:i])
			} else if visitItem != nil && inItem() && stack[0] == '{' {
				visitItem(name, item, b[itemStart:i])
			}
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			open := stack[len(stack)-1]
			if b[i] == open+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
			if open == '{' && !member() {
				return false
			}
			break
		}
	}
}

// memberName returns the name, unescaped, of the member whose name starts at
// b[i] == '"' (checked by validMemberName).
func memberName(b []byte, i int) []byte {
	end := validString(b, i)
	name := b[i+1 : end-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		if json.Unmarshal(b[i:end], &s) == nil {
			name = []byte(s)
		}
	}
	return name
}

// validMemberName checks an object member's name and colon starting at b[i] and
// returns the index of its value (after whitespace), or -1.
func validMemberName(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = validString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// SWAR constants: a byte of each in every lane of a uint64.
const (
	lanes01 = 0x0101010101010101
	lanes80 = 0x8080808080808080
)

// plainWord reports whether none of the 8 bytes of w is '"', '\' or below 0x20,
// the bytes that end a run of plain string content ("Bit Twiddling Hacks",
// Anderson: "determine if a word has a byte less than n" and "has a zero byte";
// the tests have no false negatives, and a false positive only sends the word to
// the byte loop).
func plainWord(w uint64) bool {
	quote := w ^ (lanes01 * '"')
	bslash := w ^ (lanes01 * '\\')
	hit := (quote - lanes01) &^ quote
	hit |= (bslash - lanes01) &^ bslash
	hit |= (w - lanes01*0x20) &^ w
	return hit&lanes80 == 0
}

// validString checks the JSON string starting at b[i] == '"' and returns the index
// just past its closing quote, or -1.
func validString(b []byte, i int) int {
	i++
	for {
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default: // a control byte
			return -1
		}
	}
}

// validLiteral checks that lit (true, false, null) starts at b[i] and returns the
// index past it, or -1. What follows is checked by the caller.
func validLiteral(b []byte, i int, lit string) int {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return -1
	}
	return i + len(lit)
}

// validNumber checks the number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// starting at b[i] and returns the index past it, or -1.
func validNumber(b []byte, i int) int {
	digits := func(i int) int { // at least one digit
		j := i
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	default:
		if b[i] < '1' || b[i] > '9' {
			return -1
		}
		i = digits(i)
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}

// objectMembers calls visit with the name (unescaped) and raw value of each member
// of obj, which must be a valid JSON object (checked by the caller with json.Valid);
// on anything else it stops without panicking.
func objectMembers(obj []byte, visit func(name, value []byte)) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return // '}' or malformed
		}
		ks := i
		i = skipString(obj, i)
		name := obj[ks+1 : max(ks+1, i-1)]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			if json.Unmarshal(obj[ks:i], &s) == nil {
				name = []byte(s)
			}
		}
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipSpace(obj, i+1)
		vs := i
		i = skipValue(obj, i)
		if i > len(obj) || i <= vs {
			return
		}
		visit(name, obj[vs:i])
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b) + 1
		}
		i += j
		// The quote is escaped when an odd number of backslashes precede it.
		bs := 0
		for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			return i
		}
	}
	return len(b) + 1
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b) + 1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b) + 1
	}
	for i < len(b) { // number, true, false, null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
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
		info.Stream, info.Continuing = rb.Stream, rb.Assistant
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
	if (cfg.SplitSubagents || cfg.FollowSubagents) && info.SessionKey != "" {
		if agent := cleanKey(h.Get(wire.HeaderClaudeAgent)); agent != "" {
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
