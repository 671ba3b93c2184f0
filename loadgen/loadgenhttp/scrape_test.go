package loadgenhttp

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/vllmmetrics"
)

func TestScrapePicksEnginesAndMarksMissing(t *testing.T) {
	stub, srv := newStub(t)
	stub.prompt = [2]float64{10, 20}
	stub.running = [2]int{1, 3}
	sc := &Scraper{Replicas: []ReplicaMetrics{
		{Name: "a", URL: srv.URL + "/metrics", Engine: "1"},
		{Name: "whole", URL: srv.URL + "/metrics"}, // both engines summed
	}, HTTP: srv.Client(), Clock: newStepClock()}
	got, err := sc.Scrape(context.Background(), "off")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Replica != "a" || got[0].PromptTokens != 20 || got[0].Running != 3 ||
		got[1].PromptTokens != 30 || got[1].Running != 4 || got[1].KVUsage != 0.0625 || got[0].Variant != "off" {
		t.Errorf("samples %+v", got)
	}
	if got[0].T != got[1].T {
		t.Error("one URL fetched twice in one scrape")
	}

	sc.Replicas = []ReplicaMetrics{{Name: "x", URL: srv.URL + "/metrics", Engine: "7"}}
	if _, err := sc.Scrape(context.Background(), "off"); err == nil || !strings.Contains(err.Error(), `engine "7" not found`) {
		t.Errorf("unknown engine: %v", err)
	}

	stub.metrics = readFixture(t, "vllm-metrics-v1-0.10.0-engine0-excerpt.txt")
	sc.Replicas = []ReplicaMetrics{{Name: "r0", URL: srv.URL + "/metrics", Engine: "0"}}
	got, err = sc.Scrape(context.Background(), "off")
	if err == nil || len(got) != 1 {
		t.Fatalf("excerpt: err %v, %d samples", err, len(got))
	}
	for _, name := range []string{vllmmetrics.NumRequestsRunning, vllmmetrics.NumRequestsWaiting, vllmmetrics.PromptTokens} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
	s := got[0]
	// Present in the excerpt: KV usage, prefix queries (32) and hits (legacy name, 0).
	if !math.IsNaN(s.Running) || !math.IsNaN(s.Waiting) || s.PrefixQueries != 32 || s.PrefixHits != 0 || math.IsNaN(s.KVUsage) {
		t.Errorf("sample %+v: want NaN for missing series only", s)
	}

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", 503) }))
	defer bad.Close()
	sc.Replicas = []ReplicaMetrics{{Name: "r0", URL: bad.URL}}
	if got, err := sc.Scrape(context.Background(), "off"); err == nil || len(got) != 0 {
		t.Errorf("503: %d samples, err %v", len(got), err)
	}
}
