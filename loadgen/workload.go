package loadgen

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// VocabularySize is the number of distinct pseudo-words the generator draws from.
const VocabularySize = 4096

// Random streams: each kind of content has its own generator stream, so adding a
// use of randomness in one place never shifts the content of another.
const (
	streamVocab uint64 = iota + 1
	streamSystem
	streamKey
	streamUser
	streamDevice
	streamSide
	streamThink
	streamRTT
)

// Workload generates the sessions of a scenario: seeded, deterministic and
// prefix-stable. Session i's content depends only on (Scenario.Seed, i), so both
// variants and both worlds (HTTP and virtual time) see the same sessions in the
// same order. A Workload is immutable after NewWorkload and safe for concurrent use;
// the Sessions it returns are not (one owner at a time).
//
// Text is made of pseudo-words from a vocabulary generated from the seed
// (VocabularySize words of 1 to 4 syllables, 2 to ~16 letters), drawn with a Zipf
// law (s = 1.1, v = 2) as words are in natural text, with a line break every 8 to 20
// words. The vocabulary is ordered shortest first, so the frequent words are the
// short ones (Zipf's law of abbreviation; without it a pseudo-word text averages ~8
// letters a word, twice natural text). A nominal token is one word; the server's
// tokenizer decides the real count. Measured: the reference first message (6,000
// words) has 3.2 letters per word, and sim.Tokenize (one token per 4-byte piece)
// counts 1.19-1.21 tokens per word (seed 1, sessions 0-2); the reference generator
// measured 1.2-1.25 with the real Qwen tokenizer on its text. A real BPE tokenizer
// on these pseudo-words was not measured here.
type Workload struct {
	sc          *Scenario
	vocab       []string
	system      string
	systemWords int
	device      string
	sideSystem  string // system prompt of every side request ("" without side requests)
	// vocabTokens[i] is the token ids of vocab[i] (SetTokenizer); nil: write text.
	vocabTokens [][]uint32
}

// NewWorkload builds the generator for sc (defaults applied to a copy of sc).
func NewWorkload(sc *Scenario) *Workload {
	w := &Workload{sc: sc.WithDefaults()}
	w.vocab = makeVocabulary(w.rng(streamVocab, 0, 0), VocabularySize)
	r := w.rng(streamSystem, 0, 0)
	w.systemWords = draw(r, w.sc.SystemPromptTokens, w.sc.SystemPromptSpread)
	w.system = w.text(r, w.systemWords)
	var dev [32]byte
	fillBytes(w.rng(streamDevice, 0, 0), dev[:])
	w.device = hex.EncodeToString(dev[:])
	if w.sc.SideRequests != nil {
		w.sideSystem = w.text(w.rng(streamSide, 0, 0), SideSystemPromptTokens)
	}
	return w
}

// Scenario returns the scenario (defaults applied) the workload was built for.
func (w *Workload) Scenario() *Scenario { return w.sc }

// SystemPrompt returns the system prompt shared by every session.
func (w *Workload) SystemPrompt() string { return w.system }

// DeviceID returns the 64-hex device id sent in metadata.user_id (one per seed, as
// one machine running Claude Code has one).
func (w *Workload) DeviceID() string { return w.device }

// Session returns a fresh session number id (0-based, in start order), with no
// turn sent yet; its key is derived from (seed, id). Same as SessionFor("", id).
func (w *Workload) Session(id int64) *Session { return w.SessionFor("", id) }

// SessionFor returns session number id for a variant: its content depends only on
// (seed, id), exactly as Session(id), but its key is derived from (seed, variant,
// id). A Loop uses it so each variant presents new conversations to the router: the
// router's session table (homes kept for an hour) must not carry one variant's
// placements into the next, while the prompts stay identical for a fair A/B.
func (w *Workload) SessionFor(variant string, id int64) *Session {
	var b [16]byte
	fillBytes(w.rng(streamKey, uint64(id), hashString(variant)), b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4 layout (random), RFC 9562 section 5.4
	b[8] = b[8]&0x3f | 0x80 // variant 10
	h := hex.EncodeToString(b[:])
	key := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	return &Session{
		ID:            id,
		Key:           key,
		DeviceID:      w.device,
		System:        w.system,
		Turns:         w.sc.Turns,
		NominalTokens: w.systemWords,
		w:             w,
	}
}

// rng returns the generator of one stream for (a, b), a PCG seeded from the scenario
// seed and the stream so that streams never overlap by construction.
func (w *Workload) rng(stream, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(mix(w.sc.Seed, stream), mix(a, b^0x9e3779b97f4a7c15)))
}

