package bench

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// Every test in this package calls t.Parallel: each starts its own servers on
// free loopback ports and writes into its own t.TempDir, and most of them wait on
// wall time (HTTP worlds), so `make unit` runs them with -parallel 4.

// startStubs starts n enginestub servers of cfg and returns their URLs.
func startStubs(t *testing.T, n int, cfg enginestub.Config) []string {
	t.Helper()
	var urls []string
	for range n {
		h, err := enginestub.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return urls
}

// stubStage is the stage length of the stand-in benches (wall time; 20 s before
// the tests ran in parallel, see runStubBenchWith for why 10 s checks the same).
const stubStage = 10 * time.Second

// runStubBench runs warden bench --replicas (engine auto) against urls and
// returns the results directory, its manifest and the variant's summary.
func runStubBench(t *testing.T, urls []string, name string, sessions int) (string, loadgen.Manifest, report.Summary) {
	t.Helper()
	return runStubBenchWith(t, urls, name, sessions, "on", nil)
}

// runStubBenchWith is runStubBench with one variant of that name ("off" or
// "on") and Options edited by opt (nil: none), e.g. an external router.
//
// The stage is stubStage of wall time (the stand-ins run at real speed). What
// the callers check does not grow with the stage: 4 sessions of 6 turns with
// 0.2-0.5 s between turns and 16 tokens at 5 ms each finish about 95 turns in
// 10 s (seen: 95-97), so every session still reaches its cached later turns
// (usage and engine hit %), about ten 1 s scrapes fall inside the window
// (replicas busy), and stayed % is 100 by construction with affinity on (4
// sessions on 4 x 4 slots) and far below it with affinity off (24 % seen).
func runStubBenchWith(t *testing.T, urls []string, name string, sessions int, variant string, opt func(*Options)) (string, loadgen.Manifest, report.Summary) {
	t.Helper()
	sc := loadgen.DefaultScenario()
	sc.Name, sc.Model = "stub-bench", enginestub.DefaultModel
	sc.Stages, sc.StageDuration, sc.Variants = []int{sessions}, stubStage, []string{variant}
	sc.Turns, sc.FirstTurnTokens, sc.TurnTokens, sc.MaxOutputTokens, sc.SystemPromptTokens = 6, 300, 100, 16, 200
	sc.ThinkTime, sc.ThinkSpread.Min, sc.ThinkSpread.Max = 300*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
	dir := filepath.Join(t.TempDir(), name)
	var progress strings.Builder
	o := Options{Scenario: sc, Replicas: urls, OutDir: dir, RunID: name, Progress: &progress}
	if opt != nil {
		opt(&o)
	}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m loadgen.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.csv", "summary.md", "series.csv", "turns.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("results directory lacks %s: %v", f, err)
		}
	}
	if pngs, _ := filepath.Glob(filepath.Join(dir, "*.png")); len(pngs) == 0 {
		t.Errorf("no PNG figures in %s", dir)
	}
	sums, err := report.SummarizeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m, sums[0]
}

