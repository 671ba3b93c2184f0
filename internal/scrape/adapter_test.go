package scrape

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/vllmmetrics"
)

// recorded reads a raw HTTP response recorded with curl -i.
func recorded(t testing.TB, name string) (*http.Response, []byte) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resp, err := http.ReadResponse(bufio.NewReader(f), nil)
	if err != nil {
		t.Fatalf("reading recorded response %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading recorded body %s: %v", name, err)
	}
	return resp, b
}

func body(t testing.TB, name string) string {
	t.Helper()
	if strings.HasPrefix(name, "llamacpp/") {
		_, b := recorded(t, name)
		return string(b)
	}
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDetectKind(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       engines.Kind
	}{
		{"vllm 0.10 excerpt", body(t, "vllm-metrics-v1-0.10.0-engine0-excerpt.txt"), engines.KindVLLM},
		{"vllm early no engine label", body(t, "vllm-metrics-v1-early-2025-03-no-engine-label-excerpt.txt"), engines.KindVLLM},
		{"llama.cpp recorded", body(t, "llamacpp/metrics.txt"), engines.KindLlamaCpp},
		{"sglang built from source", body(t, "sglang/metrics-built-from-source.txt"), engines.KindSGLang},
		{"sglang dp2 tp2", body(t, "sglang/metrics-built-from-source-dp2-tp2.txt"), engines.KindSGLang},
		{"empty body", "", engines.KindUnknown},
		{"only process series", "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n", engines.KindUnknown},
		// expfmt drops a family declared without samples: no evidence.
		{"declared only", "# HELP llamacpp:requests_processing x\n# TYPE llamacpp:requests_processing gauge\n", engines.KindUnknown},
		// One family each: ambiguous, so no guess.
		{"tie", "vllm:num_requests_running 1\nsglang:num_running_reqs 2\n", engines.KindUnknown},
		{"majority", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nsglang:num_running_reqs 2\n", engines.KindVLLM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fams, err := decode(strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got, counts := DetectKind(fams); got != tc.want {
				t.Errorf("DetectKind = %q (counts %v), want %q", got, counts, tc.want)
			}
		})
	}
}

// The vLLM adapter must give Parse's numbers, with the series actually read as
// sources (a legacy name when only that one was exported).
func TestVLLMAdapterMatchesParse(t *testing.T) {
	for _, name := range []string{
		"vllm-metrics-v1-0.10.0-engine0-excerpt.txt",
		"vllm-metrics-v1-early-2025-03-no-engine-label-excerpt.txt",
		"vllm-metrics-v1-kv-usage-api-server-count.txt",
	} {
		t.Run(name, func(t *testing.T) {
			old := parseFile(t, name)
			snap, err := ParseEngine(strings.NewReader(body(t, name)), engines.KindUnknown)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Kind != engines.KindVLLM || len(snap.Ranks) != len(old.Engines) {
				t.Fatalf("kind %q, %d ranks; want vllm, %d", snap.Kind, len(snap.Ranks), len(old.Engines))
			}
			for i, e := range old.Engines {
				s := snap.Ranks[i]
				for _, c := range []struct {
					fig       string
					got       engines.Value
					canonical string
					want      float64
				}{
					{"running", s.Running, vllmmetrics.NumRequestsRunning, e.Running},
					{"waiting", s.Waiting, vllmmetrics.NumRequestsWaiting, e.Waiting},
					{"kv usage", s.KVUsage, vllmmetrics.KVCacheUsagePerc, e.KVUsage},
					{"prefix queries", s.PrefixQueries, vllmmetrics.PrefixCacheQueries, e.PrefixQueries},
					{"prefix hits", s.PrefixHits, vllmmetrics.PrefixCacheHits, e.PrefixHits},
					{"prompt", s.PromptTokens, vllmmetrics.PromptTokens, e.PromptTokens},
					{"generation", s.GenerationTokens, vllmmetrics.GenerationTokens, e.GenerationTokens},
					{"preemptions", s.Preemptions, vllmmetrics.NumPreemptions, e.Preemptions},
					{"finished", s.RequestsFinished, vllmmetrics.RequestSuccess, e.RequestsFinished},
				} {
					if c.got.Has() != e.Present[c.canonical] || (c.got.Has() && c.got.V != c.want) {
						t.Errorf("rank %q %s = %v, want present=%v value %v", e.Engine, c.fig, c.got, e.Present[c.canonical], c.want)
					}
					if c.got.Has() && !strings.HasPrefix(c.got.Source, "vllm:") {
						t.Errorf("rank %q %s source %q is not a vllm: series", e.Engine, c.fig, c.got.Source)
					}
				}
				if s.Rank != e.Engine || s.Model != e.Model {
					t.Errorf("rank/model = %q/%q, want %q/%q", s.Rank, s.Model, e.Engine, e.Model)
				}
			}
		})
	}
}

