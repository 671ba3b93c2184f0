package router

import (
	"hash/maphash"
	"time"
)

// Session table defaults.
const (
	// DefaultSessionTTL is how long a session keeps its home without a request
	// (the 1 h idle TTL AIBrix's gateway uses; SGLang's model gateway keeps 4 h).
	DefaultSessionTTL = time.Hour
	// DefaultMaxSessions bounds the session table; beyond it a session seen only
	// once is forgotten first, else the least recently used (SessionTable; about
	// 70 bytes per session, so ~70 MB at the bound).
	DefaultMaxSessions = 1_000_000
	// DefaultActiveWindow: a homed session counts as active on its replica while its
	// last request is at most this old. Active sessions are the third placement
	// criterion (see Sticky).
	DefaultActiveWindow = 5 * time.Minute

	// Live-conversation window (see SessionTable.LiveWindow). A session is live on
	// its home while its last request is at most LiveWindow old. With no fixed
	// window configured, the window is LiveGapFactor x the 90th percentile of the
	// recent gaps between consecutive requests of one session (the last
	// liveGapSamples gaps), clamped to [MinLiveWindow, DefaultActiveWindow]; until
	// minLiveGaps gaps are seen it is DefaultLiveWindow. A gap is a turn's
	// duration plus the client's time between turns, so a conversation whose next
	// request is later than twice the usual gap has most likely ended.
	DefaultLiveWindow = time.Minute
	MinLiveWindow     = 5 * time.Second
	LiveGapFactor     = 2
)

const (
	liveGapSamples = 128 // ring of recent inter-request gaps
	minLiveGaps    = 16  // gaps needed before the window adapts
	liveRecompute  = 16  // recompute the percentile every this many gaps
)

// SessionTable maps session keys to their home replica, with an idle TTL, an LRU size
// bound and per-replica counts of homed and active sessions. Keys are not stored:
// the table keeps a 64-bit hash of each key (hash/maphash, seeded per table), so no
// session id sits in router memory; two keys colliding (probability about n²/2⁶⁵,
// ~3e-8 at a million keys) would share a home, which is harmless.
//
// Entries live in one slice linked as a list ordered by last use (most recent at the
// head), so lookups, touches, TTL expiry and LRU eviction are O(1) (amortized) and a
// lookup of a known key allocates nothing. Time comes from the injected clock.
//
// At the bound the table evicts a session seen only once (on probation: a second
// list in creation order) before any session with two or more requests, so a flood
// of one-request session ids (untrusted clients; ai-dynamo/dynamo#14570 filled its table that
// way) evicts only its own kind and never a running conversation's home. Only when
// no session is on probation does the least recently used one go.
//
// A SessionTable is not safe for concurrent use; the Balancer guards it with its lock.
type SessionTable struct {
	now    func() time.Duration
	ttl    time.Duration
	window time.Duration
	max    int
	seed   maphash.Seed

	index map[uint64]int32
	ents  []sessEntry
	free  int32 // head of the free-slot list (linked through next), -1 none
	head  int32 // most recently used, -1 when empty
	tail  int32 // least recently used, -1 when empty
	// activeTail is the least recently used entry that is still active; every entry
	// from head to activeTail is active, every entry after it is not. -1: none active.
	activeTail int32
	// Probation list: sessions with one request so far, oldest at pTail; linked
	// through sessEntry.pPrev/pNext. -1: empty.
	pHead, pTail int32

	homed  []int
	active []int

	// Live conversations: entries from head to liveTail are within the live
	// window (see DefaultLiveWindow); live and liveTokens count them per replica.
	liveTail   int32
	liveFixed  time.Duration // > 0: fixed window; 0: adaptive
	liveWin    time.Duration // window in force
	live       []int
	liveTokens []int64
	gaps       gapWindow // recent inter-request gaps -> adaptive live window
}

