package report

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/loadgen"
)

// replicaSeries is one replica's samples of one variant, sorted by time.
type replicaSeries struct {
	name    string
	samples []loadgen.SeriesSample
}

// groupSeries splits samples by replica (sorted by name) and sorts each by T.
func groupSeries(samples []loadgen.SeriesSample) []replicaSeries {
	idx := make(map[string]int)
	var out []replicaSeries
	for _, s := range samples {
		i, ok := idx[s.Replica]
		if !ok {
			i = len(out)
			idx[s.Replica] = i
			out = append(out, replicaSeries{name: s.Replica})
		}
		out[i].samples = append(out[i].samples, s)
	}
	for i := range out {
		slices.SortStableFunc(out[i].samples, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) })
	}
	slices.SortFunc(out, func(a, b replicaSeries) int { return cmp.Compare(a.name, b.name) })
	return out
}

// counterStep is the report's one counter-delta rule: the increase of a
// cumulative counter from one sample to the next, reset-aware
// (vllmmetrics.CounterDelta: a decrease is a restart, counted from zero), NaN
// when either value is NaN (a sample without that counter). counterDelta sums
// it over a window (the summaries, ReplicaHitsPct), PromptRates spreads it over
// bins.
func counterStep(prev, cur float64) float64 {
	if math.IsNaN(prev) || math.IsNaN(cur) {
		return math.NaN()
	}
	return vllmmetrics.CounterDelta(prev, cur)
}

// counterDelta is the reset-aware increase of a cumulative counter over a window,
// read from samples: from the last sample at or before start (or, if there is none,
// the first sample at or before end) to the last sample at or before end, summing
// counterStep over consecutive samples. ok is false when no sample lies at or
// before end. A NaN counter value gives NaN.
func counterDelta(samples []loadgen.SeriesSample, start, end time.Duration, value func(loadgen.SeriesSample) float64) (delta float64, ok bool) {
	first, last := -1, -1
	for i, s := range samples {
		if s.T <= start {
			first = i
		}
		if s.T <= end {
			last = i
		}
	}
	if last < 0 {
		return 0, false
	}
	if first < 0 {
		first = 0 // no sample before the window: start from the first one in it
	}
	for i := first + 1; i <= last; i++ {
		delta += counterStep(value(samples[i-1]), value(samples[i]))
	}
	if math.IsNaN(value(samples[first])) { // first == last: no step carries it
		delta = math.NaN()
	}
	return delta, true
}

// ReplicaHitsPct returns, per replica, 100 * delta(prefix hits) / delta(prefix
// queries) over all of the variant's series samples (first to last, reset-aware);
// NaN when the replica saw no query or a counter is missing.
func ReplicaHitsPct(series []loadgen.SeriesSample, variant string) map[string]float64 {
	out := make(map[string]float64)
	for _, rs := range groupSeries(variantSeries(series, variant)) {
		first, last := rs.samples[0].T, rs.samples[len(rs.samples)-1].T
		q, _ := counterDelta(rs.samples, first, last, func(x loadgen.SeriesSample) float64 { return x.PrefixQueries })
		h, _ := counterDelta(rs.samples, first, last, func(x loadgen.SeriesSample) float64 { return x.PrefixHits })
		out[rs.name] = pct(h, q)
	}
	return out
}

// ReplicaTurns counts one variant's turns served by one replica: Placed are first
// turns (turn 0), Stayed later turns on the session's first replica, MovedIn later
// turns of sessions first placed elsewhere (overflow, or no affinity), Unknown later
// turns whose session's first replica is not known.
type ReplicaTurns struct {
	Placed, Stayed, MovedIn, Unknown int
}

// CountReplicaTurns tallies all turns of variant (every stage, warm-up included)
// by serving replica. Turns without a replica are left out.
func CountReplicaTurns(results []loadgen.Result, variant string) map[string]ReplicaTurns {
	placed := make(map[int64]string)
	for _, r := range results {
		if r.Variant == variant && r.Turn == 0 && r.Replica != "" {
			placed[r.Session] = r.Replica
		}
	}
	out := make(map[string]ReplicaTurns)
	for _, r := range results {
		if r.Variant != variant || r.Replica == "" {
			continue
		}
		c := out[r.Replica]
		first, ok := placed[r.Session]
		switch {
		case r.Turn == 0:
			c.Placed++
		case !ok:
			c.Unknown++
		case first == r.Replica:
			c.Stayed++
		default:
			c.MovedIn++
		}
		out[r.Replica] = c
	}
	return out
}