func TestVLLMAdapterSources(t *testing.T) {
	snap, err := ParseEngine(strings.NewReader(body(t, "vllm-metrics-v1-0.10.0-engine0-excerpt.txt")), engines.KindVLLM)
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Rank("0")
	if s == nil {
		t.Fatal("rank 0 missing")
	}
	// 0.10.0 exports prefix_cache_queries_total but only the legacy hits name.
	if s.PrefixQueries.Source != vllmmetrics.PrefixCacheQueries || s.PrefixHits.Source != vllmmetrics.LegacyPrefixHits {
		t.Errorf("sources: queries %q, hits %q", s.PrefixQueries.Source, s.PrefixHits.Source)
	}
	body := `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2463"} 1
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 70
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 30
`
	snap, err = ParseEngine(strings.NewReader(body), engines.KindVLLM)
	if err != nil {
		t.Fatal(err)
	}
	s = snap.Rank("0")
	if s.KVCapacityTokens.V != 16*2462 || s.KVCapacityTokens.Source != engines.SrcVLLMKVCapacity {
		t.Errorf("kv capacity = %v", s.KVCapacityTokens)
	}
	if s.PromptComputedTokens.V != 70 || !s.PromptComputedTokens.Has() {
		t.Errorf("computed = %v", s.PromptComputedTokens)
	}
	if s.Running.Has() || s.PrefixUnit != "" {
		t.Errorf("running %v unit %q: absent series must stay absent", s.Running, s.PrefixUnit)
	}
}

