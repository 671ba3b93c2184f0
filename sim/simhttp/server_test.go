package simhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/sim"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestInfoEndpoints(t *testing.T) {
	srv, ts := newTestServer(t, nil)
	if code, body := get(t, ts.URL+"/health"); code != 200 || body != "" {
		t.Errorf("/health %d %q", code, body)
	}
	code, body := get(t, ts.URL+"/version")
	if v := jsonOf(t, body)["version"]; code != 200 || !strings.HasPrefix(v.(string), "sim-") {
		t.Errorf("/version %d %s", code, body)
	}
	code, body = get(t, ts.URL+"/v1/models")
	m := jsonOf(t, body)
	if code != 200 || m["object"] != "list" {
		t.Fatalf("/v1/models %d %s", code, body)
	}
	card := m["data"].([]any)[0].(map[string]any)
	if card["id"] != srv.Model() || card["object"] != "model" || card["owned_by"] != "vllm" {
		t.Errorf("model card %v", card)
	}
	if got := num(t, card, "max_model_len"); got != srv.Engines()[0].Config().MaxModelLen {
		t.Errorf("max_model_len %d", got)
	}
}

func TestResetPrefixCache(t *testing.T) {
	t.Run("dev mode", func(t *testing.T) {
		srv, ts := newTestServer(t, nil)
		msgs := []map[string]any{{"role": "user", "content": words("r", 100)}}
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 2, false)), 200)
		resp := post(t, context.Background(), ts.URL+"/reset_prefix_cache", "")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("reset status %d", resp.StatusCode)
		}
		m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 2, false)), 200)
		if c := num(t, m, "usage", "prompt_tokens_details", "cached_tokens"); c != 0 {
			t.Errorf("cached_tokens after reset %d, want 0", c)
		}
	})
	t.Run("dev mode off", func(t *testing.T) {
		_, ts := newTestServer(t, func(c *Config) { c.DevMode = false })
		resp := post(t, context.Background(), ts.URL+"/reset_prefix_cache", "")
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404 without dev mode", resp.StatusCode)
		}
	})
}

func TestDPPinningAndMetrics(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.DataParallelSize = 3 })
	msgs := []map[string]any{{"role": "user", "content": words("d", 50)}}
	for range 2 {
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 2, false), wire.HeaderDPRank, "2"), 200)
	}
	for i, e := range srv.Engines() {
		st := e.Stats()
		if (i == 2) != (st.PromptTokens > 0) {
			t.Errorf("engine %d prompt tokens %d; only rank 2 should have served", i, st.PromptTokens)
		}
	}
	if st := srv.Engines()[2].Stats(); st.PrefixHits == 0 {
		t.Errorf("pinned repeat did not hit rank 2's cache: %+v", st)
	}
	for _, h := range []string{"3", "-1", "one"} {
		m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 2, false), wire.HeaderDPRank, h), 400)
		if m["error"].(map[string]any)["type"] != "BadRequestError" {
			t.Errorf("rank %q: %v", h, m)
		}
	}
	_, body := get(t, ts.URL+"/metrics")
	snap, err := scrape.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, e := range snap.Engines {
		labels = append(labels, e.Engine)
	}
	if strings.Join(labels, ",") != "0,1,2" {
		t.Errorf("engine labels %v, want 0,1,2", labels)
	}
	if snap.Engine("2").PromptTokens == 0 || snap.Engine("0").PromptTokens != 0 {
		t.Errorf("per-engine prompt tokens wrong: %+v %+v", snap.Engine("0"), snap.Engine("2"))
	}
}

// TestDPBalancedRequestsSpread: unpinned requests on an idle DP server go to different
// ranks (rotating scan start and optimistic +1), as vLLM's balancer sends them.
func TestDPBalancedRequestsSpread(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.DataParallelSize = 4 })
	msgs := []map[string]any{{"role": "user", "content": "spread me"}}
	for range 4 {
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody(srv.Model(), msgs, 1, false)), 200)
	}
	for i, e := range srv.Engines() {
		if st := e.Stats(); st.RequestsFinished != 1 {
			t.Errorf("rank %d finished %d requests, want 1 each", i, st.RequestsFinished)
		}
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.ReplyTokens = 5000 })
	eng := srv.Engines()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := chatBody(srv.Model(), []map[string]any{{"role": "user", "content": "talk a lot"}}, 4000, true)
	resp := post(t, ctx, ts.URL+"/v1/chat/completions", body)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n') // the role event: the request is running
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	if st := eng.Stats(); st.Running != 1 {
		t.Fatalf("running %d, want 1 while streaming", st.Running)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the abort to reach the engine", func() bool {
		st := eng.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.RequestsAborted == 1 && eng.Live() == 0
	})
	if st := eng.Stats(); st.RequestsFinished != 0 {
		t.Errorf("finished %d, want 0 (aborted)", st.RequestsFinished)
	}
}

// TestSlowClientDoesNotStallEngine: a client that reads nothing does not hold up
// another request on the same engine.
func TestSlowClientDoesNotStallEngine(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.ReplyTokens = 3000 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := post(t, ctx, ts.URL+"/v1/chat/completions", chatBody(srv.Model(), []map[string]any{{"role": "user", "content": "slow"}}, 2000, true))
	defer slow.Body.Close() // never read until the end
	m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions",
		chatBody(srv.Model(), []map[string]any{{"role": "user", "content": "fast"}}, 3, false)), 200)
	if got := num(t, m, "usage", "completion_tokens"); got != 3 {
		t.Errorf("completion_tokens %d", got)
	}
}

