package sim

import (
	"math"
	"slices"
	"testing"
)

// freeOrder lists the free queue from head (evicted first) to tail.
func freeOrder(p *blockPool) []int32 {
	var out []int32
	for id := p.head; id != noBlock; id = p.blocks[id].next {
		out = append(out, id)
	}
	return out
}

// checkQueue verifies the doubly linked list is consistent with numFree and inFree.
func checkQueue(t *testing.T, p *blockPool) {
	t.Helper()
	fwd := freeOrder(p)
	var back []int32
	for id := p.tail; id != noBlock; id = p.blocks[id].prev {
		back = append(back, id)
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, back) || len(fwd) != p.numFree {
		t.Fatalf("free queue broken: forward %v backward %v numFree %d", fwd, back, p.numFree)
	}
	for _, id := range fwd {
		if !p.blocks[id].inFree || p.blocks[id].refCnt != 0 {
			t.Fatalf("block %d in queue with inFree=%v ref=%d", id, p.blocks[id].inFree, p.blocks[id].refCnt)
		}
	}
}

// TestBlockPool mirrors vllm/v1/core/block_pool.py and kv_cache_utils.py
// FreeKVCacheBlockQueue, rule by rule.
func TestBlockPool(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, p *blockPool)
	}{
		{"block 0 is the null block: never free, never allocated (BlockPool.__init__)", func(t *testing.T, p *blockPool) {
			if got := freeOrder(p); !slices.Equal(got, []int32{1, 2, 3, 4, 5, 6, 7}) {
				t.Fatalf("initial free queue %v", got)
			}
			got := p.allocate(nil, 7)
			if slices.Contains(got, 0) || p.numFree != 0 {
				t.Fatalf("allocated %v, %d free", got, p.numFree)
			}
		}},
		{"allocation pops the head (get_new_blocks -> popleft_n)", func(t *testing.T, p *blockPool) {
			if got := p.allocate(nil, 3); !slices.Equal(got, []int32{1, 2, 3}) {
				t.Fatalf("allocated %v", got)
			}
			if got := freeOrder(p); !slices.Equal(got, []int32{4, 5, 6, 7}) {
				t.Fatalf("free queue %v", got)
			}
		}},
		{"allocating a cached free block evicts its hash (_maybe_evict_cached_block)", func(t *testing.T, p *blockPool) {
			ids := p.allocate(nil, 7)
			p.cacheBlock(ids[0], 111)
			p.freeReversed(ids)
			// Reverse order: 7,6,...,1 so block 1 (hash 111) is at the tail.
			if _, ok := p.cached.get(111); !ok {
				t.Fatal("freed block lost its hash")
			}
			p.allocate(nil, 6)
			if _, ok := p.cached.get(111); !ok {
				t.Fatal("hash evicted before its block was popped")
			}
			p.allocate(nil, 1)
			if _, ok := p.cached.get(111); ok || p.blocks[1].hash != 0 {
				t.Fatal("hash survived its block's reallocation")
			}
		}},
		{"touch removes a cached free block from the middle of the queue (touch, remove O(1))", func(t *testing.T, p *blockPool) {
			p.touch([]int32{4})
			if got := freeOrder(p); !slices.Equal(got, []int32{1, 2, 3, 5, 6, 7}) {
				t.Fatalf("free queue %v", got)
			}
			p.touch([]int32{4}) // a second user: ref 2, no queue change
			if p.blocks[4].refCnt != 2 {
				t.Fatalf("ref %d", p.blocks[4].refCnt)
			}
			p.freeReversed([]int32{4})
			if p.blocks[4].inFree {
				t.Fatal("block with a remaining user went back to the queue")
			}
			p.freeReversed([]int32{4})
			if got := freeOrder(p); !slices.Equal(got, []int32{1, 2, 3, 5, 6, 7, 4}) {
				t.Fatalf("free queue %v", got)
			}
		}},
		{"free in reverse order: the deepest block is evicted first (KVCacheManager.free)", func(t *testing.T, p *blockPool) {
			req := p.allocate(nil, 3) // blocks 1,2,3 = a request's first, second, third block
			p.freeReversed(req)
			if got := freeOrder(p); !slices.Equal(got, []int32{4, 5, 6, 7, 3, 2, 1}) {
				t.Fatalf("free queue %v", got)
			}
		}},
		{"kv usage = 1 - free/(num_gpu_blocks-1) (get_usage)", func(t *testing.T, p *blockPool) {
			if p.usage() != 0 {
				t.Fatalf("empty usage %v", p.usage())
			}
			ids := p.allocate(nil, 3)
			if got, want := p.usage(), 3.0/7; math.Abs(got-want) > 1e-12 {
				t.Fatalf("usage %v want %v", got, want)
			}
			for _, id := range ids {
				p.cacheBlock(id, uint64(id)+100)
			}
			p.freeReversed(ids)
			if p.usage() != 0 {
				t.Fatalf("idle cached blocks must count as free: usage %v", p.usage())
			}
		}},
		{"lookup stops at the first miss (find_longest_cache_hit)", func(t *testing.T, p *blockPool) {
			ids := p.allocate(nil, 4)
			p.cacheBlock(ids[0], 10)
			p.cacheBlock(ids[1], 11)
			p.cacheBlock(ids[3], 13) // block 2 missing: 13 is unreachable
			if got := p.lookup(nil, []uint64{10, 11, 12, 13}, 4); !slices.Equal(got, ids[:2]) {
				t.Fatalf("hit %v", got)
			}
			if got := p.lookup(nil, []uint64{10, 11, 12, 13}, 1); !slices.Equal(got, ids[:1]) {
				t.Fatalf("capped hit %v", got)
			}
		}},
		{"a second block with a cached hash stays unregistered", func(t *testing.T, p *blockPool) {
			ids := p.allocate(nil, 2)
			p.cacheBlock(ids[0], 10)
			p.cacheBlock(ids[1], 10)
			if id, _ := p.cached.get(10); id != ids[0] || p.blocks[ids[1]].hash != 0 {
				t.Fatalf("map %v", p.cached)
			}
		}},
		{"reset refuses while blocks are in use, else drops all hashes (reset_prefix_cache)", func(t *testing.T, p *blockPool) {
			ids := p.allocate(nil, 2)
			p.cacheBlock(ids[0], 10)
			if p.reset() {
				t.Fatal("reset while in use")
			}
			p.freeReversed(ids)
			if !p.reset() || p.cached.len() != 0 || p.blocks[ids[0]].hash != 0 {
				t.Fatal("reset did not drop the cache")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newBlockPool(8)
			tc.run(t, p)
			checkQueue(t, p)
		})
	}
}

