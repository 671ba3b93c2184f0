package bench

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router/routerhttp"
)

// TestBenchRouterWithoutReplicas: warden bench --router URL --admin-url URL
// without --replicas, against an in-process router in front of four 4-slot
// llama.cpp stand-ins, runs; the engine columns are n/a with the reason noted
// in the manifest and summary.md, stayed % still comes from the router's
// X-Warden-Replica header (100 % with affinity on), usage cached % from the
// responses.
func TestBenchRouterWithoutReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world for one stubStage")
	}
	urls := startStubs(t, 4, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, TokenDelay: 5 * time.Millisecond})
	cfg, err := routerhttp.ConfigForURLs(urls, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdminToken = "tok"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range cfg.Models {
		cfg.Models[i].MaxNumSeqs = 4
		for j := range cfg.Models[i].Replicas {
			cfg.Models[i].Replicas[j].Engine = string(engines.KindLlamaCpp)
		}
	}
	rt, err := routerhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go rt.Run(ctx)
	api, admin := httptest.NewServer(rt.Handler()), httptest.NewServer(rt.AdminHandler())
	t.Cleanup(api.Close)
	t.Cleanup(admin.Close)

	dir, m, s := runStubBenchWith(t, nil, "router-only", 4, "on", func(o *Options) {
		o.Replicas, o.RouterURL, o.AdminURL, o.AdminToken = nil, api.URL, admin.URL, "tok"
	})
	t.Logf("%s: turns %d, stayed %.1f %% (moved %d), usage cached %.1f %%, replicas busy %v, prefix hits %v", dir, s.TurnsOK, s.StayedPct, s.MovedTurns, s.UsageCachedPct, s.ReplicasBusy, s.PrefixHitsPct)
	if !slices.Contains(m.Notes, NoReplicasNote) {
		t.Errorf("manifest notes %q lack %q", m.Notes, NoReplicasNote)
	}
	if s.TurnsOK == 0 || s.StayedPct != 100 || math.IsNaN(s.UsageCachedPct) {
		t.Errorf("turns %d, stayed %v %%, usage cached %v: want turns, 100 %% stayed from X-Warden-Replica, usage from the responses", s.TurnsOK, s.StayedPct, s.UsageCachedPct)
	}
	if !math.IsNaN(s.ReplicasBusy) || !math.IsNaN(s.PrefixHitsPct) {
		t.Errorf("replicas busy %v, prefix hits %v without any scrape: want n/a", s.ReplicasBusy, s.PrefixHitsPct)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "summary.md"))
	if !strings.Contains(string(md), "no --replicas given: the harness cannot scrape the engines behind the router") {
		t.Errorf("summary.md does not say why the engine columns are n/a:\n%s", md)
	}
}

// TestBenchRefusesDPRanksOnOtherEngines: --dp-ranks against a server detected
// as llama.cpp stops at the pre-flight, before any stage: its /metrics would
// be read as vLLM ranks it does not have.
func TestBenchRefusesDPRanksOnOtherEngines(t *testing.T) {
	t.Parallel()
	urls := startStubs(t, 1, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, ContextLen: 32768})
	sc := loadgen.DefaultScenario()
	sc.Model, sc.Stages, sc.Variants = enginestub.DefaultModel, []int{1}, []string{"on"}
	_, err := Run(context.Background(), Options{Scenario: sc, Replicas: urls, DPRanks: 2, OutDir: filepath.Join(t.TempDir(), "r")})
	if err == nil || !strings.Contains(err.Error(), "is llamacpp") || !strings.Contains(err.Error(), "DP ranks (--dp-ranks, dp_ranks=) are vLLM's only") {
		t.Fatalf("error %v, want a refusal naming llamacpp and DP ranks", err)
	}
}
