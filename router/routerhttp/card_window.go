package routerhttp

import (
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/router"
)

// Status card inputs: a short rolling window of scrape samples per replica (for
// rates) and the body bytes routed to each replica (for the window's bytes per
// token). Both are fed by the router's hot paths (observe, the proxy's OnRoute)
// and read only when the card is rendered or the ratio is refreshed. The
// conversations and their context come from the Balancer (Status).

const (
	// DefaultCardWindow is the span of simulated time the card's rates (prompt
	// tokens per second, recent prefix hit rate) are computed over: 30 scrapes at
	// the default 1 s scrape interval.
	DefaultCardWindow = 30 * time.Second
	// cardSamples bounds the samples kept per replica (a scrape interval under
	// DefaultCardWindow/cardSamples only shortens the window).
	cardSamples = 64
	// CharsPerToken is the body bytes per token assumed when the card estimates a
	// conversation's context from its request body and nothing has measured the
	// ratio yet (Balancer.BytesPerToken; equal to BytesPerTokenEstimate). About 4 characters per token
	// is the usual figure for English text and code with BPE tokenizers; JSON
	// escaping and field names make a request body somewhat longer than its
	// prompt, so the estimate leans high.
	CharsPerToken = router.BytesPerTokenEstimate
)

// cardSample is one scrape of one replica, counters cumulative as scraped.
type cardSample struct {
	at            time.Duration
	queries, hits float64 // prefix-cache counters, tokens (blocks scaled by block size)
	computed      float64 // prompt_tokens_by_source{source=local_compute}
	cached        float64 // ... local_cache_hit + external_kv_transfer
	hasPrefix     bool
	prefixTokens  bool // queries/hits are tokens (false: blocks of unknown size)
	hasSource     bool
	prompt        float64 // vllm:prompt_tokens_total
	hasPrompt     bool
	routedBytes   float64 // request body bytes the router sent to the replica, cumulative
}

// rateWindow is a ring of the latest scrape samples of one replica and the KV
// capacity last reported.
type rateWindow struct {
	ring     [cardSamples]cardSample
	n, next  int
	kvTokens int64 // (num_gpu_blocks - 1) x block_size summed over the replica's engines; 0 unknown
}

func (w *rateWindow) add(s cardSample) {
	if w.n > 0 && s.at <= w.ring[(w.next+cardSamples-1)%cardSamples].at {
		return // not newer than the last sample
	}
	w.ring[w.next] = s
	w.next = (w.next + 1) % cardSamples
	w.n = min(w.n+1, cardSamples)
}

// at returns the i-th sample, oldest first.
func (w *rateWindow) at(i int) *cardSample {
	return &w.ring[(w.next-w.n+i+2*cardSamples)%cardSamples]
}

// windowRates are the rates over a rateWindow's recent samples.
type windowRates struct {
	ok      bool    // at least two samples
	seconds float64 // span actually covered, simulated seconds
	// Reset-aware counter deltas over the span (vllmmetrics.CounterDelta).
	dQueries, dHits, dComputed, dCached float64
	hasPrefix, prefixTokens, hasSource  bool
	dPrompt, dBytes                     float64 // prompt tokens counted, body bytes routed
	hasPrompt                           bool
}

// rates sums the deltas between consecutive samples from the oldest one no older
// than span before the latest (at least the one before the latest) to the latest.
func (w *rateWindow) rates(span time.Duration) windowRates {
	var r windowRates
	if w.n < 2 {
		return r
	}
	last := w.at(w.n - 1)
	start := w.n - 2
	for start > 0 && w.at(start-1).at >= last.at-span {
		start--
	}
	r.ok = true
	r.seconds = (last.at - w.at(start).at).Seconds()
	r.hasPrefix, r.prefixTokens, r.hasSource, r.hasPrompt = true, true, true, true
	for i := start + 1; i < w.n; i++ {
		a, b := w.at(i-1), w.at(i)
		if a.hasPrompt && b.hasPrompt {
			r.dPrompt += vllmmetrics.CounterDelta(a.prompt, b.prompt)
			r.dBytes += b.routedBytes - a.routedBytes
		} else {
			r.hasPrompt = false
		}
		if a.hasPrefix && b.hasPrefix {
			r.dQueries += vllmmetrics.CounterDelta(a.queries, b.queries)
			r.dHits += vllmmetrics.CounterDelta(a.hits, b.hits)
			r.prefixTokens = r.prefixTokens && a.prefixTokens && b.prefixTokens
		} else {
			r.hasPrefix = false
		}
		if a.hasSource && b.hasSource {
			r.dComputed += vllmmetrics.CounterDelta(a.computed, b.computed)
			r.dCached += vllmmetrics.CounterDelta(a.cached, b.cached)
		} else {
			r.hasSource = false
		}
	}
	return r
}