// TestBenchLlamaCppOnly: warden bench --replicas against four servers that
// replay only llama.cpp's recorded formats (4 slots each, --metrics) runs, the
// manifest records engine llamacpp for every replica and no column from a vLLM
// series, usage cached % comes from the responses, replicas busy from
// llamacpp:requests_processing, the engine hit % is n/a (no counter) and the
// hit-rate figures are drawn from usage, and with 4 sessions on 4 x 4 slots
// affinity keeps every turn home (slot threshold 3).
func TestBenchLlamaCppOnly(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world for one stubStage")
	}
	urls := startStubs(t, 4, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, TokenDelay: 5 * time.Millisecond})
	dir, m, s := runStubBench(t, urls, "llamacpp-only", 4)
	if len(m.Engines) != 4 {
		t.Fatalf("manifest engines %+v, want 4 llamacpp replicas", m.Engines)
	}
	for _, e := range m.Engines {
		if e.Kind != string(engines.KindLlamaCpp) || !strings.HasPrefix(e.ResetPrefixCache, "none") {
			t.Errorf("replica %s: kind %q reset %q, want llamacpp, none", e.Replica, e.Kind, e.ResetPrefixCache)
		}
		for _, c := range e.Columns {
			if strings.Contains(c.Source, "vllm:") {
				t.Errorf("replica %s column %s from a vLLM series %q", e.Replica, c.Column, c.Source)
			}
			if c.Source == "" && c.Missing == "" {
				t.Errorf("replica %s column %s: neither source nor reason", e.Replica, c.Column)
			}
		}
	}
	t.Logf("%s: turns %d, usage cached %.1f %%, engine hits %.1f %%, replicas busy %.2f, stayed %.1f %% (moved %d)", dir, s.TurnsOK, s.UsageCachedPct, s.PrefixHitsPct, s.ReplicasBusy, s.StayedPct, s.MovedTurns)
	if s.TurnsOK == 0 || math.IsNaN(s.UsageCachedPct) || s.UsageCachedPct <= 0 {
		t.Errorf("turns %d, usage cached %v: want turns and a cache hit share from the responses", s.TurnsOK, s.UsageCachedPct)
	}
	if !math.IsNaN(s.PrefixHitsPct) {
		t.Errorf("engine hit %% %v from llama.cpp, which has no hit counter: want n/a", s.PrefixHitsPct)
	}
	if math.IsNaN(s.ReplicasBusy) || s.ReplicasBusy <= 0 {
		t.Errorf("replicas busy %v, want it from llamacpp:requests_processing", s.ReplicasBusy)
	}
	if s.StayedPct != 100 || s.MovedTurns != 0 {
		t.Errorf("stayed %.1f %%, %d turns moved; want 100 %%, 0 with 4 sessions on 4 x 4 slots", s.StayedPct, s.MovedTurns)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "summary.md"))
	if !strings.Contains(string(md), "no prefix-cache reset endpoint") {
		t.Errorf("summary.md does not say llama.cpp has no reset (warm second variant)")
	}
	// No hit counter: the hit-rate figures come from the responses' usage
	// (they were empty axes).
	for _, f := range []string{"prefix_hits.png", "replica_hits.png"} {
		if want := f + ": drawn from the responses' usage"; !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q", want)
		}
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestBenchSGLangOnly: the same against SGLang's source-built formats: the
// engine's own hit % from sglang:cached_tokens_total / prompt_tokens_total,
// replicas busy from sglang:num_running_reqs, usage cached % from the
// responses (--enable-cache-report), resets by POST /flush_cache.
func TestBenchSGLangOnly(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world for one stubStage")
	}
	urls := startStubs(t, 2, enginestub.Config{Kind: engines.KindSGLang, Metrics: true, Slots: 8, CacheReport: true, TokenDelay: 5 * time.Millisecond})
	dir, m, s := runStubBench(t, urls, "sglang-only", 4)
	if len(m.Engines) != 2 {
		t.Fatalf("manifest engines %+v, want 2 sglang replicas", m.Engines)
	}
	for _, e := range m.Engines {
		if e.Kind != string(engines.KindSGLang) || e.ResetPrefixCache != "POST /flush_cache" {
			t.Errorf("replica %s: kind %q reset %q, want sglang, POST /flush_cache", e.Replica, e.Kind, e.ResetPrefixCache)
		}
		for _, c := range e.Columns {
			if strings.Contains(c.Source, "vllm:") {
				t.Errorf("replica %s column %s from a vLLM series %q", e.Replica, c.Column, c.Source)
			}
		}
	}
	t.Logf("%s: notes %v; turns %d, usage cached %.1f %%, engine hits %.1f %%, replicas busy %.2f", dir, s.Notes, s.TurnsOK, s.UsageCachedPct, s.PrefixHitsPct, s.ReplicasBusy)
	if s.TurnsOK == 0 || math.IsNaN(s.UsageCachedPct) || math.IsNaN(s.PrefixHitsPct) || s.PrefixHitsPct <= 0 || math.IsNaN(s.ReplicasBusy) {
		t.Errorf("turns %d, usage cached %v, engine hits %v, busy %v: want all from SGLang", s.TurnsOK, s.UsageCachedPct, s.PrefixHitsPct, s.ReplicasBusy)
	}
}
