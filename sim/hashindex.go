package sim

// hashIndex maps a block hash (never 0) to the block id that holds it: the prefix
// cache's hash -> block map (vLLM BlockPool.cached_block_hash_to_block).
//
// It is an open-addressing table with linear probing and backward-shift deletion,
// sized at twice the block count or more, so a lookup probes one or two slots. Go's
// built-in map would do, but a prefix cache deletes and inserts entries on nearly
// every step (evictions), and a miss in a built-in map with many deleted slots probes
// long sequences: the prefix lookups of a 64-replica virtual run spent a third of
// their time there. Keys are the chained block hashes, already well mixed (mix64), so
// their low bits index the table directly.
type hashIndex struct {
	keys []uint64 // 0 = empty slot
	vals []int32
	mask uint64
	n    int
}

func newHashIndex(capacity int) hashIndex {
	size := 16
	for size < 2*capacity {
		size <<= 1
	}
	return hashIndex{keys: make([]uint64, size), vals: make([]int32, size), mask: uint64(size - 1)}
}

// get returns the block holding h.
func (x *hashIndex) get(h uint64) (int32, bool) {
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		switch x.keys[i] {
		case h:
			return x.vals[i], true
		case 0:
			return 0, false
		}
	}
}

// put maps h to id, replacing any previous mapping. The table never fills: it holds
// at most one entry per block and has twice as many slots.
func (x *hashIndex) put(h uint64, id int32) {
	i := h & x.mask
	for x.keys[i] != 0 && x.keys[i] != h {
		i = (i + 1) & x.mask
	}
	if x.keys[i] == 0 {
		x.n++
	}
	x.keys[i], x.vals[i] = h, id
}

// del removes h if present, then shifts back the entries of its probe run so that
// no lookup needs a tombstone.
func (x *hashIndex) del(h uint64) {
	i := h & x.mask
	for x.keys[i] != h {
		if x.keys[i] == 0 {
			return
		}
		i = (i + 1) & x.mask
	}
	x.n--
	for j := (i + 1) & x.mask; x.keys[j] != 0; j = (j + 1) & x.mask {
		home := x.keys[j] & x.mask
		// The entry at j may move to the hole at i if its home does not lie
		// cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.keys[i], x.vals[i] = x.keys[j], x.vals[j]
			i = j
		}
	}
	x.keys[i], x.vals[i] = 0, 0
}

// len is the number of entries.
func (x *hashIndex) len() int { return x.n }

// clear removes every entry.
func (x *hashIndex) clear() {
	clear(x.keys)
	clear(x.vals)
	x.n = 0
}

// all calls f for every entry (in table order), for tests and checks.
func (x *hashIndex) all(f func(h uint64, id int32)) {
	for i, k := range x.keys {
		if k != 0 {
			f(k, x.vals[i])
		}
	}
}
