package routerhttp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/tracefmt"
)

// RecordMaxHold is the longest a request in flight holds back the lines of
// the requests that arrived after it: lines go out in arrival order (the
// trace reader wants a sorted file), so a finished request waits for the
// earlier ones still in flight, for at most a minute (agents' turns stream
// for seconds to a few minutes). Past it the later lines are written and the
// late request's line, when it ends, gets the timestamp of the last line
// written (counted as shifted).
const RecordMaxHold = time.Minute

// Recorder writes the requests the router serves as a replayable trace in the
// Mooncake format (package trace) plus session ids: per request its arrival
// (ms since the first one recorded), prompt and output tokens from the
// response's usage, block ids and the session. Block ids stand for the
// prompt's blocks of tracefmt.DefaultBlockSize tokens as the engine would see
// them (system prompt, tools, then every message and block, recordhash.go),
// salted per file, so a conversation's next turn repeats the ids of its
// previous turn's full blocks and a shared system prompt and tools give shared
// ids; their count is ceil(prompt tokens / 512) as the format requires (cut,
// or padded with ids unique to the request). The session id is a salted hash
// of the session key. No text and no key is written.
//
// Only requests that completed with a 200 and a usage with prompt tokens are
// written. Each line is written to the file (one write, no buffer) as soon as
// its request has ended and every earlier arrival has ended or been in flight
// for RecordMaxHold, so the file is sorted and a crash of the process loses
// only the requests in flight and the lines they hold back. Safe for
// concurrent use.
type Recorder struct {
	mu      sync.Mutex
	w       io.Writer
	closer  io.Closer
	salt    [16]byte
	origin  time.Duration
	last    time.Duration // latest arrival given out
	started bool
	next    uint64 // next arrival number
	flushed uint64 // arrivals before this one are written, dropped or late
	done    map[uint64]*Recording
	open    map[uint64]*Recording // begun, not ended
	late    map[uint64]bool       // skipped while in flight: written when they end
	lastTS  time.Duration         // timestamp of the last line written
	line    []byte                // the lines of one write
	timer   *time.Timer           // armed while lines wait for a request in flight
	closed  bool
	err     error
	hist    promptHistory
	// maxHold and wall are RecordMaxHold and time.Now, replaced in tests.
	maxHold time.Duration
	wall    func() time.Time
	// Written and Dropped count the requests written and the ones not written
	// (no 200, no usage, or in flight at Close); Shifted the lines written
	// with a later timestamp than their arrival (RecordMaxHold).
	Written, Dropped, Shifted int
}

// Recording is one request being recorded (Recorder.Begin).
type Recording struct {
	seq     uint64
	arrival time.Duration
	began   time.Time // wall clock, for RecordMaxHold
	body    []byte
	api     apiKind
	conv    string // the conversation's history key
	session string
	ok      bool
	// The line, once ended OK.
	ids            []int64
	prompt, output int
}

// NewRecorder returns a Recorder writing to w (closed by Close when it is an
// io.Closer), with a random salt.
func NewRecorder(w io.Writer) (*Recorder, error) {
	r := &Recorder{w: w, done: map[uint64]*Recording{}, open: map[uint64]*Recording{}, late: map[uint64]bool{},
		maxHold: RecordMaxHold, wall: time.Now}
	if c, ok := w.(io.Closer); ok {
		r.closer = c
	}
	if _, err := rand.Read(r.salt[:]); err != nil {
		return nil, fmt.Errorf("recording: salt: %w", err)
	}
	return r, nil
}

// Begin notes a request arriving at now (simulated or wall time, one clock for
// the file) with its body (kept, not copied, until End) and session key; End
// must follow.
func (r *Recorder) Begin(now time.Duration, body []byte, sessionKey string) *Recording {
	return r.begin(now, body, sessionKey, "", guessAPI(body))
}

// begin is Begin with the Claude Code agent id (X-Claude-Code-Agent-Id: a
// subagent's turns form a conversation of their own) and the API of the path.
func (r *Recorder) begin(now time.Duration, body []byte, sessionKey, agent string, api apiKind) *Recording {
	session := ""
	if sessionKey != "" {
		h := sha256.Sum256(append(r.salt[:], sessionKey...))
		session = hex.EncodeToString(h[:12])
	}
	rec := &Recording{body: body, api: api, session: session, conv: session + "\x00" + agent}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.started, r.origin = true, now
	}
	// Arrivals are numbered in the order they take the lock; an instant read
	// just before a concurrent arrival's is moved up to it, so the file stays
	// sorted (by at most the time between the two reads).
	r.last = max(r.last, now-r.origin)
	rec.seq, rec.arrival, rec.began = r.next, r.last, r.wall()
	r.open[rec.seq] = rec
	r.next++
	return rec
}

