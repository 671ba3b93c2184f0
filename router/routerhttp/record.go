package routerhttp

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/tracefmt"
)

// RecordPieceBytes is the bytes of canonical message text one recorded block id
// stands for: 2048, about one 512-token block at 4 bytes per token (the usual
// ratio of BPE tokenizers on English; the Mooncake traces' block is 512 tokens).
const RecordPieceBytes = 2048

// Recorder writes the requests the router serves as a replayable trace in the
// Mooncake format (package trace) plus session ids: per request its arrival
// (ms since the first one recorded), prompt and output tokens from the
// response's usage, block ids and the session. Block ids are chained hashes
// over RecordPieceBytes pieces of the request's canonical message text (role
// and text of every message, in order), salted per file, so a conversation's
// next turn repeats its previous ids and a shared system prompt gives shared
// ids; their count is ceil(prompt tokens / 512) as the format requires (cut, or
// padded with ids unique to the request). The session id is a salted hash of
// the session key. No text and no key is written.
//
// Only requests that completed with a 200 and a usage with prompt tokens are
// written; lines go out in arrival order, each once every earlier arrival has
// ended, so the file is sorted and what is held is bounded by the requests in
// flight. Safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	w       *bufio.Writer
	closer  io.Closer
	salt    [16]byte
	origin  time.Duration
	last    time.Duration // latest arrival given out
	started bool
	next    uint64 // next arrival number
	flushed uint64 // arrivals before this one are written or dropped
	done    map[uint64]*Recording
	err     error
	// Written and Dropped count the requests written and the ones not written
	// (no 200, no usage).
	Written, Dropped int
}

// Recording is one request being recorded (Recorder.Begin).
type Recording struct {
	seq     uint64
	arrival time.Duration
	ids     []int64
	session string
	ok      bool
	// The line, once ended OK.
	prompt, output int
}

// NewRecorder returns a Recorder writing to w (closed by Close when it is an
// io.Closer), with a random salt.
func NewRecorder(w io.Writer) (*Recorder, error) {
	r := &Recorder{w: bufio.NewWriter(w), done: map[uint64]*Recording{}}
	if c, ok := w.(io.Closer); ok {
		r.closer = c
	}
	if _, err := rand.Read(r.salt[:]); err != nil {
		return nil, fmt.Errorf("recording: salt: %w", err)
	}
	return r, nil
}

// Begin notes a request arriving at now (simulated or wall time, one clock for
// the file) with its body and session key; End must follow.
func (r *Recorder) Begin(now time.Duration, body []byte, sessionKey string) *Recording {
	ids := r.blockIDs(body)
	session := ""
	if sessionKey != "" {
		h := sha256.Sum256(append(r.salt[:], sessionKey...))
		session = hex.EncodeToString(h[:12])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.started, r.origin = true, now
	}
	// Arrivals are numbered in the order they take the lock; an instant read
	// just before a concurrent arrival's is moved up to it, so the file stays
	// sorted (by at most the time between the two reads).
	r.last = max(r.last, now-r.origin)
	rec := &Recording{seq: r.next, arrival: r.last, ids: ids, session: session}
	r.next++
	return rec
}