// PromptRate is one bin of prompt-token throughput summed over replicas, in tokens
// per simulated second: Cached from delta(vllm:prefix_cache_hits_total), Computed
// from delta(vllm:prefix_cache_queries_total) - delta(hits), floored at 0 (for a
// replica without those counters, see PromptRates).
//
// Queries rather than vllm:prompt_tokens_total: vLLM V1 counts prefix-cache
// queries and hits together when a request is scheduled (v1/core/kv_cache_manager.py,
// PrefixCacheStats), but prompt tokens only once its prefill is done
// (v1/metrics/stats.py, IterationStats), so per-bin differences of the latter pair
// would split one request's cached and computed parts across bins. Over a whole run
// the two agree; a token the engine did not report as a hit counts as computed.
type PromptRate struct {
	Start, End       time.Duration
	Cached, Computed float64
}

// PromptRates bins series into intervals of width bin (simulated time) from the
// earliest sample. Each replica's counter increase between consecutive samples
// (reset-aware, vllmmetrics.CounterDelta) is spread evenly over the time between
// them and credited to the bins in proportion to overlap. Intervals with a NaN
// counter are skipped.
//
// A replica without prefix-cache counters (llama.cpp has none) but with the
// computed-prompt counter (series prompt_computed_tokens) gets Computed from
// that counter, spread the same way, and Cached from the responses' usage:
// each OK request of results served by it (Result.Replica) that reported
// cached tokens credits them to the bin of its Done (engines.CapabilityOf
// llamacpp, HitRate). results may be nil.
func PromptRates(series []loadgen.SeriesSample, results []loadgen.Result, bin time.Duration) []PromptRate {
	if len(series) == 0 || bin <= 0 {
		return nil
	}
	t0 := slices.MinFunc(series, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) }).T
	t1 := slices.MaxFunc(series, func(a, b loadgen.SeriesSample) int { return cmp.Compare(a.T, b.T) }).T
	n := int((t1-t0)/bin) + 1
	out := make([]PromptRate, n)
	for k := range out {
		out[k].Start = t0 + time.Duration(k)*bin
		out[k].End = out[k].Start + bin
	}
	cached := make([]float64, n)
	queried := make([]float64, n)
	computed := make([]float64, n) // from the computed-prompt counter (no prefix counters)
	usage := make([]float64, n)    // cached tokens from usage (no prefix counters)
	credit := func(dst []float64, from, to time.Duration, amount float64) {
		if to <= from {
			k := max(0, min(n-1, int((to-t0)/bin)))
			dst[k] += amount
			return
		}
		for k := int((from - t0) / bin); k < n && out[k].Start < to; k++ {
			overlap := min(to, out[k].End) - max(from, out[k].Start)
			if overlap > 0 {
				dst[k] += amount * float64(overlap) / float64(to-from)
			}
		}
	}
	usageCached := map[string]bool{} // replicas whose cached tokens come from usage
	for _, rs := range groupSeries(series) {
		for i := 1; i < len(rs.samples); i++ {
			a, b := rs.samples[i-1], rs.samples[i]
			dh := counterStep(a.PrefixHits, b.PrefixHits)
			dq := counterStep(a.PrefixQueries, b.PrefixQueries)
			if math.IsNaN(dh) && math.IsNaN(dq) {
				if dc := counterStep(a.PromptComputedTokens, b.PromptComputedTokens); !math.IsNaN(dc) {
					credit(computed, a.T, b.T, dc)
					usageCached[rs.name] = true
				}
				continue
			}
			if math.IsNaN(dh) || math.IsNaN(dq) {
				continue
			}
			credit(cached, a.T, b.T, dh)
			credit(queried, a.T, b.T, dq)
		}
	}
	for _, r := range results {
		if usageCached[r.Replica] && r.OK() && r.CachedTokens > 0 && r.Done >= t0 && r.Done <= t1 {
			credit(usage, r.Done, r.Done, float64(r.CachedTokens))
		}
	}
	for k := range out {
		sec := bin.Seconds()
		out[k].Cached = (cached[k] + usage[k]) / sec
		out[k].Computed = (max(0, queried[k]-cached[k]) + computed[k]) / sec
	}
	return out
}
