package routerhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
)

// startYAMLRouter starts a Router from a YAML config (every scrape and health
// check 20 ms apart), logging to log.
func startYAMLRouter(t *testing.T, yamlText string, log io.Writer) *Router {
	t.Helper()
	cfg, err := ParseConfig(strings.NewReader("scrape_interval: 20ms\nhealth_interval: 20ms\n" + yamlText))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return rt
}

// llamaFleet starts n llama.cpp stand-ins as `llama-server -np 4 -c 65536
// --metrics` (4 slots of 16384 tokens) and returns their URLs.
func llamaFleet(t *testing.T, n int) []string {
	t.Helper()
	var urls []string
	for range n {
		s := httptest.NewServer(newEngineStub(t, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, ContextLen: 65536 / 4}))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	return urls
}

// The reported fleet: four llama-servers (-np 4 -c 65536) behind a router
// config that says no engine: and lists the replicas as plain URL strings.
// Before, that config did not parse ("cannot unmarshal !!str into
// routerhttp.ReplicaConfig"), and with mappings every replica was read as
// vLLM: /status had no slots, KV capacity 0, running 0, scrape_fresh false and
// no error, and the threshold was vLLM's 256/4 = 64. Now engine: auto is the
// default: each replica is detected as llama.cpp, its 4 slots and 4 x 16384
// KV tokens are read from GET /props, its gauges are fresh, and the model is
// slot-based with the auto threshold slots - 1 = 3, logged once.
func TestEngineAutoIsTheDefault(t *testing.T) {
	urls := llamaFleet(t, 4)
	var log syncBuffer
	rt := startYAMLRouter(t, fmt.Sprintf("models:\n  - name: \"*\"\n    replicas: [%s]\n", strings.Join(urls, ", ")), &log)
	for i := range 4 {
		r := waitStatus(t, rt, fmt.Sprintf("r%d", i), "was read as llama.cpp with 4 slots and fresh gauges", func(r ReplicaReport) bool {
			return r.Engine == "llamacpp" && r.Slots == 4 && r.KVCapacityTokens == 65536 && r.ScrapeFresh
		})
		if r.ScrapeError != "" {
			t.Errorf("r%d scrape_error %q", i, r.ScrapeError)
		}
	}
	ms := rt.Status().Models[0]
	if !ms.SlotBased || ms.OverflowThreshold != 3 || !ms.ThresholdAuto {
		t.Errorf("model slot_based %v, threshold %d (auto %v); want slot-based, auto 3 = slots - 1", ms.SlotBased, ms.OverflowThreshold, ms.ThresholdAuto)
	}
	if n := strings.Count(log.String(), "model is slot-based"); n != 1 {
		t.Errorf("%d \"model is slot-based\" lines, want 1:\n%s", n, log.String())
	}
	t.Logf("model: slot_based %v, threshold %d; log: %d engine detections", ms.SlotBased, ms.OverflowThreshold, strings.Count(log.String(), "replica engine detected"))
}

