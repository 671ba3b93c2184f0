package routerhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/vllmmetrics"
)

// Scraping other engines than vLLM (ReplicaConfig.Engine): the adapter's
// figures (scrape.FetchEngine) go through observe as the vLLM series they
// stand for, so the policies, /status and the card read one path; KV capacity
// comes from the adapter (SGLang max_total_num_tokens on /metrics, llama.cpp
// GET /props total_slots x n_ctx), and what the engine lacks is listed with why.

// scrapeEngine scrapes target t of kind (KindUnknown: detect) at metricsURL.
// A detected vLLM server is read on vLLM's path (observeVLLM: DP ranks by
// engine label) from the same body; any detection may change the model's
// threshold rule (applySlotRule).
func (rt *Router) scrapeEngine(ctx context.Context, t *target, kind engines.Kind, metricsURL string) {
	fams, err := scrape.FetchFamilies(ctx, rt.client, metricsURL, "")
	var se *scrape.StatusError
	isStatus := errors.As(err, &se)
	if kind == engines.KindUnknown {
		switch {
		case err == nil:
			kind = fams.Kind()
		case isStatus && se.Code == http.StatusNotImplemented && (se.Server == "llama.cpp" || strings.Contains(se.Body, "not_supported_error")):
			kind = engines.KindLlamaCpp
		}
		if kind != engines.KindUnknown {
			t.mu.Lock()
			t.kind = kind
			t.mu.Unlock()
			rt.log.Info("replica engine detected", "model", t.pool.Model, "url", t.url.String(), "engine", string(kind))
			rt.applySlotRule(t.pool, rt.targetList())
		}
	}
	if kind == engines.KindVLLM && err == nil {
		rt.observeVLLM(ctx, t, fams)
		return
	}
	if kind == engines.KindLlamaCpp {
		rt.readProps(ctx, t)
	}
	t.mu.Lock()
	t.lacks = lackedFigures(engines.CapabilityOf(kind))
	t.mu.Unlock()
	var snap *engines.Snapshot
	if err == nil {
		snap = fams.Engine(kind)
	}
	switch {
	case isStatus && (se.Code == http.StatusNotImplemented || se.Code == http.StatusNotFound):
		rt.scrapeFailed(ctx, t, "metrics off", fmt.Sprintf("metrics off: GET /metrics answered %d (%s)", se.Code, metricsFlagOf(kind)))
		return
	case err != nil:
		rt.scrapeFailed(ctx, t, scrapeErrorClass(err), err.Error())
		return
	case kind == engines.KindUnknown:
		rt.scrapeFailed(ctx, t, "engine unknown", "engine not identified from /metrics (no vllm:, sglang: or llamacpp: series): set engine: in the config")
		return
	case len(snap.Ranks) == 0:
		rt.scrapeFailed(ctx, t, "no series", fmt.Sprintf("GET /metrics has none of %s's series", kind))
		return
	}
	rt.scrapeFailed(ctx, t, "", "")
	st := snap.Ranks[0]
	if n, ok := st.KVCapacityTokens.Get(); ok && n > 0 {
		for _, i := range t.replicas {
			t.pool.Balancer.ObserveCapacity(i, int64(n))
		}
	}
	rt.observe(t, asVLLM(st), rt.clock.Now())
}

// applySlotRule sets the auto threshold's rule of pool from the engines of
// its replicas among targets, as now known (configured or detected): the slot
// rule when every one is llama.cpp (learning max_num_seqs from /props unless
// it is configured), vLLM's otherwise (a replica still undetected counts as
// not llama.cpp). A change is logged.
func (rt *Router) applySlotRule(pool *Pool, targets []*target) {
	all, n := true, 0
	for _, t := range targets {
		if t.pool != pool {
			continue
		}
		t.mu.Lock()
		all = all && t.kind == engines.KindLlamaCpp
		t.mu.Unlock()
		n++
	}
	on := all && n > 0
	if !pool.Balancer.SetSlotBased(on, pool.learnSlots) {
		return
	}
	th, auto := pool.Balancer.OverflowThreshold()
	if on {
		rt.log.Info("model is slot-based: every replica is llama.cpp, auto overflow threshold = slots - 1", "model", pool.Model, "overflow_threshold", th, "auto", auto)
	} else {
		rt.log.Info("model is not slot-based: not every replica is llama.cpp, auto overflow threshold = max_num_seqs / 4", "model", pool.Model, "overflow_threshold", th, "auto", auto)
	}
}