// hashString is FNV-1a 64 of s (0 for "", so Session(id) keys stay as they were).
func hashString(s string) uint64 {
	if s == "" {
		return 0
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix combines two words into a well-spread seed (splitmix64 finaliser applied to a
// combination of both).
func mix(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e019
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func fillBytes(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// ThinkTime returns the gap before turn turn of session id (0-based; turn ==
// Scenario.Turns is the gap before the session's replacement starts):
// Scenario.ThinkTime when ThinkSpread is fixed, else a draw uniform over
// [ThinkSpread.Min, ThinkSpread.Max] from the session's own stream, so both
// variants and both worlds wait the same.
func (w *Workload) ThinkTime(id int64, turn int) time.Duration {
	r := w.sc.ThinkSpread
	if r.IsFixed() || r.Max < r.Min {
		return w.sc.ThinkTime
	}
	return r.Min + time.Duration(w.rng(streamThink, uint64(id), uint64(turn)).Int64N(int64(r.Max-r.Min)+1))
}

// OneWay returns half the round-trip time of turn turn of session id (0-based):
// the delay from the client to the server and from the server back to the
// client (Scenario.RTT). It is Scenario.RTT/2 when RTTSpread is fixed, else half
// a draw uniform over [RTTSpread.Min, RTTSpread.Max] from the session's own
// stream, so both variants and both worlds see the same network.
func (w *Workload) OneWay(id int64, turn int) time.Duration {
	r := w.sc.RTTSpread
	if r.IsFixed() || r.Max < r.Min {
		return w.sc.RTT / 2
	}
	return (r.Min + time.Duration(w.rng(streamRTT, uint64(id), uint64(turn)).Int64N(int64(r.Max-r.Min)+1))) / 2
}

// draw returns a token count: nominal when the range is fixed, else uniform over it.
func draw(r *rand.Rand, nominal int, tr TokenRange) int {
	if tr.IsFixed() || tr.Max < tr.Min {
		return nominal
	}
	return tr.Min + r.IntN(tr.Max-tr.Min+1)
}

var (
	onsets = []string{"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
		"br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr", ""}
	nuclei = []string{"a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "io", "y"}
	codas  = []string{"", "", "", "", "n", "r", "s", "l", "t", "m", "ck", "nd", "st", "x"}
)

// makeVocabulary returns n distinct pseudo-words of 1 to 4 syllables.
func makeVocabulary(r *rand.Rand, n int) []string {
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	var sb strings.Builder
	for len(out) < n {
		sb.Reset()
		syl := 1
		switch p := r.IntN(10); {
		case p >= 9:
			syl = 4
		case p >= 7:
			syl = 3
		case p >= 3:
			syl = 2
		}
		for range syl {
			sb.WriteString(onsets[r.IntN(len(onsets))])
			sb.WriteString(nuclei[r.IntN(len(nuclei))])
			sb.WriteString(codas[r.IntN(len(codas))])
		}
		word := sb.String()
		if len(word) < 2 || seen[word] {
			continue
		}
		seen[word] = true
		out = append(out, word)
	}
	// Shortest first (stable: ties keep their generated order), so Zipf-frequent
	// ranks are short words.
	slices.SortStableFunc(out, func(a, b string) int { return len(a) - len(b) })
	return out
}

// text writes n words drawn from the vocabulary.
func (w *Workload) text(r *rand.Rand, n int) string {
	if n <= 0 {
		return ""
	}
	z := rand.NewZipf(r, 1.1, 2, uint64(len(w.vocab)-1))
	var sb strings.Builder
	sb.Grow(n * 7)
	line := 8 + r.IntN(13)
	for i := range n {
		if i > 0 {
			if line == 0 {
				sb.WriteByte('\n')
				line = 8 + r.IntN(13)
			} else {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(w.vocab[z.Uint64()])
		line--
	}
	return sb.String()
}

// SetTokenizer makes the sessions write their user messages as token ids
// (Session.TakeTokens; Content stays empty) instead of text: tok appends the ids of one word,
// and the ids of a text are those of its words in order, white space making none
// (sim.Tokenize's rule). The random draws are those of the text, so the ids are
// exactly tok applied to the text's words, without building the text. The system
// prompt and side requests stay text. Call it before the first session's turn.
func (w *Workload) SetTokenizer(tok func(dst []uint32, word string) []uint32) {
	w.vocabTokens = make([][]uint32, len(w.vocab))
	for i, v := range w.vocab {
		w.vocabTokens[i] = tok(nil, v)
	}
}

// tokens is text's draws appended as the words' token ids (SetTokenizer).
func (w *Workload) tokens(r *rand.Rand, n int) []uint32 {
	if n <= 0 {
		return nil
	}
	z := rand.NewZipf(r, 1.1, 2, uint64(len(w.vocab)-1))
	dst := make([]uint32, 0, n*5/4)
	line := 8 + r.IntN(13)
	for i := range n {
		if i > 0 && line == 0 {
			line = 8 + r.IntN(13)
		}
		dst = append(dst, w.vocabTokens[z.Uint64()]...)
		line--
	}
	return dst
}

// Session is one synthetic conversation: a shared system prompt, a unique first
// user message, then later user messages, each turn re-sending the whole history.
// A session is driven by one owner at a time (the Loop, or the goroutine sending its
// current turn); it is not safe for concurrent use.
type Session struct {
	ID       int64  // index in start order within a variant, from 0
	Key      string // session id sent to the router: a UUID derived from (seed, variant, ID)
	DeviceID string // 64 hex, for metadata.user_id
	// Agent is a Claude Code subagent's agent id (X-Claude-Code-Agent-Id), sent
	// beside Key, its parent's session id; "" for a session's parent agent.
	Agent  string
	System string // system prompt (the same for every session of a workload)
	// Messages is the history: user, assistant, user, ... Its first elements never
	// change once written, so every turn's prompt extends the previous turn's
	// prompt plus its reply.
	Messages []Message
	Turns    int // turns planned, including the first
	// TurnsDone counts turns whose reply was added.
	TurnsDone int
	// NominalTokens is the word count of the whole prompt so far: system prompt, user
	// messages, and assistant replies (whitespace-separated fields of the reply text).
	NominalTokens int

	w       *Workload
	tokens  [][]uint32 // by message index: user messages' token ids (SetTokenizer)
	next    int        // index of the next turn to generate
	pending bool       // a turn was generated and awaits its reply
	failed  bool
}

// NextTurn appends the next user message and returns the turn to send, wanted at
// the simulated instant intended. It returns false when the session is done, failed,
// or still waits for the reply of its previous turn.
func (s *Session) NextTurn(intended time.Duration) (TurnRequest, bool) {
	if s.pending || s.failed || s.next >= s.Turns {
		return TurnRequest{}, false
	}
	t := s.next
	r := s.w.rng(streamUser, uint64(s.ID), uint64(t))
	n := draw(r, s.w.sc.TurnTokens, s.w.sc.TurnSpread)
	if t == 0 {
		n = draw(r, s.w.sc.FirstTurnTokens, s.w.sc.FirstTurnSpread)
	}
	if s.w.vocabTokens != nil {
		s.tokens = append(s.tokens, make([][]uint32, len(s.Messages)+1-len(s.tokens))...)
		s.tokens[len(s.Messages)] = s.w.tokens(r, n)
		s.Messages = append(s.Messages, Message{Role: "user"})
	} else {
		s.Messages = append(s.Messages, Message{Role: "user", Content: s.w.text(r, n)})
	}
	s.NominalTokens += n
	s.next++
	s.pending = true
	return TurnRequest{
		Session:             s,
		Turn:                t,
		Intended:            intended,
		Messages:            s.Messages[:len(s.Messages):len(s.Messages)],
		Last:                t == s.Turns-1,
		NominalPromptTokens: s.NominalTokens,
	}, true
}

// SideRequest returns the side request that goes out beside turn tr
// (Scenario.SideRequests lists tr.Turn), or false. Its content depends only on
// (seed, session id, turn); it reads nothing of the session's history, so it may be
// sent while the turn is in flight.
func (s *Session) SideRequest(tr TurnRequest) (TurnRequest, bool) {
	sr := s.w.sc.SideRequests
	if sr == nil || tr.Side != nil || tr.Session != s || !slices.Contains(sr.Turns, tr.Turn) {
		return TurnRequest{}, false
	}
	r := s.w.rng(streamSide, uint64(s.ID)+1, uint64(tr.Turn))
	return TurnRequest{
		Session:             s,
		Turn:                tr.Turn,
		Intended:            tr.Intended,
		Variant:             tr.Variant,
		Messages:            []Message{{Role: "user", Content: s.w.text(r, sr.PromptTokens)}},
		NominalPromptTokens: SideSystemPromptTokens + sr.PromptTokens,
		Side:                &SideRequest{System: s.w.sideSystem, MaxTokens: sr.MaxOutputTokens},
	}, true
}

// AddReply records the assistant's reply to the pending turn (the text the server
// streamed). It does nothing when no turn awaits a reply.
func (s *Session) AddReply(text string) {
	if !s.pending {
		return
	}
	s.Messages = append(s.Messages, Message{Role: "assistant", Content: text})
	s.NominalTokens += len(strings.Fields(text))
	s.pending = false
	s.TurnsDone++
}

// TakeTokens returns the token ids of message i, written instead of its text when
// the workload has a tokenizer (SetTokenizer), and forgets them; nil for a message
// written as text, or taken already.
func (s *Session) TakeTokens(i int) []uint32 {
	if i >= len(s.tokens) {
		return nil
	}
	t := s.tokens[i]
	s.tokens[i] = nil
	return t
}

// Awaiting reports whether a turn was generated and its reply not yet added.
func (s *Session) Awaiting() bool { return s.pending }

// Done reports whether the session has ended: all its turns completed, or a turn
// failed.
func (s *Session) Done() bool { return s.failed || s.TurnsDone >= s.Turns }

// Failed reports whether the session ended on a failed turn.
func (s *Session) Failed() bool { return s.failed }

// fail ends the session: a conversation cannot go on without the reply it lacks.
func (s *Session) fail() { s.failed, s.pending = true, false }

// UserID returns the metadata.user_id string Claude Code (>= 2.1.78) sends: a JSON
// document {"device_id":"<64 hex>","account_uuid":"","session_id":"<uuid>"}.
func (s *Session) UserID() string {
	b, err := json.Marshal(struct {
		DeviceID    string `json:"device_id"`
		AccountUUID string `json:"account_uuid"`
		SessionID   string `json:"session_id"`
	}{s.DeviceID, "", s.Key})
	if err != nil {
		panic(fmt.Sprintf("encoding user_id: %v", err)) // cannot happen: three strings
	}
	return string(b)
}

// NewResult returns a Result with the turn's identity filled in (variant, session,
// key, turn, last turn, intended send, nominal size) and token counts not yet known
// (PromptTokens and CachedTokens -1).
func (tr TurnRequest) NewResult() Result {
	r := Result{
		Variant:             tr.Variant,
		Turn:                tr.Turn,
		LastTurn:            tr.Last,
		Intended:            tr.Intended,
		PromptTokens:        -1,
		CachedTokens:        -1,
		NominalPromptTokens: tr.NominalPromptTokens,
		Side:                tr.Side != nil,
	}
	if tr.Side != nil {
		r.LastTurn = false
	}
	if tr.Trace != nil {
		q := &tr.Trace.Request
		r.Trace = &ResultTrace{Index: tr.Trace.Index, Timestamp: q.Timestamp, InputLength: q.InputLength, OutputLength: q.OutputLength,
			Agent: tr.Trace.Agent}
	}
	if tr.Session != nil {
		r.Session = tr.Session.ID
		r.SessionKey = tr.Session.Key
	}
	return r
}
