package sim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestTokenizeRules(t *testing.T) {
	tests := []struct {
		name string
		text string
		want int // token count
	}{
		{"empty", "", 0},
		{"only white space", " \t\n\r ", 0},
		{"one short word", "abc", 1},
		{"word of exactly PieceLen bytes", "abcd", 1},
		{"word one byte over PieceLen splits in two", "abcde", 2},
		{"ten letters split 4+4+2", "abcdefghij", 3},
		{"white space of any kind separates", "a\tb\nc  d", 4},
		// "abcé" is 5 bytes; a cut at byte 4 would split é (2 bytes), so the pieces
		// are "abc" and "é" (checked piece by piece below).
		{"pieces never split a UTF-8 sequence", "abcé", 2},
		{"unicode white space separates", "a\u3000b", 2},
		{"punctuation stays in the word", "foo, bar.", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Tokenize(nil, tc.text)
			if len(got) != tc.want {
				t.Fatalf("Tokenize(%q) = %d tokens %v, want %d", tc.text, len(got), got, tc.want)
			}
			if tc.text == "abcé" && !slices.Equal(got, slices.Concat(Tokenize(nil, "abc"), Tokenize(nil, "é"))) {
				t.Errorf("pieces of %q: %v", tc.text, got)
			}
			for _, id := range got {
				if id < NumReservedTokens {
					t.Errorf("token %d in the reserved range", id)
				}
			}
		})
	}
}

func TestTokenizeStableIDs(t *testing.T) {
	// The id is FNV-1a 64 of the piece folded to 32 bits: a fixed function, so the
	// same piece has the same id in every process. Check it against an independent
	// computation with hash/fnv semantics written out.
	tests := []string{"a", "the", "word", "é"}
	for _, p := range tests {
		t.Run(p, func(t *testing.T) {
			h := uint64(14695981039346656037)
			for _, c := range []byte(p) {
				h = (h ^ uint64(c)) * 1099511628211
			}
			want := uint32(h) ^ uint32(h>>32)
			if want < NumReservedTokens {
				want += NumReservedTokens
			}
			if got := Tokenize(nil, p); len(got) != 1 || got[0] != want {
				t.Errorf("Tokenize(%q) = %v, want [%d]", p, got, want)
			}
		})
	}
	if a, b := Tokenize(nil, "cat dog"), Tokenize(nil, "dog cat"); a[0] != b[1] || a[1] != b[0] {
		t.Errorf("ids depend on position: %v vs %v", a, b)
	}
}

func TestTokenizePrefixProperty(t *testing.T) {
	// A text prefix ending at a word boundary tokenizes to a token prefix.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		words := make([]string, 1+rng.IntN(30))
		for j := range words {
			b := make([]byte, 1+rng.IntN(12))
			for k := range b {
				b[k] = byte('a' + rng.IntN(26))
			}
			words[j] = string(b)
		}
		full := strings.Join(words, " ")
		cut := rng.IntN(len(words) + 1)
		prefix := strings.Join(words[:cut], " ")
		a, b := Tokenize(nil, prefix), Tokenize(nil, full)
		if !slices.Equal(a, b[:len(a)]) {
			t.Fatalf("case %d: tokens of %q are not a prefix of those of %q", i, prefix, full)
		}
	}
}

func TestGeneratedWords(t *testing.T) {
	seen := map[uint32]string{}
	for i, w := range genWords {
		ids := Tokenize(nil, w)
		if len(ids) != 1 || ids[0] != genIDs[i] {
			t.Errorf("generated word %q is %v, want one token %d", w, ids, genIDs[i])
		}
		if prev, dup := seen[genIDs[i]]; dup {
			t.Errorf("words %q and %q share id %d", prev, w, genIDs[i])
		}
		seen[genIDs[i]] = w
	}
	// Any engine output round-trips through Detokenize, and the per-token deltas a
	// stream would carry concatenate to the same text.
	reply := make([]uint32, 300)
	for i := range reply {
		reply[i] = genToken(12345, i)
	}
	text := Detokenize(reply)
	if got := Tokenize(nil, text); !slices.Equal(got, reply) {
		t.Fatalf("round trip failed: %q", text)
	}
	var b strings.Builder
	for i, id := range reply {
		b.WriteString(DetokenizeToken(id, i == 0))
	}
	if b.String() != text {
		t.Errorf("deltas %q != Detokenize %q", b.String(), text)
	}
	// Output varies with the index and with the seed.
	distinct := map[uint32]bool{}
	same := 0
	for i, id := range reply {
		distinct[id] = true
		if genToken(54321, i) == id {
			same++
		}
	}
	if len(distinct) < len(genWords)/2 {
		t.Errorf("300 generated tokens use only %d distinct words", len(distinct))
	}
	if same > len(reply)/10 {
		t.Errorf("two seeds agree on %d of %d tokens", same, len(reply))
	}
}

