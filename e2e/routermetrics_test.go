package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// The router's /metrics carries the working set and the per-request cache view
// that /status shows: after two conversations through the router to the
// simulator, warden_live_conversations, warden_live_tokens,
// warden_kv_capacity_tokens and warden_usage_{prompt,cached}_tokens_total equal
// the status fields per replica, the two conversations are live, the capacity is
// the simulator's (num_gpu_blocks - 1) x block_size, and later turns read cached
// tokens.
func TestRouterMetricsCarryWorkingSetAndUsage(t *testing.T) {
	f := startFleet(t, simhttp.Config{Replicas: 2, Speed: 10, ReplyTokens: 24}, 32)
	served := f.sim.Config().Model
	for s, anthropic := range []bool{false, true} {
		if err := driveSession(context.Background(), f.url, served, fmt.Sprintf("metrics-session-%d", s), anthropic, uint64(s), 3); err != nil {
			t.Fatal(err)
		}
	}
	f.log.all() // waits for the handlers, so their usage is counted

	var reps []routerhttp.ReplicaReport
	for deadline := time.Now().Add(10 * time.Second); ; {
		reps = f.rt.Status().Models[0].Replicas
		if reps[0].KVCapacityTokens > 0 && reps[1].KVCapacityTokens > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no KV capacity known after 10 s: %+v", reps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// got[series][replica]
	got := map[string]map[string]float64{}
	for _, name := range []string{routerhttp.MetricLiveConversations, routerhttp.MetricLiveTokens,
		routerhttp.MetricKVCapacityTokens, routerhttp.MetricUsagePrompt, routerhttp.MetricUsageCached} {
		fam, ok := fams[name]
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		got[name] = map[string]float64{}
		for _, m := range fam.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() == "replica" {
					got[name][l.GetValue()] = v
				}
			}
		}
	}
	// The capacity the simulator announces in vllm:cache_config_info.
	simResp, err := http.Get(f.sim.URLs()[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := scrape.Parse(simResp.Body)
	simResp.Body.Close()
	if err != nil || len(snap.Engines) != 1 || snap.Engines[0].NumGPUBlocks == 0 {
		t.Fatalf("simulator /metrics: %v %+v", err, snap)
	}
	blocks, blockSize := snap.Engines[0].NumGPUBlocks, snap.Engines[0].BlockSize
	wantCap := float64((blocks - 1) * blockSize)
	var live, prompt, cached float64
	for _, r := range reps {
		for name, want := range map[string]float64{
			routerhttp.MetricLiveConversations: float64(r.Live),
			routerhttp.MetricLiveTokens:        float64(r.LiveTokens),
			routerhttp.MetricKVCapacityTokens:  float64(r.KVCapacityTokens),
			routerhttp.MetricUsagePrompt:       float64(r.UsagePromptTokens),
			routerhttp.MetricUsageCached:       float64(r.UsageCachedTokens),
		} {
			if g, ok := got[name][r.Name]; !ok || g != want {
				t.Errorf("%s{replica=%q} = %v (present %v), /status says %v", name, r.Name, g, ok, want)
			}
		}
		if float64(r.KVCapacityTokens) != wantCap {
			t.Errorf("replica %s: KV capacity %d tokens, want (%d-1) x %d", r.Name, r.KVCapacityTokens, blocks, blockSize)
		}
		live += got[routerhttp.MetricLiveConversations][r.Name]
		prompt += got[routerhttp.MetricUsagePrompt][r.Name]
		cached += got[routerhttp.MetricUsageCached][r.Name]
	}
	if live != 2 || prompt < 6*600 || cached < 4*600 || cached >= prompt {
		t.Fatalf("metrics: %v live conversations (want 2), %v prompt and %v cached tokens over 6 turns", live, prompt, cached)
	}
}
