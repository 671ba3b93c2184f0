package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
)

// TestBenchServersWithoutMetrics: warden bench --replicas against a
// llama-server without --metrics (GET /metrics 501) and an SGLang server
// without --enable-metrics (404) runs, exits 0, writes results.csv, summary.md
// and the PNG figures, and says in summary.md and on stderr which columns are
// missing and why.
func TestBenchServersWithoutMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs the HTTP world for 10 s")
	}
	var urls []string
	for _, k := range []engines.Kind{engines.KindLlamaCpp, engines.KindSGLang} {
		h, err := enginestub.New(enginestub.Config{Kind: k, Slots: 4})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	dir := filepath.Join(t.TempDir(), "run")
	out, err := run(t, "bench", "--scenario", "../../scenarios/smoke.yaml", "--replicas", strings.Join(urls, ","),
		"--variants", "on", "--stages", "2", "--stage-duration", "10s", "--out", dir)
	if err != nil {
		t.Fatalf("bench: %v (want exit 0)\n%s", err, out)
	}
	for _, f := range []string{"results.csv", "summary.md", "series.csv", "turns.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}
	if pngs, _ := filepath.Glob(filepath.Join(dir, "*.png")); len(pngs) == 0 {
		t.Errorf("no PNG figures")
	}
	md, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- missing: replicas busy, prefix hits % n/a (series running, waiting, kv_usage, prefix_queries, prefix_hits, prompt_tokens, generation_tokens, preemptions, prompt_computed_tokens) on r0: metrics off: GET /metrics answered 501 (llama-server needs --metrics)",
		"on r1: metrics off: GET /metrics answered 404 (sglang.launch_server needs --enable-metrics)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
		if !strings.Contains(out, strings.TrimPrefix(want, "- ")) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
}
