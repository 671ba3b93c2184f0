package routerhttp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
)

func TestHealthCheckMarksReplicas(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, nil, up, newStub(t, "b"))
	rt := f.rt
	up.health.Store(http.StatusServiceUnavailable)
	rt.checkHealth(context.Background(), rt.targets[0])
	if f.pool().Balancer.Healthy(0) {
		t.Fatal("503 on /health left the replica healthy")
	}
	up.health.Store(http.StatusOK)
	rt.checkHealth(context.Background(), rt.targets[0])
	if !f.pool().Balancer.Healthy(0) {
		t.Fatal("200 on /health left the replica unhealthy")
	}
	up.srv.Close()
	rt.checkHealth(context.Background(), rt.targets[0])
	if f.pool().Balancer.Healthy(0) {
		t.Fatal("unreachable replica still healthy")
	}
}

// docs/router.md failure case 5 through the scraper: a scrape feeds the Balancer; once older than 3
// scrape intervals it is ignored, and placement goes by the router's own counts.
func TestScrapeFeedsBalancerAndStaleScrapesAreIgnored(t *testing.T) {
	metrics, err := os.ReadFile("testdata/vllm-metrics-v1-early-2025-03-no-engine-label-excerpt.txt")
	if err != nil {
		t.Fatal(err)
	}
	a, b := newStub(t, "a"), newStub(t, "b")
	a.metrics = string(metrics)
	bMetrics := func(queries, hits int) string {
		return "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n" +
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 9\n" +
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.9\n" +
			"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} " + strconv.Itoa(queries) + "\n" +
			"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} " + strconv.Itoa(hits) + "\n"
	}
	b.metrics = bMetrics(1000, 100)
	f := newFront(t, true, func(c *Config) { c.ScrapeInterval = time.Second }, a, b)
	rt := f.rt
	for _, tg := range rt.targets {
		rt.scrape(context.Background(), tg)
	}
	st := f.pool().Balancer.Status()
	if !st[0].ScrapeFresh || !st[1].ScrapeFresh || st[1].Waiting != 9 || st[1].KVUsage != 0.9 {
		t.Fatalf("after scrape: %+v", st)
	}
	// Fresh: b has 9 waiting, so a new session goes to a.
	resp, _ := f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s1"}, `{"model":"m"}`)
	if resp.Header.Get(wire.HeaderReplica) != "a" {
		t.Fatalf("placed on %s despite b's queue", resp.Header.Get(wire.HeaderReplica))
	}
	// 3 s + 1 ns later the scrape is stale: b's queue is ignored, the tie on router
	// counts is broken by active sessions (a has s1), so the next goes to b.
	f.clock.Advance(3*time.Second + 1)
	if st := f.pool().Balancer.Status(); st[1].ScrapeFresh {
		t.Fatal("scrape still fresh after 3 intervals")
	}
	resp, _ = f.post(t, "/v1/messages", map[string]string{wire.HeaderClaudeSession: "s2"}, `{"model":"m"}`)
	if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderReplica) != "b" {
		t.Fatalf("stale scrape still steering: %d %s", resp.StatusCode, resp.Header.Get(wire.HeaderReplica))
	}
	// Prefix hit rate for /status: lifetime from absolute counters, and since the
	// first scrape from deltas (the second scrape adds 1000 queries, 800 hits).
	b.mu.Lock()
	b.metrics = bMetrics(2000, 900)
	b.mu.Unlock()
	rt.scrape(context.Background(), rt.targets[1])
	rep := rt.Status().Models[0].Replicas
	if rep[1].PrefixHitRateLifetime != 0.45 || rep[1].PrefixHitRate != 0.8 {
		t.Fatalf("prefix hit rates %v %v, want 0.45 and 0.8", rep[1].PrefixHitRateLifetime, rep[1].PrefixHitRate)
	}
	if rep[0].PrefixHitRate != -1 {
		t.Fatalf("replica without prefix counters reports %v", rep[0].PrefixHitRate)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	up := newStub(t, "a")
	f := newFront(t, true, func(c *Config) { c.HealthInterval, c.ScrapeInterval = time.Second, time.Second }, up)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.rt.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(guard):
		t.Fatal("Run did not stop")
	}
}

func TestListenAndServeStopsWithContext(t *testing.T) {
	up := newStub(t, "a")
	cfg, err := ConfigForURLs([]string{up.srv.URL}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Clock = &simclock.Manual{}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.ListenAndServe(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("ListenAndServe did not stop")
	}
}
