package router

import (
	"hash/maphash"
	"time"
)

// Session table defaults.
const (
	// DefaultSessionTTL is how long a session keeps its home without a request
	// (the 1 h idle TTL AIBrix uses; SGLang's gateway keeps 4 h, brief peers.md).
	DefaultSessionTTL = time.Hour
	// DefaultMaxSessions bounds the session table; beyond it the least recently
	// used session is forgotten (about 60 bytes per session, so ~60 MB at the bound).
	DefaultMaxSessions = 1_000_000
	// DefaultActiveWindow: a homed session counts as active on its replica while its
	// last request is at most this old. Active sessions are the third placement
	// criterion (see Sticky).
	DefaultActiveWindow = 5 * time.Minute
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

	homed  []int
	active []int
}

type sessEntry struct {
	hash       uint64
	last       time.Duration
	prev, next int32 // prev: more recent neighbour; next: less recent
	home       int32
	active     bool
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
		free:  -1, head: -1, tail: -1, activeTail: -1,
	}
}

func (t *SessionTable) hash(key string) uint64 { return maphash.String(t.seed, key) }

// Lookup returns the home of key and marks the session used now; ok is false when
// the key is unknown or its session idled longer than the TTL.
func (t *SessionTable) Lookup(key string) (home int, ok bool) {
	now := t.now()
	t.expire(now)
	h := t.lookup(now, t.hash(key))
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
	if i < 0 || i >= len(t.homed) {
		return 0
	}
	return t.homed[i]
}

// Active returns the number of sessions homed on replica i whose last request is
// within the active window.
func (t *SessionTable) Active(i int) int {
	if i < 0 || i >= len(t.active) {
		return 0
	}
	return t.active[i]
}

// Reset forgets every session.
func (t *SessionTable) Reset() {
	clear(t.index)
	t.ents = t.ents[:0]
	t.free, t.head, t.tail, t.activeTail = -1, -1, -1, -1
	clear(t.homed)
	clear(t.active)
}

// grow makes room for per-replica counts of n replicas.
func (t *SessionTable) grow(n int) {
	for len(t.homed) < n {
		t.homed = append(t.homed, 0)
		t.active = append(t.active, 0)
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
}

// lookup returns the home of hash h (touching it) or -1. The caller has expired.
func (t *SessionTable) lookup(now time.Duration, h uint64) int {
	idx, ok := t.index[h]
	if !ok {
		return -1
	}
	t.touch(idx, now)
	return int(t.ents[idx].home)
}

func (t *SessionTable) set(now time.Duration, h uint64, home int) {
	t.grow(home + 1)
	if idx, ok := t.index[h]; ok {
		e := &t.ents[idx]
		if old := int(e.home); old != home {
			t.homed[old]--
			t.homed[home]++
			if e.active {
				t.active[old]--
				t.active[home]++
			}
			e.home = int32(home)
		}
		t.touch(idx, now)
		return
	}
	if len(t.index) >= t.max {
		t.remove(t.tail)
	}
	var idx int32
	if t.free >= 0 {
		idx = t.free
		t.free = t.ents[idx].next
	} else {
		t.ents = append(t.ents, sessEntry{})
		idx = int32(len(t.ents) - 1)
	}
	t.ents[idx] = sessEntry{hash: h, last: now, prev: -1, next: -1, home: int32(home), active: true}
	t.pushFront(idx)
	t.index[h] = idx
	t.homed[home]++
	t.active[home]++
	if t.activeTail < 0 {
		t.activeTail = idx
	}
}

// touch marks entry idx used at now and moves it to the head.
func (t *SessionTable) touch(idx int32, now time.Duration) {
	e := &t.ents[idx]
	if idx != t.head {
		if idx == t.activeTail {
			t.activeTail = e.prev // the next more recent entry, active too
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
}

func (t *SessionTable) remove(idx int32) {
	e := &t.ents[idx]
	if idx == t.activeTail {
		t.activeTail = e.prev
	}
	if e.active {
		t.active[e.home]--
	}
	t.homed[e.home]--
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