// End records how rec ended: ok (a complete 200) with the usage's prompt and
// output tokens. It writes every line that is now due.
func (r *Recorder) End(rec *Recording, ok bool, promptTokens, outputTokens int) {
	if rec == nil {
		return
	}
	if ok && promptTokens > 0 {
		rec.ok = true
		need := (promptTokens + tracefmt.DefaultBlockSize - 1) / tracefmt.DefaultBlockSize
		ids := rec.ids
		if len(ids) > need {
			ids = ids[:need]
		}
		for i := len(ids); i < need; i++ {
			ids = append(ids, r.uniqueID(rec.seq, i))
		}
		rec.ids, rec.prompt, rec.output = ids, promptTokens, max(0, outputTokens)
	} else {
		rec.ids = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done[rec.seq] = rec
	for {
		d := r.done[r.flushed]
		if d == nil {
			return
		}
		delete(r.done, r.flushed)
		r.flushed++
		if !d.ok {
			r.Dropped++
			continue
		}
		b, err := tracefmt.Marshal(d.arrival, d.prompt, d.output, d.ids, d.session)
		if err == nil {
			_, err = r.w.Write(b)
		}
		if err != nil && r.err == nil {
			r.err = err
		}
		r.Written++
	}
}

// Flush writes buffered lines to the file.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// Close writes what is buffered (requests still in flight, and those that
// arrived after them, are not written) and closes the file.
func (r *Recorder) Close() error {
	err := r.Flush()
	if r.closer != nil {
		if cerr := r.closer.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("recording: %w", err)
	}
	return nil
}

// uniqueID is an id no other request shares: a hash of (salt, arrival, i),
// kept non-negative.
func (r *Recorder) uniqueID(seq uint64, i int) int64 {
	var b [16 + 16]byte
	copy(b[:], r.salt[:])
	binary.LittleEndian.PutUint64(b[16:], seq)
	binary.LittleEndian.PutUint64(b[24:], uint64(i)|1<<63)
	h := sha256.Sum256(b[:])
	return int64(binary.LittleEndian.Uint64(h[:8]) >> 1)
}

// blockIDs hashes the canonical text of body's messages in RecordPieceBytes
// pieces, each id chaining the previous one (the last piece may be short).
func (r *Recorder) blockIDs(body []byte) []int64 {
	text := canonicalMessages(body)
	var ids []int64
	prev := r.salt[:]
	for off := 0; off < len(text); off += RecordPieceBytes {
		end := min(off+RecordPieceBytes, len(text))
		h := sha256.New()
		h.Write(prev)
		io.WriteString(h, text[off:end])
		sum := h.Sum(nil)
		ids = append(ids, int64(binary.LittleEndian.Uint64(sum[:8])>>1))
		prev = sum
	}
	return ids
}

// canonicalMessages renders the conversation of an OpenAI chat, Anthropic
// Messages or OpenAI Responses body as "role\ntext\n" per message (Anthropic's
// system first; Responses instructions, then input items), where text is a
// string content or its parts' texts, other parts (tool calls, function call
// items' content) as their JSON. A body that does not parse gives "".
func canonicalMessages(body []byte) string {
	var b struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Prompt json.RawMessage `json:"prompt"`
		// The Responses API: instructions and input (a string or items).
		Instructions json.RawMessage `json:"instructions"`
		Input        json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	var sb strings.Builder
	if len(b.System) > 0 && string(b.System) != "null" {
		sb.WriteString("system\n")
		sb.WriteString(contentText(b.System))
		sb.WriteByte('\n')
	}
	for _, m := range b.Messages {
		sb.WriteString(m.Role)
		sb.WriteByte('\n')
		sb.WriteString(contentText(m.Content))
		sb.WriteByte('\n')
	}
	if len(b.Prompt) > 0 {
		sb.WriteString(contentText(b.Prompt))
	}
	if len(b.Instructions) > 0 && string(b.Instructions) != "null" {
		sb.WriteString("instructions\n")
		sb.WriteString(contentText(b.Instructions))
		sb.WriteByte('\n')
	}
	var items []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	switch {
	case len(b.Input) == 0 || string(b.Input) == "null":
	case json.Unmarshal(b.Input, &items) == nil:
		for _, it := range items {
			sb.WriteString(it.Role)
			sb.WriteByte('\n')
			sb.WriteString(contentText(it.Content))
			sb.WriteByte('\n')
		}
	default:
		sb.WriteString("user\n")
		sb.WriteString(contentText(b.Input))
		sb.WriteByte('\n')
	}
	return sb.String()
}

// contentText is a string's value, or the text of a list of parts (other
// parts as their JSON).
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var sb strings.Builder
	for _, p := range parts {
		var t struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(p, &t) == nil && (t.Type == "text" || t.Type == "input_text" || t.Type == "output_text") {
			sb.WriteString(t.Text)
		} else {
			sb.Write(p)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// recordView is the admin API's view of the recording switch.
type recordView struct {
	Enabled bool `json:"enabled"`
	Written int  `json:"written"`
	Dropped int  `json:"dropped"`
}

// SetRecorder gives the router a recorder (warden route --record) and starts
// recording; the admin API's /admin/record then pauses and resumes it.
func (rt *Router) SetRecorder(rec *Recorder) {
	rt.recMu.Lock()
	rt.rec = rec
	rt.recMu.Unlock()
	rt.proxy.SetRecorder(rec)
}

// serveAdminRecord serves GET and PUT /admin/record (body {"enabled": bool}):
// pause or resume the recording of a router started with a recorder; 404
// without one.
func (rt *Router) serveAdminRecord(w http.ResponseWriter, r *http.Request) {
	rt.recMu.Lock()
	rec := rt.rec
	rt.recMu.Unlock()
	if rec == nil {
		adminError(w, http.StatusNotFound, errors.New("not recording: the router was started without --record"))
		return
	}
	if r.Method == http.MethodPut {
		enabled, ok := decodeEnabled(w, r)
		if !ok {
			return
		}
		if enabled {
			rt.proxy.SetRecorder(rec)
		} else {
			rt.proxy.SetRecorder(nil)
		}
	}
	rec.mu.Lock()
	v := recordView{Enabled: rt.proxy.recorder.Load() != nil, Written: rec.Written, Dropped: rec.Dropped}
	rec.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}