// A model of llama.cpp replicas with max_num_seqs configured keeps it under
// the slot rule once detected (as TestExplicitMaxNumSeqsIsNotLearned does for
// a configured engine), and a replica of another engine added later (here
// still undetected) puts the model back on vLLM's rule.
func TestEngineAutoSlotRuleFollowsTheReplicas(t *testing.T) {
	urls := llamaFleet(t, 2)
	rt := startYAMLRouter(t, fmt.Sprintf("models:\n  - name: m\n    max_num_seqs: 8\n    replicas: [%s]\n", strings.Join(urls, ", ")), io.Discard)
	for i := range 2 {
		waitStatus(t, rt, fmt.Sprintf("r%d", i), "was detected as llama.cpp", func(r ReplicaReport) bool { return r.Engine == "llamacpp" && r.Slots == 4 })
	}
	if ms := rt.Status().Models[0]; !ms.SlotBased || ms.OverflowThreshold != 7 {
		t.Fatalf("slot_based %v, threshold %d; want slot-based, 7 = configured max_num_seqs 8 - 1", ms.SlotBased, ms.OverflowThreshold)
	}
	if _, err := rt.AddReplica("m", ReplicaConfig{Name: "later", URL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if ms := rt.Status().Models[0]; ms.SlotBased || ms.OverflowThreshold != 2 {
		t.Errorf("after adding an undetected replica: slot_based %v, threshold %d; want vLLM's rule, 8/4 = 2", ms.SlotBased, ms.OverflowThreshold)
	}
}

// A replica configured as vLLM that is in fact a llama-server: before, its
// /metrics (no vllm: series) gave no figures and no error. Now /status says
// why in scrape_error, naming the engine the series are of and the setting to
// change, and the log says it once however many scrapes fail so.
func TestVLLMReplicaWithoutVLLMSeriesSaysSo(t *testing.T) {
	urls := llamaFleet(t, 1)
	var log syncBuffer
	rt := startYAMLRouter(t, fmt.Sprintf("models:\n  - name: m\n    engine: vllm\n    replicas: [%s]\n", urls[0]), &log)
	r := waitStatus(t, rt, "r0", "gave a scrape error", func(r ReplicaReport) bool { return r.ScrapeError != "" })
	time.Sleep(200 * time.Millisecond) // about ten more scrapes
	for _, want := range []string{"no vllm: series but llamacpp: ones", "set engine: llamacpp, or auto"} {
		if !strings.Contains(r.ScrapeError, want) {
			t.Errorf("scrape_error %q lacks %q", r.ScrapeError, want)
		}
	}
	if r.ScrapeFresh || r.Engine != "vllm" {
		t.Errorf("scrape_fresh %v, engine %q; want false, vllm (as configured)", r.ScrapeFresh, r.Engine)
	}
	if n := strings.Count(log.String(), "replica metrics cannot be read"); n != 1 || !strings.Contains(log.String(), "class=\"no series\"") {
		t.Errorf("%d warning lines over about ten scrapes, want 1 of class \"no series\":\n%s", n, log.String())
	}
}

// kv_usage in /status (the admin API's JSON): before, a llama-server, whose
// recorded build has no KV usage series, read 0. Now it is null, with a
// missing_figures line saying the server does not export it; an SGLang
// stand-in, which exports sglang:token_usage, gives a number. The card shows
// "–" for the llama.cpp replica, and its fleet row averages only SGLang's.
func TestKVUsageNotExportedIsNull(t *testing.T) {
	llama := llamaFleet(t, 1)[0]
	sgl := httptest.NewServer(newEngineStub(t, enginestub.Config{Kind: engines.KindSGLang, Metrics: true, Slots: 8, ContextLen: 4096, KVTokens: 20000}))
	t.Cleanup(sgl.Close)
	rt := startYAMLRouter(t, fmt.Sprintf("models:\n  - name: m\n    replicas: [%s, %s]\n", llama, sgl.URL), io.Discard)
	waitStatus(t, rt, "r0", "was read", func(r ReplicaReport) bool { return r.ScrapeFresh && r.Engine == "llamacpp" })
	waitStatus(t, rt, "r1", "was read", func(r ReplicaReport) bool { return r.ScrapeFresh && r.Engine == "sglang" })

	rec := httptest.NewRecorder()
	rt.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	var st struct {
		Models []struct {
			Replicas []struct {
				Name    string          `json:"name"`
				KVUsage json.RawMessage `json:"kv_usage"`
				Missing []string        `json:"missing_figures"`
			} `json:"replicas"`
		} `json:"models"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Models) != 1 || len(st.Models[0].Replicas) != 2 {
		t.Fatalf("GET /status: %v\n%s", err, rec.Body.String())
	}
	l, s := st.Models[0].Replicas[0], st.Models[0].Replicas[1]
	t.Logf("llama.cpp kv_usage %s, missing %q; sglang kv_usage %s", l.KVUsage, l.Missing, s.KVUsage)
	if string(l.KVUsage) != "null" {
		t.Errorf("llama.cpp kv_usage %s, want null", l.KVUsage)
	}
	want := "kv_usage: not exported by this server: llamacpp:kv_cache_usage_ratio absent from its /metrics"
	if !strings.Contains(strings.Join(l.Missing, "\n"), want) {
		t.Errorf("llama.cpp missing_figures %q lack %q", l.Missing, want)
	}
	var kv float64
	if err := json.Unmarshal(s.KVUsage, &kv); err != nil || lacks(s.Missing, engines.FigKVUsage) {
		t.Errorf("SGLang kv_usage %s (missing %q), want a number", s.KVUsage, s.Missing)
	}
	card := rt.Card().Models[0]
	if k := card.Replicas[0].KVUsage; k != -1 {
		t.Errorf("card: llama.cpp KV usage %v, want -1 (shown as –)", k)
	}
	if f, want := card.Fleet.KVUsage, card.Replicas[1].KVUsage; f != want {
		t.Errorf("card: fleet KV usage %v, want SGLang's %v alone", f, want)
	}
}

// A replica that stops answering: its last kv_usage was a number, and once
// its scrape is stale (scrape_fresh false) /status says null, not the figure
// of a cache that may be gone.
func TestKVUsageOfADeadReplicaIsNull(t *testing.T) {
	sgl := httptest.NewServer(newEngineStub(t, enginestub.Config{Kind: engines.KindSGLang, Metrics: true, Slots: 8, ContextLen: 4096, KVTokens: 20000}))
	rt := startYAMLRouter(t, fmt.Sprintf("models:\n  - name: m\n    replicas: [%s]\n", sgl.URL), io.Discard)
	kv := func() string {
		rec := httptest.NewRecorder()
		rt.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
		var st struct {
			Models []struct {
				Replicas []struct {
					KVUsage json.RawMessage `json:"kv_usage"`
				} `json:"replicas"`
			} `json:"models"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Models) != 1 || len(st.Models[0].Replicas) != 1 {
			t.Fatalf("GET /status: %v\n%s", err, rec.Body.String())
		}
		return string(st.Models[0].Replicas[0].KVUsage)
	}
	waitStatus(t, rt, "r0", "was read", func(r ReplicaReport) bool { return r.ScrapeFresh })
	if v := kv(); v == "null" {
		t.Fatalf("live replica: kv_usage null, want a number")
	}
	sgl.Close()
	waitStatus(t, rt, "r0", "went stale", func(r ReplicaReport) bool { return !r.ScrapeFresh })
	if v := kv(); v != "null" {
		t.Errorf("dead replica: kv_usage %s, want null", v)
	}
}
