package loadgenhttp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/loadgen"
)

// ReplicaMetrics names one replica whose vLLM /metrics the runner scrapes.
type ReplicaMetrics struct {
	// Name is the replica name as the router reports it (X-Warden-Replica), e.g. "r0",
	// or "r0/rank1" for DP rank 1 behind one URL.
	Name string
	// URL is the server's metrics endpoint, e.g. "http://127.0.0.1:8001/metrics".
	URL string
	// Engine is the engine label of this replica's DP rank ("0".."N-1"). "" means the
	// server as a whole: its only engine, or all its engines summed (running,
	// waiting and counters summed, KV usage averaged).
	Engine string
	// Kind is the engine serving it; "" or engines.KindVLLM reads vLLM's series
	// (RequiredSeries must all be there), any other kind reads its adapter's
	// (scrape.AdapterFor) and writes every figure the engine lacks as NaN,
	// without an error (the manifest says which and why: EngineColumns).
	Kind engines.Kind
	// MetricsOff, when not "", says why the server has no /metrics to read
	// (e.g. llama-server without --metrics answers 501): the replica is not
	// scraped and has no series samples.
	MetricsOff string
}

// RequiredSeries are the vLLM series every scrape must find for every replica: the
// stage figures (replicas busy, prefix hits) are computed from them, and a missing
// one must never read as 0 (docs/bench.md, failure case 4). vllm:num_preemptions_total is read
// when present and written as NaN otherwise.
var RequiredSeries = []string{
	vllmmetrics.NumRequestsRunning,
	vllmmetrics.NumRequestsWaiting,
	vllmmetrics.KVCacheUsagePerc,
	vllmmetrics.PrefixCacheQueries,
	vllmmetrics.PrefixCacheHits,
	vllmmetrics.PromptTokens,
	vllmmetrics.GenerationTokens,
}

// DefaultScrapeTimeout bounds (wall) the fetch of one replica's /metrics.
const DefaultScrapeTimeout = 5 * time.Second

// Scraper reads the /metrics of a set of replicas into SeriesSamples.
type Scraper struct {
	Replicas []ReplicaMetrics
	HTTP     *http.Client   // nil = http.DefaultClient
	Clock    simclock.Clock // stamps the samples (simulated time)
	Timeout  time.Duration  // wall, per fetch of one URL; 0 = DefaultScrapeTimeout
}

// fetched is one URL's /metrics as one Scrape read it.
type fetched struct {
	snap *vllmmetrics.Snapshot
	eng  *engines.Snapshot // other kinds than vLLM
	err  error
	t    time.Duration // simulated instant the body was read
}

// Scrape fetches each distinct URL once, all at once (each with its own
// Timeout: a server slow to answer, such as llama-server during a long
// prefill, neither delays nor times out the others), and returns one sample
// per replica it could read, in Replicas order, each stamped with the
// simulated instant its own body was read. The error joins every problem: a
// URL that could not be fetched or parsed (its replicas get no sample), an
// engine label not found, and required series missing (that sample carries
// NaN for them). Series a replica lacks are NaN in its sample, never 0.
func (s *Scraper) Scrape(ctx context.Context, variant string) ([]loadgen.SeriesSample, error) {
	client := s.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	byURL := map[string]*fetched{}
	var urls []string // first-seen order, for the errors' order
	kindOf := map[string]engines.Kind{}
	for _, rm := range s.Replicas {
		if rm.MetricsOff != "" || byURL[rm.URL] != nil {
			continue
		}
		byURL[rm.URL] = &fetched{}
		urls = append(urls, rm.URL)
		kindOf[rm.URL] = rm.Kind
	}
	var wg sync.WaitGroup
	for _, u := range urls {
		g, k := byURL[u], kindOf[u]
		wg.Go(func() {
			fctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if isVLLM(k) {
				g.snap, g.err = scrape.Fetch(fctx, client, u, UserAgent)
			} else {
				g.eng, g.err = scrape.FetchEngine(fctx, client, u, UserAgent, k)
			}
			g.t = s.Clock.Now()
		})
	}
	wg.Wait()
	var errs []error
	for _, u := range urls {
		if err := byURL[u].err; err != nil {
			errs = append(errs, err)
		}
	}
	var out []loadgen.SeriesSample
	for _, rm := range s.Replicas {
		g := byURL[rm.URL]
		if rm.MetricsOff != "" || g.err != nil {
			continue
		}
		var smp loadgen.SeriesSample
		if !isVLLM(rm.Kind) {
			if len(g.eng.Ranks) == 0 {
				errs = append(errs, fmt.Errorf("replica %q (%s): no %s series at all", rm.Name, rm.URL, rm.Kind))
				continue
			}
			smp = sampleOfStats(rm.Kind, g.eng.Ranks[0])
		} else {
			e, err := pickEngine(g.snap, rm.Engine)
			if err != nil {
				errs = append(errs, fmt.Errorf("replica %q (%s): %w", rm.Name, rm.URL, err))
				continue
			}
			one := &vllmmetrics.Snapshot{Engines: []*vllmmetrics.Engine{e}}
			if err := one.Require(RequiredSeries...); err != nil {
				errs = append(errs, fmt.Errorf("replica %q (%s): %w", rm.Name, rm.URL, err))
			}
			smp = sampleOf(e)
		}
		smp.Variant, smp.Replica = variant, rm.Name
		smp.T = g.t
		out = append(out, smp)
	}
	return out, errors.Join(errs...)
}

