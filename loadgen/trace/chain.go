package trace

// MinParentBlocks is the fewest full blocks a request must have to be recognised
// as an earlier turn of a later request. Every request of the Mooncake
// conversation trace starts with block id 0 (a prefix shared by all), so one
// shared block says nothing about a conversation; two do (measured on that
// trace: 8,056 conversations, 3,975 continuations).
const MinParentBlocks = 2

// Turn is where the Chainer placed one request.
type Turn struct {
	// Index is the request's 0-based position in the trace.
	Index int
	// Parent is the index of the earlier turn this request continues, -1 for a
	// conversation's first turn.
	Parent int
	// Conversation is the index of the conversation's first request.
	Conversation int
	// Number is the 0-based turn number in the conversation (0 for a first turn).
	Number int
}

// Chainer reconstructs conversations from block-id chains, online, in trace
// order: request R continues the latest earlier request P whose full blocks (at
// least MinParentBlocks of them, see Request.FullBlocks) are a leading run of R's
// hash_ids, taking the P with the longest such run. A conversation's next turn
// re-sends the previous prompt and reply, so its ids start with the previous
// prompt's full blocks; the previous prompt's last, partial block differs (new
// text completes it). A trace's own session ids, when present, are used instead.
// Memory: one map entry per request (chained 64-bit hashes of id prefixes; a
// collision, at about n^2/2^65 for n prefixes, would join two conversations).
type Chainer struct {
	blockSize int
	byChain   map[uint64]int // hash of a request's full-block ids -> its index
	bySession map[string]int // session id -> index of its latest request
	turns     []turnState
	prefix    []uint64
}

type turnState struct {
	conv, number int32
}

// NewChainer returns a Chainer for blockSize-token blocks (<= 0: DefaultBlockSize).
func NewChainer(blockSize int) *Chainer {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return &Chainer{blockSize: blockSize, byChain: map[uint64]int{}, bySession: map[string]int{}}
}

// chainHash extends a prefix hash by one block id (the SplitMix64 finaliser of
// the combination; Steele, Lea, Flood 2014).
func chainHash(h uint64, id int64) uint64 {
	z := h*0x9e3779b97f4a7c15 + uint64(id) + 0x632be59bd9b4e019
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Add places the next request of the trace and returns its Turn.
func (c *Chainer) Add(r *Request) Turn {
	idx := len(c.turns)
	parent := -1
	if r.SessionID != "" {
		if p, ok := c.bySession[r.SessionID]; ok {
			parent = p
		}
		c.bySession[r.SessionID] = idx
	} else {
		c.prefix = c.prefix[:0]
		h := uint64(0)
		for _, id := range r.HashIDs {
			h = chainHash(h, id)
			c.prefix = append(c.prefix, h)
		}
		for k := len(c.prefix); k >= MinParentBlocks; k-- {
			if p, ok := c.byChain[c.prefix[k-1]]; ok {
				parent = p
				break
			}
		}
		if f := r.FullBlocks(c.blockSize); f >= MinParentBlocks {
			c.byChain[c.prefix[f-1]] = idx
		}
	}
	t := Turn{Index: idx, Parent: parent, Conversation: idx}
	if parent >= 0 {
		ps := c.turns[parent]
		t.Conversation, t.Number = int(ps.conv), int(ps.number)+1
	}
	c.turns = append(c.turns, turnState{conv: int32(t.Conversation), number: int32(t.Number)})
	return t
}
