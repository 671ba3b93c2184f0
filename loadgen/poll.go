package loadgen

import (
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// PollSchedule gives the instants at which the harness polls every replica's
// engine counters (SeriesSample) during one variant, the same in both worlds:
// after the poll at the variant's start, poll k (k = 0, 1, ...) is at
// start + (k + u_k) * interval, with u_k uniform in [0, 1) drawn from a stream
// seeded by the scenario seed and the variant name.
//
// Why jitter: a poll on a fixed grid aliases with any load that is periodic at
// a multiple of the interval. A closed loop in lock step (every session's turn
// taking 0.5 s of a 1 s cycle, say) is then always sampled at the same phase,
// and "replicas busy" reads 0 or the full count instead of the share of time
// busy (a lock-step run read 0.00 busy with 1.21 turns in flight). With each poll
// uniform within its interval, every instant of the interval is equally likely
// to be sampled, so the expected share of busy polls is the share of time busy,
// whatever the load's period (stratified sampling); the gap between two polls
// stays in (0, 2 x interval) and averages one interval, so coverage and counter
// deltas work as before. Polling faster than any turn would also do, but costs
// a scrape of every replica per period and still aliases with faster loads.
type PollSchedule struct {
	start, interval time.Duration
	k               int64
	rng             *rand.Rand
}

// NewPollSchedule returns the schedule of the variant named variant that starts at
// the simulated instant start, polling every interval (> 0) on average.
func NewPollSchedule(seed uint64, variant string, start, interval time.Duration) *PollSchedule {
	h := fnv.New64a()
	h.Write([]byte("poll/" + variant))
	return &PollSchedule{start: start, interval: interval, rng: rand.New(rand.NewPCG(seed, h.Sum64()))}
}

// Next returns the next poll instant (simulated time since the run's origin);
// instants increase.
func (p *PollSchedule) Next() time.Duration {
	u := p.rng.Float64()
	t := p.start + time.Duration(p.k)*p.interval + time.Duration(u*float64(p.interval))
	p.k++
	return t
}
