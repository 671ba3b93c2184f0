package sim

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The simulated tokenizer needs no vocabulary file. Text is split on Unicode white
// space (strings.Fields rules) into words; a word of at most PieceLen bytes is one
// token, a longer word is cut into pieces of PieceLen bytes (never inside a UTF-8
// sequence, so a piece may be up to 3 bytes shorter), one token each. A token id is
// a stable hash of the piece: FNV-1a 64 folded to 32 bits (high xor low), moved out
// of the reserved range [0, NumReservedTokens). White space itself produces no token.
//
// With PieceLen 4 a word costs one token plus one per further 4 bytes. On the
// project's English planning notes this gives 1.57 tokens per word, 3.7 characters per
// token, and on Go source 3.8 characters per token: the same order as BPE
// tokenizers (about 4 characters per token for English prose). The exact ratio does
// not matter to the engine, which only sees token ids and counts.
const (
	PieceLen          = 4
	NumReservedTokens = 16
)

// Reserved (special) token ids. They are never produced by Tokenize; Detokenize
// renders them as their ChatML text.
const (
	TokenIMStart uint32 = 1 // <|im_start|>
	TokenIMEnd   uint32 = 2 // <|im_end|>
	TokenNewline uint32 = 3 // "\n" after the role and after <|im_end|>
)

// genWords is the fixed list the engine draws its output tokens from. Every word is
// at most PieceLen bytes, so it is exactly one token, and its id is known: that makes
// Detokenize of engine output exact. Ids are checked for collisions by the tests.
var genWords = [...]string{
	"the", "of", "and", "to", "a", "in", "is", "it", "you", "that",
	"he", "was", "for", "on", "are", "with", "as", "his", "they", "be",
	"at", "one", "have", "this", "from", "or", "had", "by", "hot", "word",
	"but", "what", "some", "we", "can", "out", "were", "all", "when", "up",
	"use", "your", "how", "said", "an", "each", "she", "do", "if", "will",
	"way", "many", "then", "them", "like", "so", "her", "long", "make", "see",
	"him", "two", "has", "look", "more", "day", "go", "come", "did", "no",
	"most", "my", "over", "know", "than", "call", "who", "may", "down", "side",
	"been", "now", "find", "any", "new", "work", "part", "take", "get", "made",
	"live", "back", "only", "man", "year", "came", "show", "good", "me", "give",
	"our", "name", "very", "just", "form", "much", "say", "help", "low", "line",
	"turn", "same", "move", "boy", "old", "too", "does", "tell", "set", "want",
	"air", "well", "also", "play", "end", "put", "home", "read", "hand", "port",
	"add", "even", "land", "here", "must", "big", "high", "such", "act", "why",
	"ask", "men", "went", "kind", "off", "need", "try", "us", "near", "self",
	"head", "own", "page", "grow", "plan", "food", "sun", "four", "let", "keep",
	"eye", "last", "door", "city", "tree", "hard", "star", "saw", "far", "sea",
	"draw", "left", "late", "run", "don", "stop", "open", "seem", "next", "got",
	"walk", "ease", "idea", "fish", "farm", "lake", "rain", "east", "west", "cold",
	"warm", "fire", "song",
}

// genIDs[i] is the token id of genWords[i]; genByID inverts it.
var (
	genIDs  [len(genWords)]uint32
	genByID map[uint32]string
)

func init() {
	genByID = make(map[uint32]string, len(genWords))
	for i, w := range genWords {
		id := pieceID(w)
		genIDs[i] = id
		genByID[id] = w
	}
}

// pieceID is the token id of one piece: FNV-1a 64 over its bytes, folded to 32 bits,
// shifted out of the reserved range.
func pieceID(p string) uint32 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(p); i++ {
		h ^= uint64(p[i])
		h *= prime64
	}
	id := uint32(h) ^ uint32(h>>32)
	if id < NumReservedTokens {
		id += NumReservedTokens
	}
	return id
}

// Tokenize appends the token ids of text to dst. Deterministic: the same text gives
// the same ids, and a text prefix ending at a word boundary gives a token prefix.
// See PieceLen for the rules. It allocates only if dst must grow.
func Tokenize(dst []uint32, text string) []uint32 {
	i := 0
	for i < len(text) {
		// Skip white space.
		if size := spaceAt(text, i); size > 0 {
			i += size
			continue
		}
		// A word runs to the next white space.
		j := i
		for j < len(text) {
			if c := text[j]; c < utf8.RuneSelf { // ASCII: one byte, no decoding
				if asciiSpace[c] {
					break
				}
				j++
				continue
			}
			r, size := utf8.DecodeRuneInString(text[j:])
			if unicode.IsSpace(r) {
				break
			}
			j += size
		}
		dst = appendWord(dst, text[i:j])
		i = j
	}
	return dst
}

// asciiSpace marks the ASCII white space of unicode.IsSpace.
var asciiSpace = [utf8.RuneSelf]bool{' ': true, '\t': true, '\n': true, '\v': true, '\f': true, '\r': true}