type sessEntry struct {
	hash       uint64
	last       time.Duration
	prev, next int32 // prev: more recent neighbour; next: less recent
	home       int32
	tokens     int32 // context estimate: prompt tokens of the last full-size request (0 unknown)
	// size is the last full-size request's own measure (body bytes, or exact
	// prompt tokens when no body size is known: Facts.SideMeasure): the side
	// request test compares like with like, so it does not drift with the
	// bytes-per-token ratio other traffic moves.
	size int32
	// tokensAt is when tokens was set: a side request (see contextTokens) within
	// the live window of it leaves tokens alone.
	tokensAt time.Duration
	// served is the exact prompt size in tokens of the session's latest request
	// served at its home, from that request's usage (observeCache); 0 unknown.
	served int32
	// overflow is 1 + the replica the session's latest overflow went to (0:
	// none): Sticky sends the next overflow there while it still has room.
	overflow int32
	servedAt time.Duration // when served was set
	active   bool
	live     bool
	// lost: the latest request served at home read less than half of served's
	// previous value from the prefix cache (observeCache).
	lost bool
	// routedAgain: a request of the session was routed after the one that
	// created the entry (lookup found it), so unplace leaves it alone.
	routedAgain bool
	// offline: the home was placed while the shared store did not answer
	// (Balancer.acquireShared), so a home another router held from before the
	// outage wins over it when the store is back.
	offline bool
	// probation: on the probation list (one request so far).
	probation    bool
	pPrev, pNext int32 // probation list neighbours: pPrev newer, pNext older
}

// NewSessionTable returns an empty table. ttl 0 means DefaultSessionTTL, max 0
// DefaultMaxSessions, window 0 DefaultActiveWindow; now is required.
func NewSessionTable(now func() time.Duration, ttl time.Duration, max int, window time.Duration) *SessionTable {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if window <= 0 {
		window = DefaultActiveWindow
	}
	return &SessionTable{
		now: now, ttl: ttl, max: max, window: window,
		seed:  maphash.MakeSeed(),
		index: make(map[uint64]int32),
		free:  -1, head: -1, tail: -1, activeTail: -1, liveTail: -1, pHead: -1, pTail: -1,
		liveWin: DefaultLiveWindow,
		gaps:    newGapWindow(liveGapSamples, minLiveGaps, liveRecompute, LiveGapFactor, MinLiveWindow, DefaultActiveWindow),
	}
}

// SetLiveWindow fixes the live window to d; d <= 0 makes it adaptive (the
// default; see DefaultLiveWindow).
func (t *SessionTable) SetLiveWindow(d time.Duration) {
	t.liveFixed = max(0, d)
	if d > 0 {
		t.liveWin = d
	} else {
		t.adaptLiveWindow()
	}
}

// LiveWindow returns the live window in force.
func (t *SessionTable) LiveWindow() time.Duration { return t.liveWin }

// Live returns the number of sessions homed on replica i whose last request is
// within the live window.
func (t *SessionTable) Live(i int) int {
	return at(t.live, i)
}

// LiveTokens returns the sum of the context estimates (SetTokens) of the live
// sessions homed on replica i, in tokens.
func (t *SessionTable) LiveTokens(i int) int64 {
	return at(t.liveTokens, i)
}

// recordGap adds one inter-request gap of a session to the ring and, every
// liveRecompute gaps, re-derives the adaptive live window.
func (t *SessionTable) recordGap(g time.Duration) {
	if t.gaps.add(g) {
		t.adaptLiveWindow()
	}
}

func (t *SessionTable) adaptLiveWindow() {
	if t.liveFixed > 0 {
		return
	}
	if d, ok := t.gaps.window(); ok {
		t.liveWin = d
	} else {
		t.liveWin = DefaultLiveWindow
	}
}

func (t *SessionTable) hash(key string) uint64 { return maphash.String(t.seed, key) }

// Lookup returns the home of key and marks the session used now; ok is false when
// the key is unknown or its session idled longer than the TTL.
func (t *SessionTable) Lookup(key string) (home int, ok bool) {
	now := t.now()
	t.expire(now)
	h, _ := t.lookup(now, t.hash(key), false)
	return h, h >= 0
}

// Set homes key on replica home (moving it if it had another home) and marks it used.
func (t *SessionTable) Set(key string, home int) {
	now := t.now()
	t.expire(now)
	t.set(now, t.hash(key), home)
}

// Len returns the number of sessions in the table.
func (t *SessionTable) Len() int { return len(t.index) }

// Homed returns the number of sessions homed on replica i.
func (t *SessionTable) Homed(i int) int {
	return at(t.homed, i)
}

// Active returns the number of sessions homed on replica i whose last request is
// within the active window.
func (t *SessionTable) Active(i int) int {
	return at(t.active, i)
}

