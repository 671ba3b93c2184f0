package loadgen

import (
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// play runs a session to its end, with a fixed reply per turn, and returns every
// turn's request.
func play(s *Session) []TurnRequest {
	var trs []TurnRequest
	for {
		tr, ok := s.NextTurn(0)
		if !ok {
			return trs
		}
		trs = append(trs, tr)
		s.AddReply("reply to turn " + strings.Repeat("x", tr.Turn+1))
	}
}

func TestWorkloadDeterministic(t *testing.T) {
	sc := TinyScenario()
	a, b := NewWorkload(sc), NewWorkload(sc)
	if a.SystemPrompt() != b.SystemPrompt() || a.DeviceID() != b.DeviceID() {
		t.Fatal("same seed, different system prompt or device")
	}
	// Session i depends only on (seed, i): build b's sessions in another order.
	order := []int64{5, 0, 3}
	for _, i := range order {
		sb := b.Session(i)
		sa := a.Session(i)
		if !reflect.DeepEqual(play(sa), play(sb)) || sa.Key != sb.Key {
			t.Errorf("session %d differs between two workloads of one seed", i)
		}
	}
	other := *sc
	other.Seed++
	c := NewWorkload(&other)
	if c.SystemPrompt() == a.SystemPrompt() || c.Session(0).Key == a.Session(0).Key {
		t.Error("a different seed gave the same content")
	}
}

// Every turn re-sends the whole history: turn n+1's messages are turn n's, its
// reply, then one new user message. The system prompt is shared by all sessions and
// the first user message is unique to each.
func TestPrefixStability(t *testing.T) {
	sc := TinyScenario()
	sc.Turns = 5
	w := NewWorkload(sc)
	s := w.Session(7)
	trs := play(s)
	if len(trs) != 5 {
		t.Fatalf("%d turns, want 5", len(trs))
	}
	for n := 0; n+1 < len(trs); n++ {
		prev, next := trs[n].Messages, trs[n+1].Messages
		if len(next) != len(prev)+2 {
			t.Fatalf("turn %d has %d messages, turn %d has %d", n+1, len(next), n, len(prev))
		}
		if !slices.Equal(next[:len(prev)], prev) {
			t.Errorf("turn %d does not start with turn %d's messages", n+1, n)
		}
		if next[len(prev)].Role != "assistant" || next[len(prev)].Content != "reply to turn "+strings.Repeat("x", n+1) {
			t.Errorf("turn %d: message %d is not turn %d's reply: %+v", n+1, len(prev), n, next[len(prev)])
		}
		if next[len(next)-1].Role != "user" {
			t.Errorf("turn %d does not end with a user message", n+1)
		}
		if trs[n+1].NominalPromptTokens <= trs[n].NominalPromptTokens {
			t.Errorf("nominal size does not grow: %d -> %d", trs[n].NominalPromptTokens, trs[n+1].NominalPromptTokens)
		}
	}
	if !trs[4].Last || trs[3].Last {
		t.Error("Last flag wrong")
	}
	if !s.Done() || s.TurnsDone != 5 {
		t.Errorf("Done %v TurnsDone %d", s.Done(), s.TurnsDone)
	}
	// Shared system prompt, unique first messages.
	firsts := map[string]bool{}
	for i := range int64(20) {
		s := w.Session(i)
		if s.System != w.SystemPrompt() {
			t.Fatal("system prompt differs between sessions")
		}
		tr, _ := s.NextTurn(0)
		first := tr.Messages[0].Content
		// The first 16 words already differ (a prefix cache block is 16 tokens).
		key := strings.Join(strings.Fields(first)[:16], " ")
		if firsts[key] {
			t.Errorf("session %d's first message starts like another's", i)
		}
		firsts[key] = true
	}
}

func TestNominalTokenCounts(t *testing.T) {
	sc := TinyScenario()
	sc.FirstTurnSpread = TokenRange{Min: 70, Max: 90}
	sc.TurnSpread = TokenRange{Min: 10, Max: 30}
	w := NewWorkload(sc)
	if got := len(strings.Fields(w.SystemPrompt())); got != sc.SystemPromptTokens {
		t.Errorf("system prompt has %d words, want %d", got, sc.SystemPromptTokens)
	}
	sizes := map[int]bool{}
	for i := range int64(30) {
		s := w.Session(i)
		total := sc.SystemPromptTokens
		for {
			tr, ok := s.NextTurn(0)
			if !ok {
				break
			}
			n := len(strings.Fields(tr.Messages[len(tr.Messages)-1].Content))
			lo, hi := 10, 30
			if tr.Turn == 0 {
				lo, hi = 70, 90
			}
			if n < lo || n > hi {
				t.Errorf("session %d turn %d: %d words outside [%d, %d]", i, tr.Turn, n, lo, hi)
			}
			sizes[n] = true
			total += n
			if tr.NominalPromptTokens != total {
				t.Errorf("NominalPromptTokens %d, want %d", tr.NominalPromptTokens, total)
			}
			s.AddReply("three word reply")
			total += 3
		}
	}
	if len(sizes) < 10 {
		t.Errorf("only %d distinct sizes drawn: the spread is not used", len(sizes))
	}
}

func TestVocabularyHasVariedPseudoWords(t *testing.T) {
	w := NewWorkload(TinyScenario())
	if len(w.vocab) != VocabularySize {
		t.Fatalf("%d words", len(w.vocab))
	}
	lengths := map[int]int{}
	seen := map[string]bool{}
	for _, v := range w.vocab {
		if seen[v] {
			t.Fatalf("duplicate word %q", v)
		}
		seen[v] = true
		lengths[len(v)]++
	}
	if len(lengths) < 8 {
		t.Errorf("word lengths %v: not varied", lengths)
	}
	// Frequent (low-rank) words are short: the vocabulary is ordered shortest first.
	for i := 1; i < len(w.vocab); i++ {
		if len(w.vocab[i]) < len(w.vocab[i-1]) {
			t.Fatalf("word %d (%q) is shorter than word %d (%q)", i, w.vocab[i], i-1, w.vocab[i-1])
		}
	}
}

func TestSessionKeyAndUserID(t *testing.T) {
	w := NewWorkload(TinyScenario())
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	keys := map[string]bool{}
	for i := range int64(100) {
		s := w.Session(i)
		if !uuid.MatchString(s.Key) {
			t.Fatalf("key %q is not a version-4 UUID", s.Key)
		}
		if keys[s.Key] {
			t.Fatalf("duplicate key %q", s.Key)
		}
		keys[s.Key] = true
	}
	s := w.Session(0)
	// Claude Code's form, byte for byte: keys in this order, account_uuid empty.
	want := `{"device_id":"` + w.DeviceID() + `","account_uuid":"","session_id":"` + s.Key + `"}`
	if s.UserID() != want {
		t.Errorf("UserID %s, want %s", s.UserID(), want)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s.UserID()), &m); err != nil || len(m["device_id"]) != 64 {
		t.Errorf("UserID not a JSON document with a 64-hex device id: %v", err)
	}
}