func TestSGLangAdapter(t *testing.T) {
	type want struct {
		running, waiting, kv, capacity, queries, hits, computed, gen, preempt, finished engines.Value
	}
	for _, tc := range []struct {
		file string
		want want
	}{
		{"sglang/metrics-built-from-source.txt", want{
			running:  engines.Of(1, engines.SGLangNumRunningReqs),
			waiting:  engines.Of(2, engines.SGLangNumQueueReqs),
			kv:       engines.Of(0.02, engines.SGLangTokenUsage),
			capacity: engines.Of(75500, engines.SGLangMaxTotalNumTokens),
			queries:  engines.Of(4416, engines.SGLangPromptTokens),
			hits:     engines.Of(2943, engines.SGLangCachedTokens),
			computed: engines.Of(1473, engines.SrcSGLangPrefillComp),
			gen:      engines.Of(24, engines.SGLangGenerationTokens),
			preempt:  engines.Of(0, engines.SGLangRetractedRequests),
			finished: engines.Of(3, engines.SGLangNumRequests),
		}},
		// tp duplicates fold to one value, dp ranks add up, usage is used/total.
		{"sglang/metrics-built-from-source-dp2-tp2.txt", want{
			running:  engines.Of(4, engines.SGLangNumRunningReqs),
			waiting:  engines.Of(2, engines.SGLangNumQueueReqs),
			kv:       engines.Of(0.4, engines.SGLangNumUsedTokens+" / "+engines.SGLangMaxTotalNumTokens),
			capacity: engines.Of(100000, engines.SGLangMaxTotalNumTokens),
			queries:  engines.Of(100000, engines.SGLangPromptTokens),
			hits:     engines.Of(80000, engines.SGLangCachedTokens),
			preempt:  engines.Of(5, engines.SGLangRetractedRequests),
		}},
		// No hit yet: cached_tokens_total has no sample, hits read 0 and say why.
		{"sglang/metrics-built-from-source-before-first-hit.txt", want{
			running:  engines.Of(0, engines.SGLangNumRunningReqs),
			waiting:  engines.Of(0, engines.SGLangNumQueueReqs),
			kv:       engines.Of(0, engines.SGLangTokenUsage),
			queries:  engines.Of(1472, engines.SGLangPromptTokens),
			hits:     engines.Of(0, engines.SrcSGLangCachedZero),
			gen:      engines.Of(8, engines.SGLangGenerationTokens),
			finished: engines.Of(1, engines.SGLangNumRequests),
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			snap, err := ParseEngine(strings.NewReader(body(t, tc.file)), engines.KindUnknown)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Kind != engines.KindSGLang || len(snap.Ranks) != 1 {
				t.Fatalf("kind %q ranks %d, want sglang with one", snap.Kind, len(snap.Ranks))
			}
			s := snap.Ranks[0]
			if s.Model != "qwen3-4b" || s.Rank != "" {
				t.Errorf("model %q rank %q", s.Model, s.Rank)
			}
			w := tc.want
			for _, c := range []struct {
				fig       string
				got, want engines.Value
			}{
				{"running", s.Running, w.running}, {"waiting", s.Waiting, w.waiting},
				{"kv usage", s.KVUsage, w.kv}, {"kv capacity", s.KVCapacityTokens, w.capacity},
				{"prefix queries", s.PrefixQueries, w.queries}, {"prefix hits", s.PrefixHits, w.hits},
				{"computed", s.PromptComputedTokens, w.computed}, {"generation", s.GenerationTokens, w.gen},
				{"preemptions", s.Preemptions, w.preempt}, {"finished", s.RequestsFinished, w.finished},
			} {
				if c.got.Source != c.want.Source || (c.got.Has() && !near(c.got.V, c.want.V)) {
					t.Errorf("%s = %v, want %v", c.fig, c.got, c.want)
				}
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestLlamaCppAdapterRecorded(t *testing.T) {
	resp, b := recorded(t, "llamacpp/metrics.txt")
	if resp.StatusCode != 200 || resp.Header.Get("Server") != "llama.cpp" {
		t.Fatalf("status %d server %q", resp.StatusCode, resp.Header.Get("Server"))
	}
	snap, err := ParseEngine(strings.NewReader(string(b)), engines.KindUnknown)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Kind != engines.KindLlamaCpp || len(snap.Ranks) != 1 {
		t.Fatalf("kind %q ranks %d", snap.Kind, len(snap.Ranks))
	}
	s := snap.Ranks[0]
	// Four requests of 1472-token prompts: 1472 computed cold, then 1 each warm.
	if s.PromptComputedTokens != engines.Of(1475, engines.LlamaCppPromptTokens) {
		t.Errorf("computed = %v", s.PromptComputedTokens)
	}
	if s.GenerationTokens != engines.Of(32, engines.LlamaCppTokensPredicted) {
		t.Errorf("generation = %v", s.GenerationTokens)
	}
	if s.Running != engines.Of(0, engines.LlamaCppRequestsProcessing) || s.Waiting != engines.Of(0, engines.LlamaCppRequestsDeferred) {
		t.Errorf("running %v waiting %v", s.Running, s.Waiting)
	}
	for fig, v := range map[string]engines.Value{"prompt tokens": s.PromptTokens, "prefix queries": s.PrefixQueries,
		"prefix hits": s.PrefixHits, "kv usage": s.KVUsage, "kv capacity": s.KVCapacityTokens,
		"preemptions": s.Preemptions, "finished": s.RequestsFinished} {
		if v.Has() {
			t.Errorf("%s = %v: the recorded build has no such series", fig, v)
		}
	}
	// Parsing the same body as vLLM finds nothing: no vllm: series, no guess.
	if old, err := Parse(strings.NewReader(string(b))); err != nil || len(old.Engines) != 0 {
		t.Errorf("Parse as vLLM = %+v, %v", old, err)
	}
}

func TestLlamaCppLegacyKVUsage(t *testing.T) {
	snap, err := ParseEngine(strings.NewReader("# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n"), engines.KindUnknown)
	if err != nil || len(snap.Ranks) != 1 || snap.Ranks[0].KVUsage != engines.Of(0.25, engines.LlamaCppLegacyKVUsageRatio) {
		t.Fatalf("snap %+v, %v", snap, err)
	}
}

// A configured kind is obeyed: a llama.cpp body read as SGLang has no figures.
func TestParseEngineConfiguredKind(t *testing.T) {
	snap, err := ParseEngine(strings.NewReader(body(t, "llamacpp/metrics.txt")), engines.KindSGLang)
	if err != nil || snap.Kind != engines.KindSGLang || len(snap.Ranks) != 0 {
		t.Fatalf("snap %+v, %v", snap, err)
	}
	if _, err := AdapterFor(engines.KindUnknown); err == nil {
		t.Error("AdapterFor(unknown) gave no error")
	}
}

func TestFetchEngineKeepsStatus(t *testing.T) {
	resp, b := recorded(t, "llamacpp/metrics-disabled.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
	}))
	defer srv.Close()
	_, err := FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindUnknown)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 501 || se.Server != "llama.cpp" || !strings.Contains(se.Body, "not_supported_error") {
		t.Fatalf("err = %v (%+v)", err, se)
	}
	if !strings.Contains(err.Error(), "http 501: ") || !strings.Contains(err.Error(), "--metrics") {
		t.Errorf("message %q", err)
	}
	// Fetch's message is unchanged by the new error type.
	if _, err := Fetch(t.Context(), nil, srv.URL+"/metrics", ""); err == nil || err.Error() != se.Error() {
		t.Errorf("Fetch error %v", err)
	}
}

func FuzzParseEngine(f *testing.F) {
	for _, name := range []string{"vllm-metrics-v1-0.10.0-engine0-excerpt.txt", "llamacpp/metrics.txt",
		"sglang/metrics-built-from-source.txt", "sglang/metrics-built-from-source-dp2-tp2.txt"} {
		f.Add(body(f, name))
	}
	f.Add("sglang:token_usage{dp_rank=\"0\"} NaN\nsglang:token_usage{dp_rank=\"1\"} 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		for _, k := range append([]engines.Kind{engines.KindUnknown}, engines.Kinds...) {
			snap, err := ParseEngine(strings.NewReader(text), k)
			if err != nil {
				return
			}
			for _, s := range snap.Ranks {
				if s == nil || s.Kind != snap.Kind {
					t.Fatalf("rank %+v in a %q snapshot", s, snap.Kind)
				}
				for _, v := range []engines.Value{s.Running, s.Waiting, s.KVUsage, s.PrefixHits, s.PrefixQueries} {
					if !v.Has() && v.V != 0 {
						t.Fatalf("absent value carries %v", v.V)
					}
				}
			}
		}
	})
}