// promptRates returns prompt tokens per second read from the prefix cache and
// computed: from vllm:prompt_tokens_by_source_total when every sample has it, else
// from the prefix-cache counters (hits, and queries - hits). ok is false when
// neither is available in tokens.
func (r windowRates) promptRates() (cached, computed float64, source string, ok bool) {
	if !r.ok || r.seconds <= 0 {
		return 0, 0, "", false
	}
	switch {
	case r.hasSource:
		return r.dCached / r.seconds, r.dComputed / r.seconds, "prompt_tokens_by_source", true
	case r.hasPrefix && r.prefixTokens:
		return r.dHits / r.seconds, max(0, r.dQueries-r.dHits) / r.seconds, "prefix_cache counters", true
	}
	return 0, 0, "", false
}

// recordCard adds one parsed scrape of t to its card windows; engines map to
// replicas as in observe (rank k = engine label k; otherwise all engines of the
// URL add up, KV capacity included).
func (rt *Router) recordCard(t *target, snap *vllmmetrics.Snapshot, at time.Duration) {
	per := make([]cardSample, len(t.replicas))
	kv := make([]int64, len(t.replicas))
	seen := make([]bool, len(t.replicas))
	for i := range per {
		per[i] = cardSample{at: at, prefixTokens: true, hasPrefix: true, hasSource: true, hasPrompt: true}
		if c := rt.routed[t.pool]; c != nil {
			per[i].routedBytes = float64(c.routed(t.replicas[i]))
		}
	}
	for _, e := range snap.Engines {
		k, ok := t.replicaOf(e)
		if !ok {
			continue
		}
		s := &per[k]
		seen[k] = true
		if e.Present[vllmmetrics.PrefixCacheQueries] && e.Present[vllmmetrics.PrefixCacheHits] {
			scale := 1.0
			if e.PrefixUnit == "blocks" {
				if e.BlockSize > 0 {
					scale = float64(e.BlockSize)
				} else {
					s.prefixTokens = false
				}
			}
			s.queries += e.PrefixQueries * scale
			s.hits += e.PrefixHits * scale
		} else {
			s.hasPrefix = false
		}
		if e.Present[vllmmetrics.PromptTokens] {
			s.prompt += e.PromptTokens
		} else {
			s.hasPrompt = false
		}
		if e.Present[vllmmetrics.PromptTokensBySrc] {
			s.computed += e.PromptBySource["local_compute"]
			s.cached += e.PromptBySource["local_cache_hit"] + e.PromptBySource["external_kv_transfer"]
		} else {
			s.hasSource = false
		}
		if e.BlockSize > 0 && e.NumGPUBlocks > 1 {
			// vLLM's block pool keeps block 0 as the null block
			// (vllm/v1/core/block_pool.py), as the policies' capacity (observe).
			kv[k] += int64(e.BlockSize) * int64(e.NumGPUBlocks-1)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.card == nil {
		t.card = make([]rateWindow, len(t.replicas))
	}
	for k := range per {
		if !seen[k] {
			continue
		}
		t.card[k].add(per[k])
		t.card[k].kvTokens = kv[k]
	}
}

// windowBytesPerToken sums, over pool's replicas, the request body bytes the
// router sent and the prompt tokens the replicas counted
// (vllm:prompt_tokens_total) over the latest DefaultCardWindow of scrapes: the
// fallback size ratio (Balancer.ObserveSizeWindow).
func (rt *Router) windowBytesPerToken(pool *Pool) (bodyBytes, promptTokens float64) {
	for _, t := range rt.targetList() {
		if t.pool != pool {
			continue
		}
		t.mu.Lock()
		for k := range t.card {
			if r := t.card[k].rates(DefaultCardWindow); r.ok && r.hasPrompt {
				bodyBytes += r.dBytes
				promptTokens += r.dPrompt
			}
		}
		t.mu.Unlock()
	}
	return bodyBytes, promptTokens
}

// cardWindow returns a copy of pool replica i's window, or false when no scrape
// of it was recorded.
func (rt *Router) cardWindow(pool *Pool, i int) (rateWindow, bool) {
	for _, t := range rt.targetList() {
		if t.pool != pool {
			continue
		}
		for k, idx := range t.replicas {
			if idx != i {
				continue
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.card == nil {
				return rateWindow{}, false
			}
			return t.card[k], true
		}
	}
	return rateWindow{}, false
}

// noteRoute is the Proxy's OnRoute hook: it counts the body bytes sent to the
// replica (keyless requests included), the numerator of windowBytesPerToken. The
// conversations and their context are the Balancer's (ReplicaStatus.Live,
// LiveTokens), so the hook keeps nothing per session.
func (rt *Router) noteRoute(pool *Pool, _ string, bodyBytes int, d router.Decision) {
	if c := rt.routed[pool]; c != nil {
		c.add(d.Replica, bodyBytes)
	}
}

// routedBytes counts, per replica of one pool, the request body bytes the router
// sent to it, cumulative since the router started.
type routedBytes struct {
	mu    sync.Mutex
	bytes []int64 // by replica index
}

func (c *routedBytes) add(i, n int) {
	if i < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.bytes) <= i {
		c.bytes = append(c.bytes, 0)
	}
	c.bytes[i] += int64(n)
}

// routed returns the body bytes routed to replica i so far.
func (c *routedBytes) routed(i int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.bytes) {
		return 0
	}
	return c.bytes[i]
}