// Reset forgets every session.
func (t *SessionTable) Reset() {
	clear(t.index)
	t.ents = t.ents[:0]
	t.free, t.head, t.tail, t.activeTail = -1, -1, -1, -1
	t.pHead, t.pTail = -1, -1
	clear(t.homed)
	clear(t.active)
	t.liveTail = -1
	clear(t.live)
	clear(t.liveTokens)
	t.gaps.reset()
	t.adaptLiveWindow()
}

// grow makes room for per-replica counts of n replicas.
func (t *SessionTable) grow(n int) {
	for len(t.homed) < n {
		t.homed = append(t.homed, 0)
		t.active = append(t.active, 0)
		t.live = append(t.live, 0)
		t.liveTokens = append(t.liveTokens, 0)
	}
}

// expire forgets sessions idle longer than the TTL and moves sessions out of the
// active window; amortized O(1) per call.
func (t *SessionTable) expire(now time.Duration) {
	for t.tail >= 0 && now-t.ents[t.tail].last > t.ttl {
		t.remove(t.tail)
	}
	for t.activeTail >= 0 && now-t.ents[t.activeTail].last > t.window {
		e := &t.ents[t.activeTail]
		e.active = false
		t.active[e.home]--
		t.activeTail = e.prev
	}
	t.expireLive(now)
}

// expireLive moves entries out of (or, after the window grew, back into) the
// live window.
func (t *SessionTable) expireLive(now time.Duration) {
	for t.liveTail >= 0 && now-t.ents[t.liveTail].last > t.liveWin {
		e := &t.ents[t.liveTail]
		e.live = false
		t.live[e.home]--
		t.liveTokens[e.home] -= int64(e.tokens)
		t.liveTail = e.prev
	}
	next := t.head
	if t.liveTail >= 0 {
		next = t.ents[t.liveTail].next
	}
	for next >= 0 && now-t.ents[next].last <= t.liveWin {
		e := &t.ents[next]
		e.live = true
		t.live[e.home]++
		t.liveTokens[e.home] += int64(e.tokens)
		t.liveTail = next
		next = e.next
	}
}

// contextTokens returns the context estimate in tokens that a request of prompt
// tokens and the given size (its body bytes, or its exact prompt tokens: see
// sessEntry.size) gives the session with hash h at now, and whether the request
// is a side request: one under half of the size of the session's last full-size
// request, set within the live window. Claude Code sends its side requests (title
// and topic classification) with the conversation's session id and a short prompt
// (docs/router.md section 4); the conversation's context is still what its next turn reads
// from the cache, so a side request keeps the estimate. After a compaction the
// conversation really is shorter: its short turns set the estimate once the live
// window since the last full-size request has passed. An unknown hash, no
// estimate yet or tokens <= 0 give tokens and false.
func (t *SessionTable) contextTokens(h uint64, now time.Duration, tokens, size int) (int, bool) {
	idx, ok := t.index[h]
	if !ok || tokens <= 0 {
		return tokens, false
	}
	e := &t.ents[idx]
	if e.tokens > 0 && e.size > 0 && int64(size)*2 < int64(e.size) && now-e.tokensAt <= t.liveWin {
		return int(e.tokens), true
	}
	return tokens, false
}

// setTokens records the context estimate of the session with hash h from a
// request of prompt tokens and size (as for contextTokens) at now; side is what
// contextTokens said of that request (a side request leaves the estimate alone).
// No-op for an unknown hash or tokens <= 0.
func (t *SessionTable) setTokens(h uint64, now time.Duration, tokens, size int, side bool) {
	idx, ok := t.index[h]
	if !ok || tokens <= 0 || side {
		return
	}
	e := &t.ents[idx]
	tok := int32(min(tokens, 1<<31-1))
	if e.live {
		t.liveTokens[e.home] += int64(tok) - int64(e.tokens)
	}
	e.tokens, e.tokensAt = tok, now
	e.size = int32(min(size, 1<<31-1))
}