// FetchFamilies reads one body three ways: a vLLM body gives the same
// Snapshot as Fetch and names vLLM; the recorded llama-server body has no
// vLLM series and names llama.cpp, whose adapter reads it as ParseEngine does.
func TestFetchFamiliesReadsOneBodyThreeWays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    engines.Kind
		vllmEng int
	}{
		{"vllm-metrics-v1-0.10.0-engine0-excerpt.txt", engines.KindVLLM, 1},
		{"llamacpp/metrics.txt", engines.KindLlamaCpp, 0},
	} {
		text := body(t, tc.name)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, text) }))
		fams, err := FetchFamilies(t.Context(), nil, srv.URL+"/metrics", "")
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if k := fams.Kind(); k != tc.kind {
			t.Errorf("%s: Kind %q, want %q", tc.name, k, tc.kind)
		}
		want, _ := Parse(strings.NewReader(text))
		if got := fams.VLLM(); len(got.Engines) != tc.vllmEng || len(want.Engines) != tc.vllmEng {
			t.Errorf("%s: VLLM %d engines (Parse %d), want %d", tc.name, len(got.Engines), len(want.Engines), tc.vllmEng)
		}
		pe, _ := ParseEngine(strings.NewReader(text), engines.KindUnknown)
		if got := fams.Engine(engines.KindUnknown); got.Kind != pe.Kind || len(got.Ranks) != len(pe.Ranks) || len(got.Ranks) == 0 {
			t.Errorf("%s: Engine %s with %d ranks, ParseEngine %s with %d", tc.name, got.Kind, len(got.Ranks), pe.Kind, len(pe.Ranks))
		}
	}
}