func TestServerCloseFailsLiveStreams(t *testing.T) {
	srv, ts := newTestServer(t, func(c *Config) { c.ReplyTokens = 5000 })
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions",
		chatBody(srv.Model(), []map[string]any{{"role": "user", "content": "long"}}, 4000, true))
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"error"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("stream after Close: %q, want an error event then [DONE]", rest)
	}
	// After Close a request is refused, not queued forever.
	m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions",
		chatBody(srv.Model(), []map[string]any{{"role": "user", "content": "late"}}, 2, false)), http.StatusServiceUnavailable)
	if m["error"] == nil {
		t.Errorf("503 without error object: %v", m)
	}
}

func TestClusterStartStop(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := DefaultConfig()
	cfg.Replicas = 3
	cfg.DataParallelSize = 2
	cfg.Speed = testSpeed
	cfg.ReplyTokens = 5000
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	urls := c.URLs()
	if len(urls) != 3 || len(c.Engines()) != 6 {
		t.Fatalf("urls %v engines %d", urls, len(c.Engines()))
	}
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] {
			t.Errorf("duplicate url %s", u)
		}
		seen[u] = true
		if code, _ := get(t, u+"/health"); code != 200 {
			t.Errorf("%s/health %d", u, code)
		}
	}
	// A stream in flight when the cluster stops ends with an error event.
	body := chatBody(cfg.Model, []map[string]any{{"role": "user", "content": "long"}}, 4000, true)
	resp := post(t, context.Background(), urls[0]+"/v1/chat/completions", body)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel() // ctx done stops the cluster
	if err := c.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if !strings.Contains(string(rest), `"error"`) {
		t.Errorf("stream cut by the stop ended without an error event: %q", rest)
	}
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "the cluster's goroutines to exit", func() bool {
		return runtime.NumGoroutine() <= before
	})
	if resp, err := http.Get(urls[0] + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("server still answers after stop")
	}
}

// BenchmarkChatStream measures one streamed chat request of 64 tokens end to end over
// loopback HTTP, with the clock fast enough that the simulated step times vanish.
func BenchmarkChatStream(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Speed = 1e6
	srv, err := NewServer(cfg, 0)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer srv.Close()
	defer ts.Close()
	body, _ := json.Marshal(chatBody(srv.Model(), []map[string]any{{"role": "user", "content": words("b", 200)}}, 64, true))
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// TestSimulatedTimeIsExact: the driver steps the engine at the exact instants it asks
// for, however late the goroutine wakes, so a lone cold prompt's server-side TTFT is
// exactly the profile's chunked prefill time (three chunks here).
func TestSimulatedTimeIsExact(t *testing.T) {
	// Deterministic steps, so the TTFT is the model's exactly.
	srv, ts := newTestServer(t, func(c *Config) { c.Profile = "a4000-qwen3-4b-lockstep" })
	eng := srv.Engines()[0]
	m := decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions",
		map[string]any{"prompt": words("t", 5000), "max_tokens": 1}), 200)
	p := num(t, m, "usage", "prompt_tokens")
	cfg := eng.Config()
	if p <= 2*cfg.MaxNumBatchedTokens {
		t.Fatalf("prompt %d tokens does not need three chunks of %d", p, cfg.MaxNumBatchedTokens)
	}
	_, h, _ := eng.scrape()
	want := cfg.Profile.PrefillTime(p, cfg.MaxNumBatchedTokens).Seconds()
	if h.count != 1 || math.Abs(h.sum-want) > 1e-9 {
		t.Errorf("TTFT %v s over %d requests, want %v s", h.sum, h.count, want)
	}
}

// TestEngineSeedsFollowReplicaOrder: engine k of a cluster seeds its step-time
// stream with sim.EngineSeed(Seed, k), k = server x DP size + rank, as the
// virtual world seeds replica k.
func TestEngineSeedsFollowReplicaOrder(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Replicas, cfg.DataParallelSize, cfg.Seed, cfg.Speed = 1, 3, 42, testSpeed
	srv, err := NewServer(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for rank, e := range srv.Engines() {
		if got, want := e.Config().Seed, sim.EngineSeed(42, 3+rank); got != want {
			t.Errorf("server 1 rank %d: seed %#x, want EngineSeed(42, %d) = %#x", rank, got, 3+rank, want)
		}
	}
}

// With APIKey, /v1 paths need "Authorization: Bearer <key>" (401 otherwise, a
// wrong key too); /health, /metrics and /version stay open, as with vLLM's
// --api-key.
func TestAPIKeyGuardsV1Only(t *testing.T) {
	_, ts := newTestServer(t, func(c *Config) { c.APIKey = "k" })
	get := func(path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/v1/models", "", 401}, {"/v1/models", "Bearer nope", 401}, {"/v1/models", "Bearer k", 200},
		{"/health", "", 200}, {"/metrics", "", 200}, {"/version", "", 200},
	} {
		if got := get(tc.path, tc.auth); got != tc.want {
			t.Errorf("GET %s with %q: %d, want %d", tc.path, tc.auth, got, tc.want)
		}
	}
}