// End records how rec ended: ok (a complete 200) with the usage's prompt and
// output tokens. It hashes the prompt and writes every line now due.
func (r *Recorder) End(rec *Recording, ok bool, promptTokens, outputTokens int) {
	if rec == nil {
		return
	}
	if ok && promptTokens > 0 {
		rec.ok = true
		rec.ids = r.promptIDs(rec, promptTokens)
		rec.prompt, rec.output = promptTokens, max(0, outputTokens)
	}
	rec.body = nil
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, rec.seq)
	if r.closed {
		return
	}
	if r.late[rec.seq] {
		delete(r.late, rec.seq)
		r.emit(rec)
		r.writeOut()
		return
	}
	r.done[rec.seq] = rec
	r.drain()
}

// promptIDs returns the block ids of rec's prompt of tokens tokens, and
// remembers them for the conversation's later turns.
func (r *Recorder) promptIDs(rec *Recording, tokens int) []int64 {
	var cands [historyPrompts]*recordedPrompt
	s := newPromptHasher(r.salt[:], r.hist.recent(rec.conv, cands[:0]))
	s.walk(rec.body, rec.api)
	ids, ckpts, n, sum := s.finish()
	s.release()
	need := (tokens + tracefmt.DefaultBlockSize - 1) / tracefmt.DefaultBlockSize
	if len(ids) > need {
		ids = ids[:need]
	}
	for i := len(ids); i < need; i++ {
		ids = append(ids, r.uniqueID(rec.seq, i))
	}
	if n > 0 {
		full := tokens / tracefmt.DefaultBlockSize
		keep := ckpts[:0]
		for _, c := range ckpts {
			if c.n <= full {
				keep = append(keep, c)
			}
		}
		keep = append(keep, checkpoint{off: n, sum: sum, n: full, count: tokens})
		r.hist.add(rec.conv, &recordedPrompt{ids: ids[:full:full], ckpts: keep})
	}
	return ids
}

// drain writes the lines now due, in arrival order: an arrival still in
// flight holds back the later ones for at most maxHold. Called with mu held.
func (r *Recorder) drain() {
	now := r.wall()
	for r.flushed < r.next {
		if d := r.done[r.flushed]; d != nil {
			delete(r.done, r.flushed)
			r.flushed++
			r.emit(d)
			continue
		}
		o := r.open[r.flushed]
		if o == nil { // cannot happen: every arrival is open or done
			r.flushed++
			continue
		}
		if len(r.done) == 0 {
			break // nothing waits for it
		}
		if wait := o.began.Add(r.maxHold).Sub(now); wait > 0 {
			// Come back when it has been in flight for maxHold.
			if r.timer == nil {
				r.timer = time.AfterFunc(wait, r.tick)
			} else {
				r.timer.Reset(wait)
			}
			break
		}
		r.late[r.flushed] = true
		r.flushed++
	}
	r.writeOut()
}

// tick drains once a request in flight has held lines back for maxHold.
func (r *Recorder) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.drain()
	}
}

// emit adds d's line to the pending write (or counts it dropped). Called with
// mu held.
func (r *Recorder) emit(d *Recording) {
	if !d.ok {
		r.Dropped++
		return
	}
	ts := d.arrival
	if ts < r.lastTS {
		ts = r.lastTS // a late line: the file stays sorted
		r.Shifted++
	}
	r.lastTS = ts
	b, err := tracefmt.Marshal(ts, d.prompt, d.output, d.ids, d.session)
	if err != nil {
		r.fail(err)
		return
	}
	r.line = append(r.line, b...)
	r.Written++
}

// writeOut writes the pending lines in one write. Called with mu held.
func (r *Recorder) writeOut() {
	if len(r.line) == 0 {
		return
	}
	if _, err := r.w.Write(r.line); err != nil {
		r.fail(err)
	}
	r.line = r.line[:0]
}

func (r *Recorder) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Flush returns the first write error; lines are written as they are due, so
// there is nothing to flush.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close writes the lines of every ended request (requests still in flight are
// counted dropped; they end unrecorded) and closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	if !r.closed {
		if r.timer != nil {
			r.timer.Stop()
		}
		for ; r.flushed < r.next; r.flushed++ {
			if d := r.done[r.flushed]; d != nil {
				r.emit(d)
			} else {
				r.Dropped++
			}
		}
		r.Dropped += len(r.late)
		clear(r.done)
		clear(r.late)
		r.writeOut()
		r.closed = true
	}
	err := r.err
	r.mu.Unlock()
	if r.closer != nil {
		if cerr := r.closer.Close(); err == nil {
			err = cerr
		}
		r.closer = nil
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

// recordView is the admin API's view of the recording switch.
type recordView struct {
	Enabled bool `json:"enabled"`
	Written int  `json:"written"`
	Dropped int  `json:"dropped"`
	Shifted int  `json:"shifted"`
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
	v := recordView{Enabled: rt.proxy.recorder.Load() != nil, Written: rec.Written, Dropped: rec.Dropped, Shifted: rec.Shifted}
	rec.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}
