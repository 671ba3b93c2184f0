package trace

import (
	"math"
	"time"
)

// Stats are the figures of one trace: the columns of Table 2 of the Mooncake paper
// (Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST'25:
// requests, average input and output length, cache ratio), plus the conversation
// reconstruction (Chainer) and the trace's span.
type Stats struct {
	Requests   int
	MeanInput  float64 // tokens
	MeanOutput float64 // tokens
	MaxInput   int     // tokens
	// Duration is the last request's timestamp.
	Duration time.Duration
	// CacheRatioPct is the reuse ceiling: prompt tokens an unbounded prefix
	// cache shared by all replicas serves from cache, in percent of all prompt
	// tokens (whole leading blocks seen before; see LRU).
	CacheRatioPct float64
	// BlockReusePct is the share of all block ids that appeared earlier in the
	// trace, wherever they sit in the prompt.
	BlockReusePct float64
	// Conversations counts first turns (Turn.Parent == -1); TurnsPerConversation
	// maps a conversation's length in turns to the number of conversations.
	Conversations        int
	TurnsPerConversation map[int]int
}

// StatsBuilder accumulates Stats request by request.
type StatsBuilder struct {
	blockSize          int
	s                  Stats
	inSum, outSum      int64
	ceiling            *HitCounter
	seen               map[int64]struct{}
	blocks, blocksSeen int64
	chain              *Chainer
	convTurns          []int32 // by request index of a first turn: turns so far (0 otherwise)
}

// NewStatsBuilder returns an empty builder for blockSize-token blocks.
func NewStatsBuilder(blockSize int) *StatsBuilder {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return &StatsBuilder{
		blockSize: blockSize,
		ceiling:   NewHitCounter(math.MaxInt, blockSize),
		seen:      map[int64]struct{}{},
		chain:     NewChainer(blockSize),
	}
}

// Add counts one request (in trace order) and returns where the Chainer put it.
func (b *StatsBuilder) Add(r *Request) Turn {
	b.s.Requests++
	b.inSum += int64(r.InputLength)
	b.outSum += int64(r.OutputLength)
	b.s.MaxInput = max(b.s.MaxInput, r.InputLength)
	b.s.Duration = r.Timestamp
	b.ceiling.Add(r)
	for _, id := range r.HashIDs {
		b.blocks++
		if _, ok := b.seen[id]; ok {
			b.blocksSeen++
		} else {
			b.seen[id] = struct{}{}
		}
	}
	t := b.chain.Add(r)
	b.convTurns = append(b.convTurns, 0)
	b.convTurns[t.Conversation]++
	return t
}

// Stats returns the figures so far (NaN means for an empty trace).
func (b *StatsBuilder) Stats() Stats {
	s := b.s
	n := float64(s.Requests)
	s.MeanInput, s.MeanOutput = float64(b.inSum)/n, float64(b.outSum)/n
	s.CacheRatioPct = b.ceiling.HitPct()
	s.BlockReusePct = 100 * float64(b.blocksSeen) / float64(b.blocks)
	s.TurnsPerConversation = map[int]int{}
	for _, k := range b.convTurns {
		if k > 0 {
			s.Conversations++
			s.TurnsPerConversation[int(k)]++
		}
	}
	return s
}

// ReadStats reads a whole trace and returns its Stats.
func ReadStats(r *Reader) (Stats, error) {
	b := NewStatsBuilder(r.BlockSize())
	err := Each(r, func(req Request) error { b.Add(&req); return nil })
	if err != nil {
		return Stats{}, err
	}
	return b.Stats(), nil
}

// CurvePoint is the hit rate of one LRU capacity.
type CurvePoint struct {
	CapacityTokens int
	HitPct         float64
}

// LRUCurve feeds the whole trace, in order, to one LRU per capacity (tokens;
// math.MaxInt for the unbounded ceiling) in a single pass and returns the hit rate
// of each, in the order given.
func LRUCurve(r *Reader, capacities []int) ([]CurvePoint, error) {
	hcs := make([]*HitCounter, len(capacities))
	for i, c := range capacities {
		hcs[i] = NewHitCounter(c, r.BlockSize())
	}
	err := Each(r, func(req Request) error {
		for _, h := range hcs {
			h.Add(&req)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]CurvePoint, len(hcs))
	for i, h := range hcs {
		out[i] = CurvePoint{CapacityTokens: capacities[i], HitPct: h.HitPct()}
	}
	return out, nil
}
