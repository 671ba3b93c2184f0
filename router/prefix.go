package router

import (
	"container/list"
	"encoding/binary"
	"fmt"
)

// Keyless placement: where a request without a session key goes (BalancerConfig.
// Keyless). Peer routers place such requests by an approximate prefix index
// (SGLang router cache_aware, vLLM Router cache_aware, llm-d's prefix scorer,
// AIBrix's prefix table): remember which replica was sent which
// prompt prefixes, send a request where its longest prefix went. Design and
// measurements: docs/routing.md "Keyless placement".
const (
	// KeylessShortestQueue: the no-key policy of the affinity policy in force
	// (ShortestQueue, vLLM's own balancer).
	KeylessShortestQueue = "shortest-queue"
	// KeylessPrefix: the replica holding the longest part of the request's prefix
	// (PrefixIndex) while it is at or under the overflow threshold, else the
	// shortest queue.
	KeylessPrefix = "prefix"
	// DefaultKeyless is the keyless placement used when none is named: prefix,
	// which measured better on keyless traffic (docs/routing.md "Keyless
	// placement": 1.7-2.2x shortest-queue's prefix hits, lower TTFB p95).
	DefaultKeyless = KeylessPrefix
	// PrefixMinMatch is the least share of a request's prefix pieces a replica
	// must hold for the prefix to place the request: SGLang router's
	// cache_threshold default 0.5 (sgl-project/sglang rust/README.md,
	// --cache-threshold). Below it the shortest queue places it, so a prompt
	// that shares only a common system prompt with earlier ones does not pile
	// every new conversation onto the first replica that saw that prompt.
	PrefixMinMatch = 0.5
	// PrefixSharedBy is how many other prompts must have continued a match's
	// last piece differently for the match to count as shared (PrefixIndex.Pick):
	// 2, so a continuation turn still follows its conversation even when the
	// earlier turn's body went on past the point where this one departs (a JSON
	// tail after the messages), while the third new conversation behind one
	// system prompt goes by load. Chosen from the user's case (docs/routing.md
	// "Keyless placement"), not fitted to a measurement.
	PrefixSharedBy = 2
)

// KeylessNames lists the keyless placements.
func KeylessNames() []string { return []string{KeylessShortestQueue, KeylessPrefix} }

// ValidKeyless reports whether name is a keyless placement ("" = default).
func ValidKeyless(name string) error {
	switch name {
	case "", KeylessShortestQueue, KeylessPrefix:
		return nil
	}
	return fmt.Errorf("keyless: %q is unknown (have %s, %s)", name, KeylessShortestQueue, KeylessPrefix)
}

// PrefixHashes returns the chained hashes of the leading whole pieces of p, piece
// elements each (bytes or token ids): h_0 = H(seed, piece_0), h_i = H(h_{i-1},
// piece_i) (FNV-1a 64 taken over whole elements, one xor-multiply each; chained the way vLLM chains its block hashes, vllm/v1/core/kv_cache_utils.py
// hash_block_tokens, so h_i names the whole prefix up to piece i). A tail shorter
// than a piece is not hashed (vLLM caches whole blocks only). At most maxPieces
// hashes (0 = no limit); dst is reused.
func PrefixHashes[E byte | uint32](dst []uint64, p []E, piece, maxPieces int) []uint64 {
	dst = dst[:0]
	if piece <= 0 {
		return dst
	}
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i+piece <= len(p); i += piece {
		if maxPieces > 0 && len(dst) == maxPieces {
			break
		}
		for _, v := range p[i : i+piece] {
			h ^= uint64(v)
			h *= prime64
		}
		dst = append(dst, h)
	}
	return dst
}

// PrefixHashesBytes is PrefixHashes for a byte string, 8 bytes per step (a
// little-endian word xor-multiplied in, so a piece must be a multiple of 8
// bytes; other sizes fall back to PrefixHashes): the HTTP proxy hashes request
// bodies of up to a MiB with it, 8x fewer steps.
func PrefixHashesBytes(dst []uint64, p []byte, piece, maxPieces int) []uint64 {
	if piece <= 0 || piece%8 != 0 {
		return PrefixHashes(dst, p, piece, maxPieces)
	}
	dst = dst[:0]
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i+piece <= len(p); i += piece {
		if maxPieces > 0 && len(dst) == maxPieces {
			break
		}
		for k := i; k < i+piece; k += 8 {
			h ^= binary.LittleEndian.Uint64(p[k:])
			h *= prime64
		}
		dst = append(dst, h)
	}
	return dst
}

// PrefixIndex is an approximate map from prompt prefixes to the replicas they were
// sent to: per replica, the chained piece hashes (PrefixHashes) of the prompts
// sent there, at most that replica's KV capacity in pieces, least recently sent
// evicted first. It models each replica's prefix cache from the outside, without
// the engines' KV events, so it is wrong when the engine evicts differently (a
// hit counted here can be a miss there); it never reads a clock.
//
// The zero value is not usable; use NewPrefixIndex. Not safe for concurrent use
// (the Balancer calls it under its lock).
type PrefixIndex struct {
	// PieceTokens is how many tokens one piece stands for, to turn a replica's
	// KVCapacityTokens into a bound in pieces.
	PieceTokens int
	reps        []prefixLRU
}

type prefixLRU struct {
	at  map[uint64]*list.Element
	lru list.List // front = most recently sent; values are *prefixPiece
}

// prefixPiece is one piece's hash and the distinct pieces seen after it, up to
// PrefixSharedBy+1 (enough to tell PrefixSharedBy others from a request's own).
type prefixPiece struct {
	h    uint64
	next [PrefixSharedBy + 1]uint64
	n    int
}