// TestBlockHashChain mirrors kv_cache_utils.py hash_block_tokens: a block's hash
// depends on its tokens and on every block before it.
func TestBlockHashChain(t *testing.T) {
	a := testPrompt(1, 64)
	b := slices.Clone(a)
	b[3]++ // differs in block 0 only
	c := slices.Clone(a)
	c[40]++ // differs in block 2 only
	ha := appendBlockHashes(nil, a, 16)
	hb := appendBlockHashes(nil, b, 16)
	hc := appendBlockHashes(nil, c, 16)
	tests := []struct {
		name string
		ok   bool
	}{
		{"four full blocks hashed", len(ha) == 4},
		{"a partial block is not hashed", len(appendBlockHashes(nil, a[:47], 16)) == 2},
		{"same tokens, same hashes", slices.Equal(ha, appendBlockHashes(nil, slices.Clone(a), 16))},
		{"a change in block 0 changes every later hash", ha[0] != hb[0] && ha[1] != hb[1] && ha[3] != hb[3]},
		{"a change in block 2 keeps blocks 0-1", ha[1] == hc[1] && ha[2] != hc[2] && ha[3] != hc[3]},
		{"incremental extension equals hashing at once", slices.Equal(appendBlockHashes(appendBlockHashes(nil, a[:33], 16), a, 16), ha)},
		{"identical block content under different parents differs", blockHash(1, a[:16]) != blockHash(2, a[:16])},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok {
				t.Fail()
			}
		})
	}
}
