package trace

import "math"

// LRU is a prefix cache over block ids holding at most a fixed number of blocks,
// evicting the least recently used. It follows vLLM's block pool (v1/core/
// block_pool.py, kv_cache_manager.py): a request hits the longest leading run of
// its full blocks that are cached; then all its full blocks are cached and
// touched deepest first, so that its first block is the most recent (vLLM frees a
// finished request's blocks in reverse order, so its tail is evicted first). Only
// full blocks are cached. A capacity of math.MaxInt is an unbounded cache.
type LRU struct {
	capacity   int
	slot       map[int64]int32 // block id -> node
	nodes      []lruNode
	head, tail int32 // most and least recent; -1 when empty
	free       []int32
}

type lruNode struct {
	id         int64
	prev, next int32
}

// NewLRU returns an empty cache of capacity blocks (at least 1).
func NewLRU(capacity int) *LRU {
	return &LRU{capacity: max(1, capacity), slot: map[int64]int32{}, head: -1, tail: -1}
}

// Len returns the blocks held.
func (c *LRU) Len() int { return len(c.slot) }

// Access looks up the first full blocks of ids and then caches them; it returns
// how many leading blocks hit.
func (c *LRU) Access(ids []int64, full int) int {
	full = min(full, len(ids))
	hit := 0
	for hit < full {
		if _, ok := c.slot[ids[hit]]; !ok {
			break
		}
		hit++
	}
	for i := full - 1; i >= 0; i-- {
		c.touch(ids[i])
	}
	return hit
}

func (c *LRU) touch(id int64) {
	if n, ok := c.slot[id]; ok {
		c.unlink(n)
		c.pushFront(n)
		return
	}
	var n int32
	if k := len(c.free); k > 0 {
		n, c.free = c.free[k-1], c.free[:k-1]
	} else {
		n = int32(len(c.nodes))
		c.nodes = append(c.nodes, lruNode{})
	}
	c.nodes[n].id = id
	c.slot[id] = n
	c.pushFront(n)
	for len(c.slot) > c.capacity {
		old := c.tail
		c.unlink(old)
		delete(c.slot, c.nodes[old].id)
		c.free = append(c.free, old)
	}
}

func (c *LRU) unlink(n int32) {
	p, x := c.nodes[n].prev, c.nodes[n].next
	if p >= 0 {
		c.nodes[p].next = x
	} else {
		c.head = x
	}
	if x >= 0 {
		c.nodes[x].prev = p
	} else {
		c.tail = p
	}
}

func (c *LRU) pushFront(n int32) {
	c.nodes[n].prev, c.nodes[n].next = -1, c.head
	if c.head >= 0 {
		c.nodes[c.head].prev = n
	}
	c.head = n
	if c.tail < 0 {
		c.tail = n
	}
}

// HitCounter feeds requests to one cache and sums prompt tokens and hit tokens.
type HitCounter struct {
	// CapacityTokens is the cache size in tokens (math.MaxInt: unbounded).
	CapacityTokens int
	blockSize      int
	cache          *LRU
	// Requests, PromptTokens and HitTokens are the sums so far.
	Requests                int
	PromptTokens, HitTokens int64
}

// NewHitCounter returns a counter for a cache of capacityTokens tokens
// (floor(capacityTokens / blockSize) blocks; math.MaxInt: unbounded).
func NewHitCounter(capacityTokens, blockSize int) *HitCounter {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	blocks := math.MaxInt
	if capacityTokens != math.MaxInt {
		blocks = capacityTokens / blockSize
	}
	return &HitCounter{CapacityTokens: capacityTokens, blockSize: blockSize, cache: NewLRU(blocks)}
}

// Add feeds one request and returns its hit tokens (whole blocks).
func (h *HitCounter) Add(r *Request) int {
	hit := h.cache.Access(r.HashIDs, r.FullBlocks(h.blockSize)) * h.blockSize
	h.Requests++
	h.PromptTokens += int64(r.InputLength)
	h.HitTokens += int64(hit)
	return hit
}

// HitPct returns hit tokens / prompt tokens in percent (NaN before any request).
func (h *HitCounter) HitPct() float64 {
	if h.PromptTokens == 0 {
		return math.NaN()
	}
	return 100 * float64(h.HitTokens) / float64(h.PromptTokens)
}
