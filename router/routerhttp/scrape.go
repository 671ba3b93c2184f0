package routerhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

func (rt *Router) scrape(ctx context.Context, t *target) {
	u := *t.url
	u.Path = singleJoin(u.Path, wire.PathMetrics)
	t.mu.Lock()
	kind := t.kind
	t.mu.Unlock()
	if kind != engines.KindVLLM {
		rt.scrapeEngine(ctx, t, kind, u.String())
		return
	}
	fams, err := scrape.FetchFamilies(ctx, rt.client, u.String(), "")
	if err != nil {
		rt.scrapeFailed(ctx, t, scrapeErrorClass(err), err.Error())
		return
	}
	rt.observeVLLM(ctx, t, fams)
}

// observeVLLM feeds fams, the /metrics body of t as a vLLM server, to t's
// Balancer, or records why it cannot: a body without vllm: series (another
// engine's, or none an engine names) gave no figures, so it is a scrape error
// of class "no series" that says what the body is, not a silent zero.
func (rt *Router) observeVLLM(ctx context.Context, t *target, fams scrape.Families) {
	snap := fams.VLLM()
	if len(snap.Engines) == 0 {
		rt.scrapeFailed(ctx, t, "no series", noVLLMSeries(fams.Kind()))
		return
	}
	t.mu.Lock()
	t.lacks = lackedFigures(engines.CapabilityOf(engines.KindVLLM))
	t.mu.Unlock()
	rt.scrapeFailed(ctx, t, "", "")
	rt.observe(t, snap, rt.clock.Now())
}

// noVLLMSeries is the scrape error of a replica read as vLLM whose /metrics
// has no vllm: series; k is the engine the body names (KindUnknown: none).
func noVLLMSeries(k engines.Kind) string {
	if k == engines.KindUnknown {
		return "GET /metrics has no vllm: series (nor sglang: or llamacpp: ones): not a vLLM server's /metrics; check the URL, or set engine: for this replica"
	}
	prefix := map[engines.Kind]string{engines.KindSGLang: engines.PrefixSGLang, engines.KindLlamaCpp: engines.PrefixLlamaCpp}[k]
	return fmt.Sprintf("GET /metrics has no vllm: series but %s ones: the server is %s, read as vLLM (engine: vllm); set engine: %s, or auto (the default)", prefix, k, k)
}

// Classes of scrape failure (scrapeErrorClass): what a reader of the log acts
// on. The texts within one class vary (a /metrics that hangs gives "context
// deadline exceeded" or "timeout awaiting response headers", whichever timer
// fires first), so the log follows the class, /status the latest text.
const (
	scrapeTimeout    = "timeout"    // no answer in time (dial, headers or body)
	scrapeRefused    = "refused"    // connection refused: nothing listens
	scrapeConnection = "connection" // any other transport failure (reset, DNS, TLS)
	scrapeBadStatus  = "bad status" // answered, not 200
	scrapeParse      = "parse"      // answered 200, not Prometheus text
)

// scrapeErrorClass sorts an error of scrape.Fetch or scrape.FetchEngine into
// one of the classes above.
func scrapeErrorClass(err error) string {
	var (
		se *scrape.StatusError
		pe *scrape.ParseError
		ne net.Error
	)
	switch {
	case errors.As(err, &se):
		return scrapeBadStatus
	case errors.As(err, &pe):
		return scrapeParse
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return scrapeTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return scrapeRefused
	}
	return scrapeConnection
}

// scrapeFailed records why t's scrape gave no figures (why "" after a good
// one; class its kind, scrapeErrorClass or a fixed text) and logs a change of
// class: a new kind of failure at warning level, a recovery at info. A new
// text of the same class only replaces the one /status shows.
func (rt *Router) scrapeFailed(ctx context.Context, t *target, class, why string) {
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	old := t.scrapeClass
	t.scrapeErr, t.scrapeClass = why, class
	kind := t.kind
	t.mu.Unlock()
	switch {
	case class == old:
	case class != "":
		rt.log.Warn("replica metrics cannot be read (logged again only when the kind of failure changes)", "model", t.pool.Model, "url", t.url.String(), "engine", string(kind), "class", class, "err", why)
	default:
		rt.log.Info("replica metrics readable again", "model", t.pool.Model, "url", t.url.String(), "engine", string(kind))
	}
}