func (p *prefixPiece) addNext(h uint64) {
	for _, s := range p.next[:p.n] {
		if s == h {
			return
		}
	}
	if p.n < len(p.next) {
		p.next[p.n] = h
		p.n++
	}
}

// NewPrefixIndex returns an empty index for n replicas whose pieces stand for
// pieceTokens tokens each (at least 1).
func NewPrefixIndex(n, pieceTokens int) *PrefixIndex {
	x := &PrefixIndex{PieceTokens: max(pieceTokens, 1)}
	x.resize(n)
	return x
}

func (x *PrefixIndex) resize(n int) {
	for len(x.reps) < n {
		x.reps = append(x.reps, prefixLRU{at: map[uint64]*list.Element{}})
	}
	x.reps = x.reps[:n]
}

// Match returns how many leading pieces of prefix replica i was sent and still
// holds in the index.
func (x *PrefixIndex) Match(i int, prefix []uint64) int {
	if i < 0 || i >= len(x.reps) {
		return 0
	}
	n := 0
	for _, h := range prefix {
		if _, ok := x.reps[i].at[h]; !ok {
			break
		}
		n++
	}
	return n
}

// Pick returns the healthy replica of reps with the longest match for prefix
// among those whose InFlight is at most threshold (ties: fewer in flight, then
// the lower index), and the match in pieces; -1 and the match when no such
// replica holds at least PrefixMinMatch of the prefix's pieces (and at least
// one), or when the match ends in a piece the index saw continued by
// PrefixSharedBy other prompts (shared): such a match covers only what many
// conversations share, a common system prompt, and following it would pile
// every new conversation onto the replica that saw it first.
func (x *PrefixIndex) Pick(reps []ReplicaState, prefix []uint64, threshold int) (int, int) {
	x.resize(len(reps))
	best, bestN := -1, 0
	for i := range reps {
		r := &reps[i]
		if !r.Healthy || r.InFlight > threshold {
			continue
		}
		n := x.Match(i, prefix)
		if n > bestN || (n == bestN && n > 0 && r.InFlight < reps[best].InFlight) {
			best, bestN = i, n
		}
	}
	if bestN == 0 || float64(bestN) < PrefixMinMatch*float64(len(prefix)) || x.shared(prefix, bestN) {
		return -1, bestN
	}
	return best, bestN
}

// shared reports whether the piece prefix[n-1] was continued, on any replica, by
// at least PrefixSharedBy pieces other than prefix[n] (the request's own path).
func (x *PrefixIndex) shared(prefix []uint64, n int) bool {
	h := prefix[n-1]
	own, hasOwn := uint64(0), n < len(prefix)
	if hasOwn {
		own = prefix[n]
	}
	var others [PrefixSharedBy]uint64
	k := 0
	for i := range x.reps {
		e, ok := x.reps[i].at[h]
		if !ok {
			continue
		}
		p := e.Value.(*prefixPiece)
	next:
		for _, s := range p.next[:p.n] {
			if hasOwn && s == own {
				continue
			}
			for _, o := range others[:k] {
				if o == s {
					continue next
				}
			}
			others[k] = s
			if k++; k == PrefixSharedBy {
				return true
			}
		}
	}
	return false
}

// Record notes that prefix was sent to replica i, whose KV cache holds
// capacityTokens (0 = unknown: no bound). The prefix's first piece becomes the
// most recently used, its last the least of them, as vLLM frees a finished
// request's blocks last-first so the tail is evicted first
// (vllm/v1/core/single_type_kv_cache_manager.py free: reversed blocks).
func (x *PrefixIndex) Record(i int, prefix []uint64, capacityTokens int64) {
	if i < 0 {
		return
	}
	x.resize(max(len(x.reps), i+1))
	r := &x.reps[i]
	for k := len(prefix) - 1; k >= 0; k-- {
		h := prefix[k]
		e, ok := r.at[h]
		if ok {
			r.lru.MoveToFront(e)
		} else {
			e = r.lru.PushFront(&prefixPiece{h: h})
			r.at[h] = e
		}
		if k+1 < len(prefix) {
			e.Value.(*prefixPiece).addNext(prefix[k+1])
		}
	}
	if capacityTokens <= 0 {
		return
	}
	limit := int(capacityTokens / int64(x.PieceTokens))
	for r.lru.Len() > limit {
		e := r.lru.Back()
		delete(r.at, e.Value.(*prefixPiece).h)
		r.lru.Remove(e)
	}
}

// KeylessPrefix reports whether the Balancer places keyless requests by prefix
// (BalancerConfig.Keyless), so the caller should compute Facts.Prefix.
func (b *Balancer) KeylessPrefix() bool { return b.prefix != nil }

// RecordPrefix tells the prefix index that replica i accepted a keyless request
// with these prefix hashes (Facts.Prefix): the HTTP proxy calls it when the
// upstream answers 200, the virtual world when the engine takes the request. Not
// at the decision: a request the server refuses (vLLM's 400 for a prompt plus
// output over max_model_len, 7 % of the Mooncake conversation trace's requests,
// up to 126k tokens) caches nothing, and recording it would flush the replica's
// index (measured: docs/routing.md "Keyless placement"). Ignored without a
// prefix index or for an unknown replica.
func (b *Balancer) RecordPrefix(i int, prefix []uint64) {
	if len(prefix) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prefix == nil || i < 0 || i >= len(b.reps) {
		return
	}
	b.prefix.Record(i, prefix, b.reps[i].kvCapacity)
}

// Len returns how many pieces replica i holds in the index.
func (x *PrefixIndex) Len(i int) int {
	if i < 0 || i >= len(x.reps) {
		return 0
	}
	return x.reps[i].lru.Len()
}
