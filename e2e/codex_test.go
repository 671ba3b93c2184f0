package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/sim/simhttp"
)

// codexPackage is the npm package of the OpenAI Codex CLI.
const codexPackage = "@openai/codex"

// codexModel is the served model name the simulator answers to.
const codexModel = "warden-sim-model"

// codex is the Codex CLI as the e2e tests install and find it.
var codex = npmCLI{what: "Codex CLI", pkg: codexPackage, bin: "codex", envVar: "WARDEN_CODEX", dir: "codex",
	env: func(home string) []string { return []string{"CODEX_HOME=" + home} }}

// codexCLI returns a working Codex binary (npmCLI.find).
func codexCLI(t *testing.T) (bin, version string) { return codex.find(t) }

// codexHome makes a CODEX_HOME whose config.toml points a custom Responses
// provider at baseURL (docs/router.md "Pointing clients at it").
func codexHome(t *testing.T, baseURL string) string {
	t.Helper()
	home := t.TempDir()
	cfg := fmt.Sprintf(`model = %q
model_provider = "warden"
[model_providers.warden]
name = "warden"
base_url = "%s/v1"
env_key = "WARDEN_CODEX_KEY"
wire_api = "responses"
`, codexModel, baseURL)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// runCodex runs the CLI once in dir with CODEX_HOME=home, bounded to 120 s, and
// returns what it printed on stdout.
func runCodex(t *testing.T, bin, home, dir string, args ...string) string {
	t.Helper()
	// A minimal environment: nothing of the caller's (no real API keys or Codex
	// settings) reaches the CLI.
	return runCLI(t, "codex", bin, dir, 120*time.Second, []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"CODEX_HOME=" + home,
		"TERM=dumb",
		"WARDEN_CODEX_KEY=any",
	}, args...)
}

// replicaCounters reads each simulated replica's own /metrics: finished
// requests and prefix-cache hit tokens.
func replicaCounters(t *testing.T, f *fleet) (finished, hits []float64) {
	t.Helper()
	for _, u := range f.sim.URLs() {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		snap, err := scrape.Parse(resp.Body)
		resp.Body.Close()
		if err != nil || len(snap.Engines) == 0 {
			t.Fatalf("scraping %s: %v", u, err)
		}
		e := snap.Engines[0]
		finished = append(finished, e.RequestsFinished)
		hits = append(hits, e.PrefixHits)
	}
	return finished, hits
}

// TestCodexThroughRouter runs the real Codex CLI (a custom provider with
// wire_api = "responses") through the router to two simulated replicas: two
// turns of one conversation (`codex exec`, then `codex exec resume --last`)
// must land on one replica and the second must read the first's prefix from
// that replica's cache; a second conversation (another CODEX_HOME) must be
// placed by load, on the other replica. Judged from the replicas' own counters
// (vllm:request_success_total, vllm:prefix_cache_hits_total).
func TestCodexThroughRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Codex CLI test in -short mode")
	}
	bin, version := codexCLI(t)
	t.Logf("Codex %s at %s", version, bin)
	f := startFleet(t, simhttp.Config{Replicas: 2, Speed: 20, Model: codexModel}, 32)
	f.waitScraped(t)

	home1, work1 := codexHome(t, f.url), t.TempDir()
	out1 := runCodex(t, bin, home1, work1, "exec", "--skip-git-repo-check", "say hi")
	fin1, _ := replicaCounters(t, f)
	out2 := runCodex(t, bin, home1, work1, "exec", "--skip-git-repo-check", "resume", "--last", "again")
	fin2, hits2 := replicaCounters(t, f)
	home2, work2 := codexHome(t, f.url), t.TempDir()
	out3 := runCodex(t, bin, home2, work2, "exec", "--skip-git-repo-check", "say hi")
	fin3, _ := replicaCounters(t, f)
	for i, out := range []string{out1, out2, out3} {
		if strings.TrimSpace(out) == "" {
			t.Errorf("run %d printed nothing", i+1)
		}
	}
	for i, r := range f.log.all() {
		t.Logf("request %d: %s", i+1, r)
	}
	t.Logf("finished requests per replica: after turn 1 %v, turn 2 %v, conversation 2 %v; prefix hits after turn 2 %v", fin1, fin2, fin3, hits2)

	// Conversation A: every request of both turns on one replica.
	a := -1
	for i, n := range fin1 {
		if n > 0 {
			if a >= 0 {
				t.Fatalf("turn 1 was served by replicas %d and %d: %v", a, i, fin1)
			}
			a = i
		}
	}
	if a < 0 {
		t.Fatalf("no replica counted turn 1: %v", fin1)
	}
	other := 1 - a
	if fin2[a] <= fin1[a] || fin2[other] != fin1[other] {
		t.Errorf("turn 2 (resume): replica %d went %v -> %v, replica %d %v -> %v; want every request on %d", a, fin1[a], fin2[a], other, fin1[other], fin2[other], a)
	}
	if hits2[a] <= 0 {
		t.Errorf("replica %d read nothing from its prefix cache in turn 2 (hits %v)", a, hits2)
	}
	// Conversation B: placed by load on the replica A does not occupy.
	if fin3[other] <= fin2[other] || fin3[a] != fin2[a] {
		t.Errorf("conversation 2: replica %d went %v -> %v, replica %d %v -> %v; want it placed on %d", other, fin2[other], fin3[other], a, fin2[a], fin3[a], other)
	}
	// The router saw one session per conversation: Codex's session-id, the same
	// across the resume, a new one for the new CODEX_HOME.
	reqs := f.log.all()
	if len(reqs) < 3 || reqs[0].Session == "" || reqs[len(reqs)-1].Session == reqs[0].Session {
		t.Errorf("sessions seen: %v", reqs)
	}
	if st := f.rt.Status().Models[0]; st.Sessions != 2 {
		t.Errorf("router has %d sessions, want 2", st.Sessions)
	}
}