func TestSessionProtocol(t *testing.T) {
	s := NewWorkload(TinyScenario()).Session(0)
	if _, ok := s.NextTurn(0); !ok {
		t.Fatal("first turn refused")
	}
	if _, ok := s.NextTurn(0); ok {
		t.Error("second turn given before the first's reply")
	}
	s.AddReply("a")
	s.AddReply("ignored: no turn pending")
	if len(s.Messages) != 2 {
		t.Errorf("%d messages, want 2", len(s.Messages))
	}
	s.NextTurn(0)
	s.fail()
	if !s.Done() || !s.Failed() {
		t.Error("failed session not done")
	}
	if _, ok := s.NextTurn(0); ok {
		t.Error("failed session gave a turn")
	}
}

// TestSetTokenizerMatchesText: a workload that writes token ids (SetTokenizer) gives,
// for every user message, the ids of the text the same session writes without one
// (the tokenizer applied to its white-space separated words), leaves Content empty,
// and keeps the sessions' later draws (the word counts) unchanged.
func TestSetTokenizerMatchesText(t *testing.T) {
	sc := TinyScenario()
	tok := func(dst []uint32, w string) []uint32 { // two ids a word: a stand-in tokenizer
		h := uint32(2166136261)
		for i := 0; i < len(w); i++ {
			h = (h ^ uint32(w[i])) * 16777619
		}
		return append(dst, h, uint32(len(w)))
	}
	text, ids := NewWorkload(sc), NewWorkload(sc)
	ids.SetTokenizer(tok)
	for id := range int64(4) {
		st, si := text.Session(id), ids.Session(id)
		for turn := 0; ; turn++ {
			trt, ok := st.NextTurn(0)
			tri, oki := si.NextTurn(0)
			if ok != oki {
				t.Fatalf("session %d turn %d: the two workloads disagree on whether it exists", id, turn)
			}
			if !ok {
				break
			}
			i := len(trt.Messages) - 1
			var want []uint32
			for _, w := range strings.Fields(trt.Messages[i].Content) {
				want = tok(want, w)
			}
			got := si.TakeTokens(i)
			if tri.Messages[i].Content != "" || !slices.Equal(got, want) || len(want) == 0 {
				t.Fatalf("session %d turn %d: ids %d (content %q), want the text's %d", id, turn, len(got), tri.Messages[i].Content, len(want))
			}
			if si.TakeTokens(i) != nil {
				t.Fatalf("session %d turn %d: ids still there after TakeTokens", id, turn)
			}
			if st.NominalTokens != si.NominalTokens {
				t.Fatalf("session %d turn %d: nominal tokens %d vs %d", id, turn, st.NominalTokens, si.NominalTokens)
			}
			st.AddReply("a reply")
			si.AddReply("a reply")
		}
	}
}
