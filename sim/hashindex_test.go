package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHashIndexMatchesMap drives the index and a built-in map with the same random
// puts and deletes, on keys chosen to collide in the low bits (long probe runs,
// wrap-around at the table's end), and checks every key after every operation.
func TestHashIndexMatchesMap(t *testing.T) {
	tests := []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{"well mixed keys", func(r *rand.Rand) uint64 { return r.Uint64()%4096 + 1 }},
		{"keys crowding the table's last slots (wrap-around)", func(r *rand.Rand) uint64 {
			return uint64(28+r.IntN(4)) | uint64(r.IntN(64))<<32
		}},
		{"keys sharing one home slot", func(r *rand.Rand) uint64 { return 5 | uint64(r.IntN(20)+1)<<40 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			x := newHashIndex(16) // 32 slots
			ref := map[uint64]int32{}
			keys := []uint64{}
			for op := range 20000 {
				k := tc.key(r)
				if k == 0 {
					continue
				}
				switch {
				case r.IntN(4) == 0 && len(ref) < 16:
					id := int32(op)
					_, had := ref[k]
					if added := x.add(k, id); added == had {
						t.Fatalf("op %d: add(%#x) = %v with the key present=%v", op, k, added, had)
					}
					if !had {
						keys = append(keys, k)
						ref[k] = id
					}
				case r.IntN(3) == 0 && len(ref) < 16:
					id := int32(op)
					x.put(k, id)
					if _, ok := ref[k]; !ok {
						keys = append(keys, k)
					}
					ref[k] = id
				case len(keys) > 0:
					k = keys[r.IntN(len(keys))]
					x.del(k)
					delete(ref, k)
					keys = slices.DeleteFunc(keys, func(v uint64) bool { return v == k })
				}
				if x.len() != len(ref) {
					t.Fatalf("op %d: len %d, want %d", op, x.len(), len(ref))
				}
				for kk, want := range ref {
					if got, ok := x.get(kk); !ok || got != want {
						t.Fatalf("op %d: get(%#x) = %d, %v; want %d", op, kk, got, ok, want)
					}
				}
				if _, ok := x.get(k); ok != slices.Contains(keys, k) {
					t.Fatalf("op %d: get(%#x) found=%v after its last operation", op, k, ok)
				}
			}
		})
	}
}

// TestLookupAgainMatchesLookup: a memoised lookup (blockPool.lookupAgain) returns
// exactly what a fresh lookup returns, while blocks are cached, freed, evicted,
// recomputed into other blocks and the cache is reset between the two.
func TestLookupAgainMatchesLookup(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	p := newBlockPool(64)
	// Four "prompts" of 20 blocks sharing their first 5 blocks.
	var prompts [4][]uint64
	for i := range prompts {
		toks := testPrompt(i, 20*16)
		copy(toks, testPrompt(99, 5*16))
		prompts[i] = appendBlockHashes(nil, toks, 16)
	}
	type memo struct {
		ids  []int32
		seen uint64
	}
	memos := make([]memo, len(prompts))
	var held [][]int32
	for op := range 5000 {
		switch k := r.IntN(10); {
		case k < 4 && p.numFree >= 20: // compute a prompt prefix into new blocks
			i, n := r.IntN(len(prompts)), 1+r.IntN(20)
			ids := p.allocate(nil, n)
			for b := range n {
				p.cacheBlock(ids[b], prompts[i][b])
			}
			held = append(held, ids)
		case k < 8 && len(held) > 0: // free one holder
			j := r.IntN(len(held))
			p.freeReversed(held[j])
			held = slices.Delete(held, j, j+1)
		case k < 9 && len(held) > 0: // a hit takes references on cached blocks
			i := r.IntN(len(prompts))
			hit := p.lookup(nil, prompts[i], 20)
			p.touch(hit)
			held = append(held, hit)
		default:
			if len(held) == 0 {
				p.reset()
			}
		}
		for i := range prompts {
			max := 1 + r.IntN(20)
			want := p.lookup(nil, prompts[i], max)
			m := &memos[i]
			m.ids = p.lookupAgain(m.ids, m.seen, prompts[i], max)
			m.seen = p.evictions
			if !slices.Equal(m.ids, want) {
				t.Fatalf("op %d prompt %d: lookupAgain %v, lookup %v", op, i, m.ids, want)
			}
		}
		checkQueue(t, p)
	}
}
