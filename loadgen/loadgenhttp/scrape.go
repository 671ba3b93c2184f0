package loadgenhttp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
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
// one must never read as 0 (peers.md case 13). vllm:num_preemptions_total is read
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

// DefaultScrapeTimeout bounds (wall) one scrape of all replicas.
const DefaultScrapeTimeout = 5 * time.Second

// Scraper reads the /metrics of a set of replicas into SeriesSamples.
type Scraper struct {
	Replicas []ReplicaMetrics
	HTTP     *http.Client   // nil = http.DefaultClient
	Clock    simclock.Clock // stamps the samples (simulated time)
	Timeout  time.Duration  // wall, per scrape of all replicas; 0 = DefaultScrapeTimeout
}

// Scrape fetches each distinct URL once and returns one sample per replica it could
// read, stamped with the simulated instant the body was read. The error joins every
// problem: a URL that could not be fetched or parsed (its replicas get no sample), an
// engine label not found, and required series missing (that sample carries NaN for
// them). Series a replica lacks are NaN in its sample, never 0.
func (s *Scraper) Scrape(ctx context.Context, variant string) ([]loadgen.SeriesSample, error) {
	client := s.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type got struct {
		snap *vllmmetrics.Snapshot
		eng  *engines.Snapshot // other kinds than vLLM
		err  error
		t    time.Duration
	}
	byURL := map[string]*got{}
	var errs []error
	var out []loadgen.SeriesSample
	for _, rm := range s.Replicas {
		if rm.MetricsOff != "" {
			continue
		}
		if !isVLLM(rm.Kind) {
			g := byURL[rm.URL]
			if g == nil {
				g = &got{}
				g.eng, g.err = scrape.FetchEngine(ctx, client, rm.URL, UserAgent, rm.Kind)
				g.t = s.Clock.Now()
				byURL[rm.URL] = g
				if g.err != nil {
					errs = append(errs, g.err)
				}
			}
			if g.err != nil {
				continue
			}
			if len(g.eng.Ranks) == 0 {
				errs = append(errs, fmt.Errorf("replica %q (%s): no %s series at all", rm.Name, rm.URL, rm.Kind))
				continue
			}
			smp := sampleOfStats(rm.Kind, g.eng.Ranks[0])
			smp.Variant, smp.Replica = variant, rm.Name
			smp.T = g.t
			out = append(out, smp)
			continue
		}
		g := byURL[rm.URL]
		if g == nil {
			g = &got{}
			g.snap, g.err = scrape.Fetch(ctx, client, rm.URL, UserAgent)
			g.t = s.Clock.Now()
			byURL[rm.URL] = g
			if g.err != nil {
				errs = append(errs, g.err)
			}
		}
		if g.err != nil {
			continue
		}
		e, err := pickEngine(g.snap, rm.Engine)
		if err != nil {
			errs = append(errs, fmt.Errorf("replica %q (%s): %w", rm.Name, rm.URL, err))
			continue
		}
		one := &vllmmetrics.Snapshot{Engines: []*vllmmetrics.Engine{e}}
		if err := one.Require(RequiredSeries...); err != nil {
			errs = append(errs, fmt.Errorf("replica %q (%s): %w", rm.Name, rm.URL, err))
		}
		smp := sampleOf(e)
		smp.Variant, smp.Replica = variant, rm.Name
		smp.T = g.t
		out = append(out, smp)
	}
	return out, errors.Join(errs...)
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
	}
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
	}
}

// SeriesColumns maps each series.csv column the scraper fills to the engine
// figure it comes from (engines.Capability).
var SeriesColumns = []struct {
	Column string
	Figure engines.Figure
}{
	{"running", engines.FigRunning},
	{"waiting", engines.FigWaiting},
	{"kv_usage", engines.FigKVUsage},
	{"prefix_queries", engines.FigPrefixQueries},
	{"prefix_hits", engines.FigPrefixHits},
	{"prompt_tokens", engines.FigPromptTokens},
	{"generation_tokens", engines.FigGenerationTokens},
	{"preemptions", engines.FigPreemptions},
}

// EngineColumns describes where each series.csv column of a replica of kind k
// comes from (the capability's source), or why it is missing: the engine lacks
// the figure (its capability note), or metricsOff (the replica's /metrics cannot
// be read) empties every column with that reason.
func EngineColumns(k engines.Kind, metricsOff string) []loadgen.ColumnSource {
	c := engines.CapabilityOf(k)
	var out []loadgen.ColumnSource
	for _, col := range SeriesColumns {
		fs, ok := c.Source(col.Figure)
		switch {
		case metricsOff != "":
			out = append(out, loadgen.ColumnSource{Column: col.Column, Missing: metricsOff})
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