func TestDetokenizeSpecials(t *testing.T) {
	got := Detokenize(AppendMessage(nil, ChatMessage{Role: "user", Content: genWords[0] + " " + genWords[1]}))
	want := "<|im_start|> <tok:" // role "user" is not a generated word
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, genWords[0]+" "+genWords[1]+" <|im_end|>\n") {
		t.Errorf("Detokenize = %q", got)
	}
}

func TestChatTemplate(t *testing.T) {
	tok := func(s string) []uint32 { return Tokenize(nil, s) }
	cat := func(parts ...[]uint32) []uint32 { return slices.Concat(parts...) }
	sp := []uint32{TokenIMStart}
	end := []uint32{TokenIMEnd, TokenNewline}
	nl := []uint32{TokenNewline}
	tests := []struct {
		name string
		got  []uint32
		want []uint32
	}{
		{"message", AppendMessage(nil, ChatMessage{"user", "hi there"}), cat(sp, tok("user"), nl, tok("hi there"), end)},
		{"empty content", AppendMessage(nil, ChatMessage{"system", ""}), cat(sp, tok("system"), nl, end)},
		{"generation prompt", AppendGenerationPrompt(nil), cat(sp, tok("assistant"), nl)},
		{"render with prompt", RenderChat(nil, []ChatMessage{{"system", "s"}, {"user", "u"}}, true),
			cat(sp, tok("system"), nl, tok("s"), end, sp, tok("user"), nl, tok("u"), end, sp, tok("assistant"), nl)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !slices.Equal(tc.got, tc.want) {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

// TestChatTemplateTurnPrefix: render(turn n) + reply + end-of-message is a prefix of
// render(turn n+1), for replies the engine generates.
func TestChatTemplateTurnPrefix(t *testing.T) {
	msgs := []ChatMessage{{"system", "You are a coding agent. Be brief."}, {"user", "Fix the bug in main.go please"}}
	for turn := range 5 {
		prompt := RenderChat(nil, msgs, true)
		reply := make([]uint32, 7+turn)
		seed := promptSeed(prompt, appendBlockHashes(nil, prompt, 16), 16)
		for i := range reply {
			reply[i] = genToken(seed, i)
		}
		msgs = append(msgs, ChatMessage{"assistant", Detokenize(reply)}, ChatMessage{"user", "now run the tests"})
		next := RenderChat(nil, msgs, true)
		want := slices.Concat(prompt, reply, []uint32{TokenIMEnd, TokenNewline})
		if len(next) <= len(want) || !slices.Equal(next[:len(want)], want) {
			t.Fatalf("turn %d: prompt+reply is not a prefix of the next prompt", turn)
		}
	}
}

// TestTokenizeSplitsAsFields checks that Tokenize splits words exactly where
// strings.Fields does (unicode.IsSpace), on ASCII and non-ASCII white space, invalid
// UTF-8 and multi-byte letters, against a reference that tokenizes Fields' words.
func TestTokenizeSplitsAsFields(t *testing.T) {
	parts := []string{"a", "bc", "défini", "日本語", " ", "\t", "\n", "\v", "\f", "\r",
		"\u0085", "\u00a0", "\u2003", "\u3000", "\xff", "\xc3", "x\u200by", "longerword"}
	r := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		var sb strings.Builder
		for range r.IntN(12) {
			sb.WriteString(parts[r.IntN(len(parts))])
		}
		text := sb.String()
		var want []uint32
		for _, w := range strings.Fields(text) {
			want = appendWord(want, w)
		}
		if got := Tokenize(nil, text); !slices.Equal(got, want) {
			t.Fatalf("Tokenize(%q) = %v, want %v (strings.Fields words)", text, got, want)
		}
	}
}
