package loadgenhttp

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// llama-server answers /metrics from its busy loop, late during a long
// prefill. Two such replicas and a prompt one, scraped with a timeout that
// each slow one fits in but not both in a row: every replica gets a sample,
// and the prompt one's is stamped when it was read, before the slow ones'.
// (Scraped one after another under one timeout, the second slow replica timed
// out and the prompt one was stamped after both: "replicas busy" read low.)
func TestScrapeSlowReplicasConcurrently(t *testing.T) {
	const delay = 500 * time.Millisecond
	var reps []ReplicaMetrics
	for i, d := range []time.Duration{delay, delay, 0} {
		h, err := enginestub.New(enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, MetricsDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		reps = append(reps, ReplicaMetrics{Name: []string{"slow0", "slow1", "quick"}[i], URL: srv.URL + wire.PathMetrics, Kind: engines.KindLlamaCpp})
	}
	sc := &Scraper{Replicas: reps, Clock: simclock.NewScaled(1), Timeout: 9 * delay / 5}
	got, err := sc.Scrape(context.Background(), "on")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("%d samples, want one per replica: %+v", len(got), got)
	}
	for i, s := range got {
		if s.Replica != reps[i].Name {
			t.Errorf("sample %d is %q, want %q (replica order)", i, s.Replica, reps[i].Name)
		}
	}
	if quick, slow := got[2].T, got[0].T; quick >= slow {
		t.Errorf("prompt replica stamped at %s, slow one at %s: want each at its own read, the prompt one first", quick, slow)
	}
}

// The recorded llama.cpp build does not export llamacpp:kv_cache_usage_ratio,
// which the capability names (older builds have it): the manifest's kv_usage
// column says so from what the pre-flight scrape saw, not "from
// llamacpp:kv_cache_usage_ratio"; prompt_computed_tokens comes from
// llamacpp:prompt_tokens_total.
func TestEngineColumnsFromWhatTheServerExports(t *testing.T) {
	h, err := enginestub.New(enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	snap, err := scrape.FetchEngine(context.Background(), nil, srv.URL+"/metrics", UserAgent, engines.KindLlamaCpp)
	if err != nil || len(snap.Ranks) == 0 {
		t.Fatalf("scraping the stand-in: %v", err)
	}
	cols := map[string]loadgen.ColumnSource{}
	for _, c := range EngineColumns(engines.KindLlamaCpp, "", snap.Ranks[0]) {
		cols[c.Column] = c
	}
	if kv := cols["kv_usage"]; kv.Source != "" || !strings.Contains(kv.Missing, "not exported by this server") ||
		!strings.Contains(kv.Missing, engines.LlamaCppLegacyKVUsageRatio) {
		t.Errorf("kv_usage column %+v: want missing, not exported by this server, naming %s", kv, engines.LlamaCppLegacyKVUsageRatio)
	}
	if pc := cols["prompt_computed_tokens"]; pc.Source != engines.LlamaCppPromptTokens {
		t.Errorf("prompt_computed_tokens column %+v: want source %s", pc, engines.LlamaCppPromptTokens)
	}
	// Not scraped before the run: the capability's sources as they are.
	for _, c := range EngineColumns(engines.KindLlamaCpp, "", nil) {
		if c.Column == "kv_usage" && c.Source != engines.LlamaCppLegacyKVUsageRatio {
			t.Errorf("without a scrape: kv_usage %+v, want the capability's source", c)
		}
	}
}

// Each server is polled in a loop of its own: over 1.5 s at 100 ms polls, a
// server answering /metrics 400 ms late yields about 3 samples and a prompt
// one about 15, not the slow one's 3 each (one loop waiting for both).
func TestScrapeLoopPerServer(t *testing.T) {
	var reps []ReplicaMetrics
	for i, d := range []time.Duration{400 * time.Millisecond, 0} {
		h, err := enginestub.New(enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, MetricsDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		reps = append(reps, ReplicaMetrics{Name: []string{"slow", "quick"}[i], URL: srv.URL + wire.PathMetrics, Kind: engines.KindLlamaCpp})
	}
	clock := simclock.NewScaled(1)
	var mu sync.Mutex
	count := map[string]int{}
	rn := &runner{
		cfg: RunConfig{ScrapeInterval: 100 * time.Millisecond, OnSample: func(s loadgen.SeriesSample) {
			mu.Lock()
			count[s.Replica]++
			mu.Unlock()
		}},
		sc: &loadgen.Scenario{Seed: 1}, clock: clock, progress: io.Discard,
		scraper: &Scraper{Replicas: reps, Clock: clock},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	rn.scrapeLoop(ctx, "on", clock.Now())
	mu.Lock()
	defer mu.Unlock()
	t.Logf("samples: slow %d, quick %d", count["slow"], count["quick"])
	if count["slow"] == 0 || count["quick"] < 3*count["slow"] {
		t.Errorf("samples: slow %d, quick %d; want the quick server polled at its own pace (at least 3x the slow one)", count["slow"], count["quick"])
	}
}