// PerServer splits s by server: one Scraper per distinct URL, with the
// replicas read from it (a DP server's ranks share one), in first-seen order,
// each with s's client, clock and timeout; replicas with MetricsOff are left
// out.
func (s *Scraper) PerServer() []*Scraper {
	var out []*Scraper
	byURL := map[string]*Scraper{}
	for _, rm := range s.Replicas {
		if rm.MetricsOff != "" {
			continue
		}
		sc := byURL[rm.URL]
		if sc == nil {
			sc = &Scraper{HTTP: s.HTTP, Clock: s.Clock, Timeout: s.Timeout}
			byURL[rm.URL] = sc
			out = append(out, sc)
		}
		sc.Replicas = append(sc.Replicas, rm)
	}
	return out
}

// pickEngine returns the engine with the label, or for "" the only engine or the sum
// of all of them.
func pickEngine(snap *vllmmetrics.Snapshot, label string) (*vllmmetrics.Engine, error) {
	if len(snap.Engines) == 0 {
		return nil, fmt.Errorf("%w: no vllm: series at all", vllmmetrics.ErrMissingSeries)
	}
	if label != "" {
		if e := snap.Engine(label); e != nil {
			return e, nil
		}
		labels := make([]string, 0, len(snap.Engines))
		for _, e := range snap.Engines {
			labels = append(labels, fmt.Sprintf("%q", e.Engine))
		}
		return nil, fmt.Errorf("engine %q not found (engines: %s)", label, strings.Join(labels, ", "))
	}
	if len(snap.Engines) == 1 {
		return snap.Engines[0], nil
	}
	sum := &vllmmetrics.Engine{Model: snap.Engines[0].Model, Present: map[string]bool{}}
	for n := range snap.Engines[0].Present {
		sum.Present[n] = true
	}
	for _, e := range snap.Engines {
		for n := range sum.Present {
			if !e.Present[n] {
				delete(sum.Present, n)
			}
		}
		sum.Running += e.Running
		sum.Waiting += e.Waiting
		sum.KVUsage += e.KVUsage / float64(len(snap.Engines))
		sum.PrefixQueries += e.PrefixQueries
		sum.PrefixHits += e.PrefixHits
		sum.PromptTokens += e.PromptTokens
		sum.GenerationTokens += e.GenerationTokens
		sum.Preemptions += e.Preemptions
	}
	return sum, nil
}

// sampleOf converts one engine's scrape, NaN for every series it lacks.
func sampleOf(e *vllmmetrics.Engine) loadgen.SeriesSample {
	v := func(name string, x float64) float64 {
		if !e.Present[name] {
			return math.NaN()
		}
		return x
	}
	return loadgen.SeriesSample{
		Running:          v(vllmmetrics.NumRequestsRunning, e.Running),
		Waiting:          v(vllmmetrics.NumRequestsWaiting, e.Waiting),
		KVUsage:          v(vllmmetrics.KVCacheUsagePerc, e.KVUsage),
		PrefixQueries:    v(vllmmetrics.PrefixCacheQueries, e.PrefixQueries),
		PrefixHits:       v(vllmmetrics.PrefixCacheHits, e.PrefixHits),
		PromptTokens:     v(vllmmetrics.PromptTokens, e.PromptTokens),
		GenerationTokens: v(vllmmetrics.GenerationTokens, e.GenerationTokens),
		Preemptions:      v(vllmmetrics.NumPreemptions, e.Preemptions),

		PromptComputedTokens: localCompute(e),
	}
}

// localCompute is vllm:prompt_tokens_by_source_total{source="local_compute"}
// (vLLM v1/metrics/loggers.py, newer servers only), NaN when absent.
func localCompute(e *vllmmetrics.Engine) float64 {
	if v, ok := e.PromptBySource["local_compute"]; ok {
		return v
	}
	return math.NaN()
}

func isVLLM(k engines.Kind) bool { return k == "" || k == engines.KindVLLM }

