package scrape

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/vllmmetrics"
)

func parseFile(t *testing.T, name string) *vllmmetrics.Snapshot {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return s
}

// The 0.10.0 excerpt has the current prefix_cache_queries_total, the legacy
// gpu_prefix_cache_hits_total and kv_cache_usage_perc, with an engine label.
func TestParseRecordedV1Engine0(t *testing.T) {
	s := parseFile(t, "vllm-metrics-v1-0.10.0-engine0-excerpt.txt")
	e := s.Engine("0")
	if e == nil {
		t.Fatalf("engine 0 missing; engines %+v", s.Engines)
	}
	if e.Model != "zai-org/GLM-4.5" {
		t.Errorf("model = %q", e.Model)
	}
	if e.PrefixQueries != 32 {
		t.Errorf("prefix queries = %v, want 32", e.PrefixQueries)
	}
	if !e.Present[vllmmetrics.PrefixCacheHits] || e.PrefixHits != 0 {
		t.Errorf("prefix hits present=%v value=%v, want present 0 (legacy name fallback)", e.Present[vllmmetrics.PrefixCacheHits], e.PrefixHits)
	}
	if e.KVUsage <= 0 || e.KVUsage > 1e-4 {
		t.Errorf("kv usage = %v", e.KVUsage)
	}
	if e.PrefixUnit != "tokens" {
		t.Errorf("unit = %q, want tokens", e.PrefixUnit)
	}
}

// Early V1 (March 2025): no engine label, gpu_cache_usage_perc, counts in blocks.
func TestParseRecordedEarlyV1WithoutEngineLabel(t *testing.T) {
	s := parseFile(t, "vllm-metrics-v1-early-2025-03-no-engine-label-excerpt.txt")
	if len(s.Engines) != 1 || s.Engines[0].Engine != "" {
		t.Fatalf("want one unlabelled engine, got %+v", s.Engines)
	}
	e := s.Engines[0]
	if !e.Present[vllmmetrics.KVCacheUsagePerc] {
		t.Error("gpu_cache_usage_perc not read as kv usage")
	}
	if !e.Present[vllmmetrics.NumRequestsRunning] || !e.Present[vllmmetrics.NumRequestsWaiting] {
		t.Error("running/waiting not read")
	}
	// The excerpt stops right after the TYPE line of the block-counted queries
	// series, so it carries no sample: Require must say so rather than read 0.
	err := s.Require(vllmmetrics.PrefixCacheQueries)
	if !errors.Is(err, vllmmetrics.ErrMissingSeries) {
		t.Errorf("Require(prefix queries) = %v, want ErrMissingSeries", err)
	}
}

// With --api-server-count > 1 some versions exported one kv_cache_usage_perc per
// API-server pid; only one carried the real value. Gauges fold to the largest.
func TestParseDuplicatePidSeriesFoldToMax(t *testing.T) {
	s := parseFile(t, "vllm-metrics-v1-kv-usage-api-server-count.txt")
	e := s.Engine("0")
	if e == nil {
		t.Fatal("engine 0 missing")
	}
	if e.KVUsage < 0.653 || e.KVUsage > 0.654 {
		t.Errorf("kv usage = %v, want 0.6530455880475035", e.KVUsage)
	}
}

// vllm:request_success_total has one series per finished_reason (and, with several
// API servers, per pid); an engine's finished count is their sum.
func TestRequestsFinishedSumsFinishReasons(t *testing.T) {
	body := `# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 5
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 1
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 2
`
	s, err := Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if e0, e1 := s.Engine("0"), s.Engine("1"); e0 == nil || e1 == nil || e0.RequestsFinished != 9 || e1.RequestsFinished != 2 || !e0.Present[vllmmetrics.RequestSuccess] {
		t.Fatalf("finished counts: %+v %+v, want 9 and 2", e0, e1)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	_, err := Parse(strings.NewReader("vllm:num_requests_running{engine=\"0\" 1\n"))
	if err == nil {
		t.Fatal("want parse error for an unterminated label set")
	}
}

func TestRequireNamesEveryMissingSeries(t *testing.T) {
	body := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:num_requests_running{engine="1",model_name="m"} 0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5
`
	s, err := Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Engines) != 2 || s.Engines[0].Engine != "0" || s.Engines[1].Engine != "1" {
		t.Fatalf("engines = %+v", s.Engines)
	}
	err = s.Require(vllmmetrics.NumRequestsRunning, vllmmetrics.PrefixCacheHits)
	if err == nil || !strings.Contains(err.Error(), `engine "0" lacks vllm:prefix_cache_hits_total`) {
		t.Fatalf("Require = %v", err)
	}
	if strings.Contains(err.Error(), `engine "1"`) {
		t.Errorf("engine 1 has both series but was named: %v", err)
	}
	if _, err := Parse(strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	empty, _ := Parse(strings.NewReader(""))
	if err := empty.Require(vllmmetrics.NumRequestsRunning); !errors.Is(err, vllmmetrics.ErrMissingSeries) {
		t.Errorf("empty body Require = %v", err)
	}
}

func TestCounterDeltaTreatsDecreaseAsReset(t *testing.T) {
	cases := []struct{ prev, cur, want float64 }{
		{10, 25, 15},
		{25, 25, 0},
		{100, 7, 7}, // server restarted: 7 counted since
	}
	for _, c := range cases {
		if got := vllmmetrics.CounterDelta(c.prev, c.cur); got != c.want {
			t.Errorf("CounterDelta(%v,%v) = %v, want %v", c.prev, c.cur, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm-metrics-v1-0.10.0-engine0-excerpt.txt", "vllm-metrics-v1-kv-usage-api-server-count.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("vllm:num_requests_waiting 3\n")
	f.Fuzz(func(t *testing.T, body string) {
		s, err := Parse(strings.NewReader(body))
		if err != nil {
			return
		}
		for _, e := range s.Engines {
			if e.Present == nil {
				t.Fatal("engine without Present map")
			}
		}
	})
}

// vllm:cache_config_info has an engine label but no model_name, and sorts first:
// the engine's model must still come from the other series.
func TestModelNameSurvivesCacheConfigInfoFirst(t *testing.T) {
	body := `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2463",enable_prefix_caching="True"} 1
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3-4b"} 1
`
	s, err := Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	e := s.Engine("0")
	if e == nil || e.Model != "qwen3-4b" || e.BlockSize != 16 || e.NumGPUBlocks != 2463 {
		t.Fatalf("engine = %+v", e)
	}
}