// observeCache records the prefix-cache outcome of a finished request of the
// session with hash h that was served on replica: prompt tokens in total, cached of
// them read from the cache (usage: cached_tokens, cache_read_input_tokens). Only a
// request served at the session's home counts. The session is marked lost when
// cached is less than half of the prompt of its previous request served at home:
// the replica kept less than half of what the conversation had sent it before, so
// its context was evicted between the two turns (what still hits is a prefix other
// conversations share). The first observation only records the size. A request
// under half of the exact prompt of the session's previous request served at home
// within the live window (a side request, as in contextTokens) reads a different,
// short prompt and says nothing about the conversation's context: it is ignored.
// Both sizes are exact, so the test does not drift with the bytes-per-token
// estimate. No-op for an unknown hash or prompt <= 0.
func (t *SessionTable) observeCache(h uint64, now time.Duration, replica, prompt, cached int) {
	idx, ok := t.index[h]
	if !ok || prompt <= 0 {
		return
	}
	e := &t.ents[idx]
	if int(e.home) != replica {
		return
	}
	if e.served > 0 && int64(prompt)*2 < int64(e.served) && now-e.servedAt <= t.liveWin {
		return
	}
	if e.served > 0 {
		e.lost = int64(cached)*2 < int64(e.served)
	}
	e.served, e.servedAt = int32(min(prompt, 1<<31-1)), now
}

// SetTokens records key's context estimate in tokens from the prompt size of
// its latest request (a side request under half of it within the live window
// leaves it; see contextTokens); it counts in LiveTokens of the session's home
// while live.
func (t *SessionTable) SetTokens(key string, tokens int) {
	h, now := t.hash(key), t.now()
	_, side := t.contextTokens(h, now, tokens, tokens)
	t.setTokens(h, now, tokens, tokens, side)
}

// lookup returns the home of hash h (touching it) or -1, and whether the session
// is marked lost (observeCache). The gap since the session's previous request
// feeds the live window unless side is set (a side request goes out with a turn,
// so its gap says nothing about the pauses between turns). The caller has
// expired.
func (t *SessionTable) lookup(now time.Duration, h uint64, side bool) (home int, lost bool) {
	idx, ok := t.index[h]
	if !ok {
		return -1, false
	}
	if !side {
		t.recordGap(now - t.ents[idx].last)
	}
	t.touch(idx, now)
	e := &t.ents[idx]
	e.routedAgain = true
	t.unprobate(idx)
	return int(e.home), e.lost
}

// overflowTarget returns the replica hash h's latest overflow went to, or -1.
func (t *SessionTable) overflowTarget(h uint64) int {
	if idx, ok := t.index[h]; ok {
		return int(t.ents[idx].overflow) - 1
	}
	return -1
}

// setOverflow records that hash h's request overflowed to replica i.
func (t *SessionTable) setOverflow(h uint64, i int) {
	if idx, ok := t.index[h]; ok {
		t.ents[idx].overflow = int32(i) + 1
	}
}

// unplace removes hash h's entry if its home is still home and no request of
// the session has been routed since the one that created it; it reports whether
// it did.
func (t *SessionTable) unplace(h uint64, home int) bool {
	idx, ok := t.index[h]
	if !ok || int(t.ents[idx].home) != home || t.ents[idx].routedAgain {
		return false
	}
	t.remove(idx)
	return true
}

// setOffline marks hash h's home as placed without the shared store (or,
// off false, as one the store holds).
func (t *SessionTable) setOffline(h uint64, off bool) {
	if idx, ok := t.index[h]; ok {
		t.ents[idx].offline = off
	}
}

// offline reports whether hash h's home was placed without the shared store
// (false for an unknown session).
func (t *SessionTable) offline(h uint64) bool {
	idx, ok := t.index[h]
	return ok && t.ents[idx].offline
}

// adopt homes hash h on replica home as another router recorded it (a shared
// store), without counting a request: an existing entry moves, untouched; a new
// one is created at now. It reports whether it created the entry.
func (t *SessionTable) adopt(now time.Duration, h uint64, home int) bool {
	if idx, ok := t.index[h]; ok {
		t.grow(home + 1)
		t.move(idx, home)
		return false
	}
	t.set(now, h, home)
	return true
}

// move changes entry idx's home, keeping the per-replica counts (no-op when
// home is its home already).
func (t *SessionTable) move(idx int32, home int) {
	e := &t.ents[idx]
	if old := int(e.home); old != home {
		t.homed[old]--
		t.homed[home]++
		if e.active {
			t.active[old]--
			t.active[home]++
		}
		if e.live {
			t.live[old]--
			t.live[home]++
			t.liveTokens[old] -= int64(e.tokens)
			t.liveTokens[home] += int64(e.tokens)
		}
		e.home = int32(home)
		// The new home has served nothing yet; lost stays until a request
		// served there reads its previous context from the cache.
		e.served = 0
		e.overflow = 0
	}
}

