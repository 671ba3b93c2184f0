package sim

// KV block pool and prefix-cache hashing, after vLLM V1:
//   - vllm/v1/core/block_pool.py (BlockPool: get_new_blocks, touch, free_blocks,
//     cache_full_blocks, reset_prefix_cache, get_usage, the null block),
//   - vllm/v1/core/kv_cache_utils.py (FreeKVCacheBlockQueue: a doubly linked list
//     with O(1) removal from the middle; hash_block_tokens: a block's hash chains the
//     parent block's hash with the block's token ids).

// noBlock marks an absent link in the free list.
const noBlock int32 = -1

// kvBlock is one KV block's bookkeeping. hash == 0 means "not cached" (hashes are
// forced non-zero by blockHash).
type kvBlock struct {
	hash       uint64
	refCnt     int32
	prev, next int32 // free-queue links (noBlock at the ends)
	inFree     bool
}

// blockPool owns num_gpu_blocks blocks. Block 0 is vLLM's null block: never
// allocated, never free, so usable capacity is n-1 blocks.
type blockPool struct {
	blocks     []kvBlock
	head, tail int32 // free queue: head is evicted/allocated first (LRU order)
	numFree    int
	cached     hashIndex // block hash -> block id
	// evictions counts hashes dropped from the cache (a cached block reallocated, or
	// a reset), so a memoised lookup knows whether its run may have broken.
	evictions uint64
	// version counts the pool's changes (ref counts, the free queue, the hash
	// index), so a failed allocation can be known to fail again (request.failVer).
	version uint64
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		blocks: make([]kvBlock, n),
		head:   noBlock,
		tail:   noBlock,
		cached: newHashIndex(n),
	}
	for i := range p.blocks {
		p.blocks[i].prev, p.blocks[i].next = noBlock, noBlock
	}
	// All blocks but the null block start free, in id order (vLLM
	// BlockPool.__init__ then pops the null block off the free queue's head).
	for i := 1; i < n; i++ {
		p.pushTail(int32(i))
	}
	return p
}