// asVLLM is st as the vLLM series it stands for (Present only where st has the
// figure): running, waiting, KV usage, prefix counters in tokens, prompt
// tokens (cached included), generation tokens, preemptions.
func asVLLM(st *engines.Stats) *vllmmetrics.Snapshot {
	e := &vllmmetrics.Engine{Model: st.Model, Present: map[string]bool{}, PrefixUnit: "tokens"}
	set := func(name string, v engines.Value, dst *float64) {
		if x, ok := v.Get(); ok {
			*dst = x
			e.Present[name] = true
		}
	}
	set(vllmmetrics.NumRequestsRunning, st.Running, &e.Running)
	set(vllmmetrics.NumRequestsWaiting, st.Waiting, &e.Waiting)
	set(vllmmetrics.KVCacheUsagePerc, st.KVUsage, &e.KVUsage)
	set(vllmmetrics.PrefixCacheQueries, st.PrefixQueries, &e.PrefixQueries)
	set(vllmmetrics.PrefixCacheHits, st.PrefixHits, &e.PrefixHits)
	set(vllmmetrics.PromptTokens, st.PromptTokens, &e.PromptTokens)
	set(vllmmetrics.GenerationTokens, st.GenerationTokens, &e.GenerationTokens)
	set(vllmmetrics.NumPreemptions, st.Preemptions, &e.Preemptions)
	if !e.Present[vllmmetrics.NumRequestsRunning] && e.Present[vllmmetrics.NumRequestsWaiting] {
		delete(e.Present, vllmmetrics.NumRequestsWaiting)
	}
	return &vllmmetrics.Snapshot{Engines: []*vllmmetrics.Engine{e}}
}

// propsInterval is how often the router reads a llama.cpp replica's GET /props
// again (also at once after its health check recovers), so a server restarted
// with other -np or -c updates slots, capacity and the slot-based threshold.
const propsInterval = 30 * time.Second

// readProps reads llama-server's GET /props (slots, each slot's context n_ctx,
// KV capacity = slots x n_ctx) when it was never read, propsInterval ago, or
// since a health recovery; a failure is retried at the next scrape.
func (rt *Router) readProps(ctx context.Context, t *target) {
	t.mu.Lock()
	due := t.slots == 0 || t.propsAt.IsZero() || time.Since(t.propsAt) >= propsInterval
	t.mu.Unlock()
	if !due {
		return
	}
	resp, err := rt.get(ctx, t, "/props")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return
	}
	p, err := engineapi.ParseProps(b)
	if err != nil {
		return
	}
	if n, ok := p.Slots.Get(); ok && n > 0 {
		nctx, _ := p.ContextLength.Get()
		// The Balancer first, so /status never shows slots the threshold lacks.
		for _, i := range t.replicas {
			t.pool.Balancer.ObserveSlots(i, int(n), int64(nctx))
		}
		t.mu.Lock()
		t.slots, t.propsAt = int(n), time.Now()
		t.mu.Unlock()
	}
	if n, ok := p.KVCapacityTokens.Get(); ok && n > 0 {
		for _, i := range t.replicas {
			t.pool.Balancer.ObserveCapacity(i, int64(n))
		}
	}
}

// lackedFigures lists the per-replica figures (the /metrics ones and KV
// capacity) c does not have, as "figure: why".
func lackedFigures(c engines.Capability) []string {
	var out []string
	for _, f := range []engines.Figure{engines.FigRunning, engines.FigWaiting, engines.FigKVUsage, engines.FigKVCapacity, engines.FigPrefixQueries, engines.FigPrefixHits} {
		if fs, ok := c.Source(f); !ok {
			out = append(out, string(f)+": "+fs.Note)
		}
	}
	return out
}

// observedGauges are the vLLM gauges observe reads per replica, with the
// figure each stands for (asVLLM maps another engine's figures onto them).
// Counters are left out: SGLang's have no sample before their first increment
// (prometheus_client in multiprocess mode), so absent is not "not exported".
var observedGauges = []struct {
	series string
	fig    engines.Figure
}{
	{vllmmetrics.NumRequestsRunning, engines.FigRunning},
	{vllmmetrics.NumRequestsWaiting, engines.FigWaiting},
	{vllmmetrics.KVCacheUsagePerc, engines.FigKVUsage},
}

// notExported lists the gauges engine kind has (its capability names a
// source) that snap, one read of a server's /metrics, has on none of its
// engines, as "figure: not exported by this server: <source> absent from its
// /metrics" (the harness's wording, loadgenhttp.EngineColumns): a build older
// or newer than the one the capability was read from, e.g. llama.cpp's
// kv_cache_usage_ratio, which recent builds no longer export.
func notExported(kind engines.Kind, snap *vllmmetrics.Snapshot) []string {
	c := engines.CapabilityOf(kind)
	var out []string
	for _, of := range observedGauges {
		fs, ok := c.Source(of.fig)
		if !ok {
			continue // the engine lacks it: lackedFigures says why
		}
		found := false
		for _, e := range snap.Engines {
			found = found || e.Present[of.series]
		}
		if !found {
			out = append(out, fmt.Sprintf("%s: not exported by this server: %s absent from its /metrics", of.fig, fs.Source))
		}
	}
	return out
}

// lacks reports whether missing (ReplicaReport.Missing) names figure f.
func lacks(missing []string, f engines.Figure) bool {
	for _, m := range missing {
		if strings.HasPrefix(m, string(f)+":") {
			return true
		}
	}
	return false
}

// metricsFlagOf names the server flag that turns /metrics on.
func metricsFlagOf(k engines.Kind) string {
	switch k {
	case engines.KindLlamaCpp:
		return "llama-server needs --metrics"
	case engines.KindSGLang:
		return "sglang.launch_server needs --enable-metrics"
	}
	return "metrics disabled on the server"
}