func (t *SessionTable) set(now time.Duration, h uint64, home int) {
	t.grow(home + 1)
	if idx, ok := t.index[h]; ok {
		t.move(idx, home)
		t.touch(idx, now)
		return
	}
	if len(t.index) >= t.max {
		t.evict()
	}
	var idx int32
	if t.free >= 0 {
		idx = t.free
		t.free = t.ents[idx].next
	} else {
		t.ents = append(t.ents, sessEntry{})
		idx = int32(len(t.ents) - 1)
	}
	t.ents[idx] = sessEntry{hash: h, last: now, prev: -1, next: -1, home: int32(home), active: true, live: true}
	t.pushFront(idx)
	t.probate(idx)
	t.index[h] = idx
	t.homed[home]++
	t.active[home]++
	t.live[home]++
	if t.activeTail < 0 {
		t.activeTail = idx
	}
	if t.liveTail < 0 {
		t.liveTail = idx
	}
}

// touch marks entry idx used at now and moves it to the head.
func (t *SessionTable) touch(idx int32, now time.Duration) {
	e := &t.ents[idx]
	if idx != t.head {
		if idx == t.activeTail {
			t.activeTail = e.prev // the next more recent entry, active too
		}
		if idx == t.liveTail {
			t.liveTail = e.prev
		}
		t.unlink(idx)
		t.pushFront(idx)
	}
	e.last = now
	if !e.active {
		e.active = true
		t.active[e.home]++
		if t.activeTail < 0 {
			t.activeTail = idx
		}
	}
	if !e.live {
		e.live = true
		t.live[e.home]++
		t.liveTokens[e.home] += int64(e.tokens)
		if t.liveTail < 0 {
			t.liveTail = idx
		}
	}
}

func (t *SessionTable) remove(idx int32) {
	e := &t.ents[idx]
	if idx == t.activeTail {
		t.activeTail = e.prev
	}
	if idx == t.liveTail {
		t.liveTail = e.prev
	}
	if e.active {
		t.active[e.home]--
	}
	if e.live {
		t.live[e.home]--
		t.liveTokens[e.home] -= int64(e.tokens)
	}
	t.homed[e.home]--
	t.unprobate(idx)
	delete(t.index, e.hash)
	t.unlink(idx)
	e.next = t.free
	t.free = idx
}

func (t *SessionTable) unlink(idx int32) {
	e := &t.ents[idx]
	if e.prev >= 0 {
		t.ents[e.prev].next = e.next
	} else {
		t.head = e.next
	}
	if e.next >= 0 {
		t.ents[e.next].prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (t *SessionTable) pushFront(idx int32) {
	e := &t.ents[idx]
	e.prev, e.next = -1, t.head
	if t.head >= 0 {
		t.ents[t.head].prev = idx
	}
	t.head = idx
	if t.tail < 0 {
		t.tail = idx
	}
}

// evict makes room for one entry: the oldest session on probation, else the
// least recently used one.
func (t *SessionTable) evict() {
	if t.pTail >= 0 {
		t.remove(t.pTail)
		return
	}
	t.remove(t.tail)
}

// probate puts entry idx at the head of the probation list.
func (t *SessionTable) probate(idx int32) {
	e := &t.ents[idx]
	e.probation = true
	e.pPrev, e.pNext = -1, t.pHead
	if t.pHead >= 0 {
		t.ents[t.pHead].pPrev = idx
	}
	t.pHead = idx
	if t.pTail < 0 {
		t.pTail = idx
	}
}

// unprobate takes entry idx off the probation list, if it is on it.
func (t *SessionTable) unprobate(idx int32) {
	e := &t.ents[idx]
	if !e.probation {
		return
	}
	e.probation = false
	if e.pPrev >= 0 {
		t.ents[e.pPrev].pNext = e.pNext
	} else {
		t.pHead = e.pNext
	}
	if e.pNext >= 0 {
		t.ents[e.pNext].pPrev = e.pPrev
	} else {
		t.pTail = e.pPrev
	}
	e.pPrev, e.pNext = -1, -1
}

// at returns s[i], or the zero value when i is out of range (an unknown replica).
func at[T any](s []T, i int) T {
	if i < 0 || i >= len(s) {
		var zero T
		return zero
	}
	return s[i]
}

// home returns the home of hash h without touching it (-1 when unknown).
func (t *SessionTable) home(h uint64) int {
	if idx, ok := t.index[h]; ok {
		return int(t.ents[idx].home)
	}
	return -1
}