// pushTail appends a block to the free queue's tail (FreeKVCacheBlockQueue.append).
func (p *blockPool) pushTail(id int32) {
	b := &p.blocks[id]
	b.prev, b.next, b.inFree = p.tail, noBlock, true
	if p.tail != noBlock {
		p.blocks[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.numFree++
}

// remove takes a block out of the free queue wherever it is
// (FreeKVCacheBlockQueue.remove, O(1)).
func (p *blockPool) remove(id int32) {
	b := &p.blocks[id]
	if b.prev != noBlock {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next != noBlock {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.prev, b.next, b.inFree = noBlock, noBlock, false
	p.numFree--
}

// allocate pops n blocks off the free queue's head, evicting their cached hashes,
// and appends their ids to dst with ref count 1 (BlockPool.get_new_blocks and
// _maybe_evict_cached_block). The caller checks numFree first.
func (p *blockPool) allocate(dst []int32, n int) []int32 {
	p.version++
	for range n {
		id := p.head
		p.remove(id)
		b := &p.blocks[id]
		if b.hash != 0 {
			// Invariant: a block whose hash is set is the one the index maps
			// that hash to (cacheBlock never sets a second block's hash).
			p.cached.del(b.hash)
			b.hash = 0
			p.evictions++
		}
		b.refCnt = 1
		dst = append(dst, id)
	}
	return dst
}

// touch takes a reference on cache-hit blocks; a block with no other user leaves
// the free queue (BlockPool.touch).
func (p *blockPool) touch(ids []int32) {
	p.version++
	for _, id := range ids {
		b := &p.blocks[id]
		if b.refCnt == 0 && b.inFree {
			p.remove(id)
		}
		b.refCnt++
	}
}

// freeReversed drops one reference on each block, walking ids from last to first, and
// appends the blocks that reach zero to the free queue's tail. A request's deepest
// block thus lands nearest the head and is evicted first (KVCacheManager.free ->
// BlockPool.free_blocks(reversed(blocks))).
func (p *blockPool) freeReversed(ids []int32) {
	p.version++
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &p.blocks[id]
		b.refCnt--
		if b.refCnt == 0 {
			p.pushTail(id)
		}
	}
}

// lookup appends to dst the ids of the longest run of cached blocks whose hashes are
// hashes[0], hashes[1], ... (at most maxBlocks), stopping at the first miss
// (FullAttentionManager.find_longest_cache_hit).
func (p *blockPool) lookup(dst []int32, hashes []uint64, maxBlocks int) []int32 {
	if maxBlocks > len(hashes) {
		maxBlocks = len(hashes)
	}
	for _, h := range hashes[:maxBlocks] {
		id, ok := p.cached.get(h)
		if !ok {
			break
		}
		dst = append(dst, id)
	}
	return dst
}

// lookupAgain redoes lookup for a request whose previous lookup returned prev (the
// ids of its cached run at that time), and returns the same result as
// lookup(prev[:0], hashes, maxBlocks) would, reusing prev's memory. A block whose
// hash still equals hashes[k] is still the block the index maps hashes[k] to (the
// invariant kept by allocate and cacheBlock), so the previous run is checked in
// place by reading the blocks, without probing the index; if no hash was evicted
// since (seen at evictions), it is still whole and is only extended. A waiting request
// that cannot be admitted is looked up at every step, so this keeps a long queue
// cheap.
func (p *blockPool) lookupAgain(prev []int32, seen uint64, hashes []uint64, maxBlocks int) []int32 {
	if maxBlocks > len(hashes) {
		maxBlocks = len(hashes)
	}
	k := min(len(prev), maxBlocks)
	if seen != p.evictions {
		for i, id := range prev[:k] {
			if p.blocks[id].hash != hashes[i] {
				k = i
				break
			}
		}
	}
	return p.lookup(prev[:k], hashes[k:], maxBlocks-k)
}

// cacheBlock registers a full block under its hash (BlockPool.cache_full_blocks).
// If another block already holds that hash (two requests computed the same content
// concurrently), this block stays uncached: vLLM keeps both under one hash, but a
// lookup returns only one of them, so the difference is which copy survives eviction.
func (p *blockPool) cacheBlock(id int32, h uint64) {
	b := &p.blocks[id]
	if b.hash != 0 {
		return
	}
	if p.cached.add(h, id) {
		b.hash = h
		p.version++
	}
}

// usage is vLLM's kv_cache_usage_perc: 1 - free/(num_gpu_blocks-1)
// (BlockPool.get_usage; cached blocks with no user count as free).
func (p *blockPool) usage() float64 {
	total := len(p.blocks) - 1
	if total <= 0 {
		return 0
	}
	return 1 - float64(p.numFree)/float64(total)
}

// reset drops every cached hash if no block is in use, and reports whether it did
// (BlockPool.reset_prefix_cache refuses while blocks are in use).
func (p *blockPool) reset() bool {
	if p.numFree != len(p.blocks)-1 {
		return false
	}
	p.cached.clear()
	p.evictions++
	p.version++
	for i := range p.blocks {
		p.blocks[i].hash = 0
	}
	return true
}

// Block hashing. A block's hash is a 64-bit hash of (parent hash, the block's token
// ids), as vLLM's hash_block_tokens(parent_block_hash, curr_block_token_ids, extra_keys)
// with no extra keys. vLLM uses sha256 or a 64-bit builtin hash; any well-mixed
// 64-bit hash serves here (collision odds ~ n^2/2^65, negligible for n < 1e7 blocks).

const hashSeed uint64 = 0x8f1bbcdcca62c1d6 // the "parent" of the first block

// blockHash chains parent with the token ids of one block: a multiply-xorshift step
// per token and the SplitMix64 finaliser per block. Never 0.
func blockHash(parent uint64, toks []uint32) uint64 {
	h := parent ^ 0x9e3779b97f4a7c15
	for _, t := range toks {
		h = (h ^ uint64(t)) * 0xff51afd7ed558ccd
		h ^= h >> 32
	}
	h = mix64(h + uint64(len(toks)))
	if h == 0 {
		h = 1
	}
	return h
}

// AppendBlockHashes extends hashes, the chained block hashes of the first len(hashes)
// blocks of toks, to cover every full block of toks (blockSize tokens each): the
// prefix-cache hashes an engine computes for a prompt, which a caller that keeps a
// growing conversation can extend turn by turn and hand over as Request.Hashes.
func AppendBlockHashes(hashes []uint64, toks []uint32, blockSize int) []uint64 {
	return appendBlockHashes(hashes, toks, blockSize)
}

// appendBlockHashes extends hashes to cover every full block of toks.
func appendBlockHashes(hashes []uint64, toks []uint32, blockSize int) []uint64 {
	parent := hashSeed
	if len(hashes) > 0 {
		parent = hashes[len(hashes)-1]
	}
	for k := len(hashes); (k+1)*blockSize <= len(toks); k++ {
		parent = blockHash(parent, toks[k*blockSize:(k+1)*blockSize])
		hashes = append(hashes, parent)
	}
	return hashes
}