// replicaOf returns the index within t.replicas of the replica engine e's
// counts belong to: with DP ranks, engine label k is rank k (false for a label
// that is not a rank of t); without, every engine of the URL is its one replica.
func (t *target) replicaOf(e *vllmmetrics.Engine) (int, bool) {
	if !t.ranked || t.unpinned.Load() {
		return 0, true
	}
	r, err := strconv.Atoi(e.Engine)
	if err != nil || r < 0 || r >= len(t.replicas) {
		return 0, false
	}
	return r, true
}

// observe feeds one parsed scrape of target t into its Balancer. With DP ranks,
// engine label k belongs to rank k; without, all engines of the URL are one replica
// (a DP server balancing internally): running and waiting add up, KV usage is the
// mean, counters add up.
func (rt *Router) observe(t *target, snap *vllmmetrics.Snapshot, at time.Duration) {
	type agg struct {
		n                    int
		running, waiting, kv float64
		queries, hits        float64
		hasGauges, hasPrefix bool
		kvTokens             int64 // (num_gpu_blocks - 1) x block_size, summed
	}
	rt.recordCard(t, snap, at)
	t.mu.Lock()
	t.unexported = notExported(t.kind, snap)
	t.mu.Unlock()
	if _, src := t.pool.Balancer.BytesPerToken(); src != router.SizeResponses {
		// The /metrics ratio is only a fallback: once the responses have
		// calibrated the estimate, do not recompute it on every scrape.
		t.pool.Balancer.ObserveSizeWindow(rt.windowBytesPerToken(t.pool))
	}
	per := make([]agg, len(t.replicas))
	for _, e := range snap.Engines {
		k, ok := t.replicaOf(e)
		if !ok {
			continue
		}
		a := &per[k]
		a.n++
		a.running += e.Running
		a.waiting += e.Waiting
		a.kv += e.KVUsage
		a.hasGauges = a.hasGauges || e.Present[vllmmetrics.NumRequestsRunning]
		if e.NumGPUBlocks > 1 && e.BlockSize > 0 {
			a.kvTokens += int64(e.NumGPUBlocks-1) * int64(e.BlockSize)
		}
		if e.Present[vllmmetrics.PrefixCacheQueries] && e.Present[vllmmetrics.PrefixCacheHits] {
			a.queries += e.PrefixQueries
			a.hits += e.PrefixHits
			a.hasPrefix = true
		}
	}
	for k, a := range per {
		if a.n == 0 {
			continue
		}
		if a.hasGauges {
			t.pool.Balancer.ObserveEngine(t.replicas[k], int(a.running), int(a.waiting), a.kv/float64(a.n), at)
		}
		if a.kvTokens > 0 {
			t.pool.Balancer.ObserveCapacity(t.replicas[k], a.kvTokens)
		}
		if a.hasPrefix {
			t.mu.Lock()
			ps := &t.prefix[k]
			if !ps.have {
				*ps = prefixStats{have: true, queries0: a.queries, hits0: a.hits, queriesPrev: a.queries, hitsPrev: a.hits}
			} else {
				ps.windowQueries += vllmmetrics.CounterDelta(ps.queriesPrev, a.queries)
				ps.windowHit += vllmmetrics.CounterDelta(ps.hitsPrev, a.hits)
				ps.queriesPrev, ps.hitsPrev = a.queries, a.hits
			}
			ps.queries, ps.hits = a.queries, a.hits
			t.mu.Unlock()
		}
	}
}
