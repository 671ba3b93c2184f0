package simhttp

import (
	"context"
	"os"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/vllmmetrics"
)

var allSeries = []string{
	vllmmetrics.NumRequestsRunning, vllmmetrics.NumRequestsWaiting, vllmmetrics.KVCacheUsagePerc,
	vllmmetrics.PrefixCacheQueries, vllmmetrics.PrefixCacheHits, vllmmetrics.PromptTokens,
	vllmmetrics.GenerationTokens, vllmmetrics.NumPreemptions, vllmmetrics.PromptTokensBySrc,
	vllmmetrics.CacheConfigInfo,
}

func parseFamilies(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing exposition: %v", err)
	}
	return fams
}

func TestMetricsExposition(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	msgs := []map[string]any{{"role": "user", "content": words("m", 60)}}
	var prompt, completion, cached int
	for range 2 {
		m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 4, false)), 200)
		prompt += num(t, m, "usage", "prompt_tokens")
		completion += num(t, m, "usage", "completion_tokens")
		cached += num(t, m, "usage", "prompt_tokens_details", "cached_tokens")
	}
	code, body := get(t, ts.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics %d", code)
	}
	snap, err := scrape.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Require(allSeries...); err != nil {
		t.Fatal(err)
	}
	e := snap.Engine("0")
	st := srv.Engines()[0].Stats()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"prompt tokens", e.PromptTokens, float64(prompt)},
		{"generation tokens", e.GenerationTokens, float64(completion)},
		{"prefix queries", e.PrefixQueries, float64(prompt)},
		{"prefix hits", e.PrefixHits, float64(cached)},
		{"local_cache_hit", e.PromptBySource["local_cache_hit"], float64(cached)},
		{"local_compute", e.PromptBySource["local_compute"], float64(prompt - cached)},
		{"running", e.Running, 0},
		{"block size", float64(e.BlockSize), float64(st.BlockSize)},
		{"gpu blocks", float64(e.NumGPUBlocks), float64(st.NumGPUBlocks)},
	} {
		if c.got != c.want {
			t.Errorf("%s: /metrics %v, want %v", c.name, c.got, c.want)
		}
	}
	if cached == 0 {
		t.Error("the repeated request did not hit the cache")
	}
	if e.PrefixUnit != "tokens" {
		t.Errorf("prefix unit %q", e.PrefixUnit)
	}

	fams := parseFamilies(t, body)
	// Counters: <name>_total plus a <name>_created gauge, as vLLM's Python client writes.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if name != vllmmetrics.CacheConfigInfo && (labels["model_name"] != srv.Model() || labels["engine"] != "0") {
				t.Errorf("%s labels %v, want model_name and engine", name, labels)
			}
		}
		if f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		if !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s lacks _total", name)
			continue
		}
		cr := fams[strings.TrimSuffix(name, "_total")+"_created"]
		if cr == nil || cr.GetType() != dto.MetricType_GAUGE || len(cr.GetMetric()) != len(f.GetMetric()) {
			t.Errorf("counter %s has no matching _created gauge", name)
		}
	}
	ttft := fams[vllmmetrics.TimeToFirstToken]
	if ttft == nil || ttft.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("no TTFT histogram")
	}
	h := ttft.GetMetric()[0].GetHistogram()
	// The text parser keeps the +Inf bucket: vLLM's bounds plus one.
	if h.GetSampleCount() != 2 || len(h.GetBucket()) != len(vllmmetrics.TTFTBuckets)+1 || h.GetSampleSum() <= 0 {
		t.Errorf("TTFT histogram count %d buckets %d sum %v", h.GetSampleCount(), len(h.GetBucket()), h.GetSampleSum())
	}
	succ := map[string]float64{}
	for _, m := range fams[vllmmetrics.RequestSuccess].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "finished_reason" {
				succ[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if succ["length"] != 2 || succ["stop"] != 0 || succ["abort"] != 0 {
		t.Errorf("request_success %v", succ)
	}
	for _, l := range fams[vllmmetrics.CacheConfigInfo].GetMetric()[0].GetLabel() {
		if l.GetName() == "enable_prefix_caching" && l.GetValue() != "True" {
			t.Errorf("enable_prefix_caching %q", l.GetValue())
		}
	}
}

// TestRecordedMetricsFixtures parses the recorded vLLM /metrics excerpts with the same
// parser the harness uses on the simulator, and checks that the simulator's exposition
// follows the structure seen there (labels engine + model_name, _created companions).
func TestRecordedMetricsFixtures(t *testing.T) {
	for _, tc := range []struct {
		file   string
		engine string
		check  func(t *testing.T, e *vllmmetrics.Engine)
	}{
		{"vllm-metrics-v1-0.10.0-engine0-excerpt.txt", "0", func(t *testing.T, e *vllmmetrics.Engine) {
			if e.PrefixQueries != 32 || e.KVUsage != 9.75010481363281e-06 || e.Model != "zai-org/GLM-4.5" {
				t.Errorf("engine %+v", e)
			}
		}},
		{"vllm-metrics-v1-early-2025-03-no-engine-label-excerpt.txt", "", func(t *testing.T, e *vllmmetrics.Engine) {
			if !e.Present[vllmmetrics.NumRequestsRunning] || !e.Present[vllmmetrics.KVCacheUsagePerc] {
				t.Errorf("present %v", e.Present)
			}
		}},
		{"vllm-metrics-v1-kv-usage-api-server-count.txt", "0", func(t *testing.T, e *vllmmetrics.Engine) {
			if e.KVUsage != 0.6530455880475035 { // duplicates per API server fold to the max
				t.Errorf("kv usage %v", e.KVUsage)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			// Drop the provenance comment lines the fixtures start with.
			var b strings.Builder
			for line := range strings.Lines(string(raw)) {
				if strings.HasPrefix(line, "# source:") {
					continue
				}
				b.WriteString(line)
			}
			snap, err := scrape.Parse(strings.NewReader(b.String()))
			if err != nil {
				t.Fatal(err)
			}
			e := snap.Engine(tc.engine)
			if e == nil {
				t.Fatalf("no engine %q in %+v", tc.engine, snap.Engines)
			}
			tc.check(t, e)
		})
	}

	// The recorded 0.10.0 excerpt pairs a counter with a _created gauge carrying the
	// same labels; so does the simulator.
	raw, err := os.ReadFile("testdata/vllm-metrics-v1-0.10.0-engine0-excerpt.txt")
	if err != nil {
		t.Fatal(err)
	}
	rec := parseFamilies(t, strings.SplitN(string(raw), "\n", 2)[1])
	created := rec["vllm:gpu_prefix_cache_hits_created"]
	if created.GetType() != dto.MetricType_GAUGE {
		t.Fatalf("recorded _created type %v", created.GetType())
	}
	srv, ts := newTestServer(t, nil)
	_, body := get(t, ts.URL+"/metrics")
	ours := parseFamilies(t, body)[strings.TrimSuffix(vllmmetrics.PrefixCacheHits, "_total")+"_created"]
	if ours.GetType() != dto.MetricType_GAUGE {
		t.Fatalf("our _created type %v", ours.GetType())
	}
	labelNames := func(m *dto.Metric) string {
		var n []string
		for _, l := range m.GetLabel() {
			n = append(n, l.GetName())
		}
		return strings.Join(n, ",")
	}
	if got, want := labelNames(ours.GetMetric()[0]), labelNames(created.GetMetric()[0]); got != want {
		t.Errorf("labels %s, recorded %s", got, want)
	}
	if ours.GetMetric()[0].GetGauge().GetValue() < 1.7e9 {
		t.Errorf("_created %v is not a unix time", ours.GetMetric()[0].GetGauge().GetValue())
	}
	_ = srv
}
