package sim

// hashIndex maps a block hash (never 0) to the block id that holds it: the prefix
// cache's hash -> block map (vLLM BlockPool.cached_block_hash_to_block).
//
// It is an open-addressing table with linear probing and backward-shift deletion,
// sized at twice the block count or more, so a lookup probes one or two slots. Go's
// built-in map would do, but a prefix cache deletes and inserts entries on nearly
// every step (evictions), and misses in a built-in map that has seen many deletions
// probe long sequences: the prefix lookups of a 64-replica virtual run spent a third
// of their time there. Keys are the chained block hashes, already well mixed (mix64),
// so their low bits index the table directly.
type hashIndex struct {
	slots []hashSlot
	mask  uint64
	n     int
}

// hashSlot is one table entry: key and value side by side, one cache line access.
type hashSlot struct {
	key uint64 // 0 = empty
	id  int32
}

func newHashIndex(capacity int) hashIndex {
	size := 16
	for size < 2*capacity {
		size <<= 1
	}
	return hashIndex{slots: make([]hashSlot, size), mask: uint64(size - 1)}
}

// get returns the block holding h.
func (x *hashIndex) get(h uint64) (int32, bool) {
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		switch s := x.slots[i]; s.key {
		case h:
			return s.id, true
		case 0:
			return 0, false
		}
	}
}

// put maps h to id, replacing any previous mapping. The table never fills: it holds
// at most one entry per block and has twice as many slots.
func (x *hashIndex) put(h uint64, id int32) {
	i := h & x.mask
	for x.slots[i].key != 0 && x.slots[i].key != h {
		i = (i + 1) & x.mask
	}
	if x.slots[i].key == 0 {
		x.n++
	}
	x.slots[i] = hashSlot{key: h, id: id}
}

// add maps h to id unless h is present already, and reports whether it did: get
// then put in one probe.
func (x *hashIndex) add(h uint64, id int32) bool {
	i := h & x.mask
	for {
		switch x.slots[i].key {
		case h:
			return false
		case 0:
			x.slots[i] = hashSlot{key: h, id: id}
			x.n++
			return true
		}
		i = (i + 1) & x.mask
	}
}

// del removes h if present, then shifts back the later entries of its probe run, so
// that lookups never need tombstones.
func (x *hashIndex) del(h uint64) {
	i := h & x.mask
	for x.slots[i].key != h {
		if x.slots[i].key == 0 {
			return
		}
		i = (i + 1) & x.mask
	}
	x.n--
	for j := (i + 1) & x.mask; x.slots[j].key != 0; j = (j + 1) & x.mask {
		home := x.slots[j].key & x.mask
		// The entry at j may fill the hole at i unless its home lies cyclically in
		// (i, j], where a probe from home would stop at the hole before reaching it.
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = hashSlot{}
}

// len is the number of entries.
func (x *hashIndex) len() int { return x.n }

// clear removes every entry.
func (x *hashIndex) clear() {
	clear(x.slots)
	x.n = 0
}

// all calls f for every entry (in table order), for tests and checks.
func (x *hashIndex) all(f func(h uint64, id int32)) {
	for _, s := range x.slots {
		if s.key != 0 {
			f(s.key, s.id)
		}
	}
}