// sampleOfStats converts one scrape of another engine than vLLM (one Stats:
// SGLang and llama.cpp have no DP ranks here), NaN for every figure it lacks.
// The prefix columns are the engine's own hit counters (SGLang: prompt and
// cached tokens of finished requests); llama.cpp has none, so they are NaN.
//
// SGLang's token counters (sglang:prompt_tokens_total, cached_tokens_total,
// generation_tokens_total) are labelled prometheus_client counters, which
// have no sample until their first increment (collector.py): on a server whose
// gauges were read they are 0 until then, not missing, or the first window of
// a fresh server would have no start value.
func sampleOfStats(k engines.Kind, st *engines.Stats) loadgen.SeriesSample {
	v := func(x engines.Value) float64 {
		if !x.Has() {
			return math.NaN()
		}
		return x.V
	}
	if k == engines.KindSGLang && st.Running.Has() {
		for _, c := range []*engines.Value{&st.PrefixQueries, &st.PrefixHits, &st.PromptTokens, &st.GenerationTokens} {
			if !c.Has() {
				*c = engines.Of(0, "no sample yet: 0 before the first increment")
			}
		}
	}
	return loadgen.SeriesSample{
		Running:          v(st.Running),
		Waiting:          v(st.Waiting),
		KVUsage:          v(st.KVUsage),
		PrefixQueries:    v(st.PrefixQueries),
		PrefixHits:       v(st.PrefixHits),
		PromptTokens:     v(st.PromptTokens),
		GenerationTokens: v(st.GenerationTokens),
		Preemptions:      v(st.Preemptions),

		PromptComputedTokens: v(st.PromptComputedTokens),
	}
}

// SeriesColumns maps each series.csv column the scraper fills to the engine
// figure it comes from (engines.Capability) and to its value in a sample
// (Value).
var SeriesColumns = []struct {
	Column string
	Figure engines.Figure
	Value  func(loadgen.SeriesSample) float64
}{
	{"running", engines.FigRunning, func(s loadgen.SeriesSample) float64 { return s.Running }},
	{"waiting", engines.FigWaiting, func(s loadgen.SeriesSample) float64 { return s.Waiting }},
	{"kv_usage", engines.FigKVUsage, func(s loadgen.SeriesSample) float64 { return s.KVUsage }},
	{"prefix_queries", engines.FigPrefixQueries, func(s loadgen.SeriesSample) float64 { return s.PrefixQueries }},
	{"prefix_hits", engines.FigPrefixHits, func(s loadgen.SeriesSample) float64 { return s.PrefixHits }},
	{"prompt_tokens", engines.FigPromptTokens, func(s loadgen.SeriesSample) float64 { return s.PromptTokens }},
	{"generation_tokens", engines.FigGenerationTokens, func(s loadgen.SeriesSample) float64 { return s.GenerationTokens }},
	{"preemptions", engines.FigPreemptions, func(s loadgen.SeriesSample) float64 { return s.Preemptions }},
	{"prompt_computed_tokens", engines.FigPromptComputed, func(s loadgen.SeriesSample) float64 { return s.PromptComputedTokens }},
}

// EngineColumns describes where each series.csv column of a replica of kind k
// comes from (the capability's source), or why it is missing: the engine lacks
// the figure (its capability note), metricsOff (the replica's /metrics cannot
// be read) empties every column with that reason, and seen, the replica's
// /metrics as read once before the run (nil: not read), marks a column whose
// source that server did not export (an older or newer build than the one the
// capability was read from) "not exported by this server".
func EngineColumns(k engines.Kind, metricsOff string, seen *engines.Stats) []loadgen.ColumnSource {
	c := engines.CapabilityOf(k)
	var seenSample *loadgen.SeriesSample
	if seen != nil {
		st := *seen // sampleOfStats fills SGLang's counters in
		smp := sampleOfStats(k, &st)
		seenSample = &smp
	}
	var out []loadgen.ColumnSource
	for _, col := range SeriesColumns {
		fs, ok := c.Source(col.Figure)
		switch {
		case metricsOff != "":
			out = append(out, loadgen.ColumnSource{Column: col.Column, Missing: metricsOff})
		case ok && seenSample != nil && math.IsNaN(col.Value(*seenSample)):
			out = append(out, loadgen.ColumnSource{Column: col.Column,
				Missing: fmt.Sprintf("not exported by this server: %s absent from its /metrics at the pre-flight scrape", fs.Source)})
		case ok:
			out = append(out, loadgen.ColumnSource{Column: col.Column, Source: fs.Source})
		default:
			why := fs.Note
			if why == "" {
				why = "not reported by " + string(k)
			}
			out = append(out, loadgen.ColumnSource{Column: col.Column, Missing: why})
		}
	}
	return out
}
