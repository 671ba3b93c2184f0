package plan

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

func figure(f Fleet, name string) Figure {
	for _, g := range f.Figures {
		if g.Name == name {
			return g
		}
	}
	return Figure{}
}

// The simulator's HTTP front (the real server here) exports what vLLM does:
// cache_config_info per DP rank and max_model_len on /v1/models. The planner
// reads them, one replica per rank, and says where each came from.
func TestFleetFromServersSimulator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 1, DataParallelSize: 2, NumGPUBlocks: 3000, MaxModelLen: 20000})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := FleetFromServers(ctx, nil, cl.URLs(), nil, "a4000-qwen3-4b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Replicas != 2 || f.NumGPUBlocks != 3000 || f.BlockSize != 16 || f.MaxModelLen != 20000 || f.MaxNumSeqs != router.VLLMDefaultMaxNumSeqs {
		t.Fatalf("fleet %+v: want 2 replicas of 3000 blocks x 16, max_model_len 20000, max_num_seqs %d", f, router.VLLMDefaultMaxNumSeqs)
	}
	for name, src := range map[string]string{
		FigNumGPUBlocks: "vllm:cache_config_info", FigBlockSize: "vllm:cache_config_info",
		FigMaxModelLen: "/v1/models", FigMaxNumSeqs: "vLLM's default", FigReplicas: "DP ranks",
	} {
		if g := figure(f, name); !strings.Contains(g.Source, src) {
			t.Errorf("figure %s from %q, want a source naming %q", name, g.Source, src)
		}
	}
	kv, err := f.KVTokens()
	if err != nil || kv != 2999*16 {
		t.Errorf("KVTokens = %d, %v; want 2999 x 16", kv, err)
	}
	f2, err := FleetFromServers(ctx, nil, cl.URLs(), nil, "a4000-qwen3-4b", 48)
	if err != nil || f2.MaxNumSeqs != 48 || !strings.Contains(figure(f2, FigMaxNumSeqs).Source, "--max-num-seqs") {
		t.Errorf("with --max-num-seqs 48: %d from %q, %v", f2.MaxNumSeqs, figure(f2, FigMaxNumSeqs).Source, err)
	}
}

// replay serves recorded raw HTTP responses (curl -i) by path.
func replay(t *testing.T, files map[string]string) *httptest.Server {
	t.Helper()
	type rec struct {
		code   int
		header http.Header
		body   []byte
	}
	recs := map[string]rec{}
	for path, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("HTTP/")) { // a bare body
			recs[path] = rec{200, http.Header{}, b}
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Header.Del("Content-Length")
		recs[path] = rec{resp.StatusCode, resp.Header, body}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc, ok := recs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		for k, v := range rc.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rc.code)
		w.Write(rc.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Recorded servers without the figures: a vLLM 0.10.0 /metrics excerpt that
// has no cache_config_info, and a llama-server (no vLLM series at all). The
// planner refuses both and names what is missing.
func TestFleetFromServersRecordedWithoutFigures(t *testing.T) {
	dir := t.TempDir()
	// vLLM's /v1/models shape (vllm/entrypoints/openai/protocol.py ModelCard);
	// no recorded vLLM body is in the fixtures, and the test is about /metrics.
	models := dir + "/models.json"
	os.WriteFile(models, []byte(`{"object":"list","data":[{"id":"zai-org/GLM-4.5","object":"model","owned_by":"vllm","max_model_len":131072}]}`), 0o644)
	vllm := replay(t, map[string]string{"/metrics": "testdata/vllm-metrics-v1-0.10.0-engine0-excerpt.txt", "/v1/models": models})
	_, err := FleetFromServers(context.Background(), nil, []string{vllm.URL}, nil, "a4000-qwen3-4b", 0)
	if !errors.Is(err, ErrMissingFigures) || !strings.Contains(err.Error(), "num_gpu_blocks and block_size") || !strings.Contains(err.Error(), vllm.URL) {
		t.Errorf("vLLM without cache_config_info: %v; want ErrMissingFigures naming num_gpu_blocks, block_size and the server", err)
	}
	llama := replay(t, map[string]string{"/metrics": "testdata/llamacpp-metrics.txt", "/v1/models": "testdata/llamacpp-models.txt"})
	_, err = FleetFromServers(context.Background(), nil, []string{llama.URL}, nil, "a4000-qwen3-4b", 0)
	if !errors.Is(err, ErrMissingFigures) || !strings.Contains(err.Error(), "llamacpp") {
		t.Errorf("llama-server: %v; want ErrMissingFigures saying it is llamacpp, not vLLM", err)
	}
	if _, err := FleetFromServers(context.Background(), nil, []string{vllm.URL}, nil, "no-such-profile", 0); err == nil || !strings.Contains(err.Error(), "no-such-profile") {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestFleetFromProfile(t *testing.T) {
	if _, err := FleetFromProfile("h100-nope", 4, 0); err == nil || !strings.Contains(err.Error(), `"h100-nope"`) || !strings.Contains(err.Error(), "a4000-qwen3-4b") {
		t.Errorf("unknown profile: %v; want the name and the known ones", err)
	}
	f, err := FleetFromProfile("rtx5090-27b-fp8kv", 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := FleetFromProfile("rtx5090-27b", 7, 0)
	kf, _ := f.KVTokens()
	kb, _ := b.KVTokens()
	// fp8 halves the bytes per KV element: about twice the tokens (docs/simulator.md section 8).
	if r := float64(kf) / float64(kb); r < 1.9 || r > 2.1 {
		t.Errorf("fp8 / bf16 KV tokens = %d / %d = %.2f, want about 2", kf, kb, r)
	}
}