// spaceAt is the byte length of the white-space rune at text[i], or 0 if that rune
// is not white space.
func spaceAt(text string, i int) int {
	if c := text[i]; c < utf8.RuneSelf {
		if asciiSpace[c] {
			return 1
		}
		return 0
	}
	r, size := utf8.DecodeRuneInString(text[i:])
	if unicode.IsSpace(r) {
		return size
	}
	return 0
}

// appendWord cuts one word into pieces of at most PieceLen bytes at rune boundaries.
func appendWord(dst []uint32, w string) []uint32 {
	for len(w) > PieceLen {
		cut := PieceLen
		for cut > 0 && !utf8.RuneStart(w[cut]) {
			cut--
		}
		if cut == 0 { // a single rune longer than PieceLen cannot happen (max 4 bytes)
			cut = PieceLen
		}
		dst = append(dst, pieceID(w[:cut]))
		w = w[cut:]
	}
	return append(dst, pieceID(w))
}

// Detokenize renders token ids back to text such that Tokenize(Detokenize(ids)) == ids
// for ids that the engine generates (words from a fixed list, joined by one space).
// Special tokens render as their ChatML text; any other id (a prompt piece, whose text
// the hash does not keep) renders as "<tok:ID>", which is stable but does not round-trip.
func Detokenize(ids []uint32) string {
	var b strings.Builder
	b.Grow(len(ids) * 5)
	for i, id := range ids {
		if i > 0 && ids[i-1] != TokenNewline && id != TokenNewline {
			b.WriteByte(' ')
		}
		switch id {
		case TokenIMStart:
			b.WriteString("<|im_start|>")
			continue
		case TokenIMEnd:
			b.WriteString("<|im_end|>")
			continue
		case TokenNewline:
			b.WriteByte('\n')
			continue
		}
		if w, ok := genByID[id]; ok {
			b.WriteString(w)
			continue
		}
		b.WriteString("<tok:")
		var num [10]byte
		n := len(num)
		for v := id; ; v /= 10 {
			n--
			num[n] = byte('0' + v%10)
			if v < 10 {
				break
			}
		}
		b.Write(num[n:])
		b.WriteByte('>')
	}
	return b.String()
}

// DetokenizeToken renders one engine-generated token as the text a stream delta
// carries: its word preceded by a space unless it is the first output token
// (first == true). Concatenating the deltas of a reply gives Detokenize(reply).
func DetokenizeToken(id uint32, first bool) string {
	w, ok := genByID[id]
	if !ok {
		w = Detokenize([]uint32{id})
	}
	if first {
		return w
	}
	return " " + w
}

// ChatMessage is one message for the chat template.
type ChatMessage struct {
	Role    string
	Content string
}

// AppendMessage appends the template rendering of one message to dst: a token-level
// Qwen/ChatML template,
//
//	<|im_start|> Tokenize(role) \n Tokenize(content) <|im_end|> \n
//
// RenderChat(msgs, true) == concat(AppendMessage(m) for m in msgs) + GenerationPrompt,
// and GenerationPrompt + reply tokens + end-of-message tokens ==
// AppendMessage({assistant, Detokenize(reply)}), so turn n+1's prompt starts with
// turn n's prompt plus its reply, as with a real model's template.
func AppendMessage(dst []uint32, m ChatMessage) []uint32 {
	dst = append(dst, TokenIMStart)
	dst = Tokenize(dst, m.Role)
	dst = append(dst, TokenNewline)
	dst = Tokenize(dst, m.Content)
	return append(dst, TokenIMEnd, TokenNewline)
}

// AppendMessageTokens is AppendMessage for a message whose content is already
// tokenized (content = Tokenize(nil, m.Content)).
func AppendMessageTokens(dst []uint32, role string, content []uint32) []uint32 {
	dst = append(dst, TokenIMStart)
	dst = Tokenize(dst, role)
	dst = append(dst, TokenNewline)
	dst = append(dst, content...)
	return append(dst, TokenIMEnd, TokenNewline)
}

// AppendGenerationPrompt appends the assistant generation prompt to dst:
// <|im_start|> assistant \n.
func AppendGenerationPrompt(dst []uint32) []uint32 {
	dst = append(dst, TokenIMStart)
	dst = Tokenize(dst, "assistant")
	return append(dst, TokenNewline)
}

// RenderChat renders a whole conversation; with addGenerationPrompt it ends with the
// assistant generation prompt.
func RenderChat(dst []uint32, msgs []ChatMessage, addGenerationPrompt bool) []uint32 {
	for _, m := range msgs {
		dst = AppendMessage(dst, m)
	}
	if addGenerationPrompt {
		dst = AppendGenerationPrompt(dst)
	}
	return dst
}

// genToken is the engine's output token number idx for a request whose prompt hash
// is seed: a word from genWords picked by a hash of (seed, idx), so replies are
// reproducible.
func genToken(seed uint64, idx int) uint32 {
	return genIDs[mix64(seed^(uint64(idx)+1)*0x9e3779b97f4a7c15)%uint64(len(genIDs))]
}

// mix64 is the SplitMix64 finaliser (Steele, Lea, Flood 2014), a 64-bit bijection
// with good avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
