package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// agreementSpeed is the HTTP world's speed in the agreement test. Each request costs
// the HTTP world a few milliseconds of wall time (client, router proxy, JSON and
// tokenizer in the simulated server, SSE back), which the scaled clock turns into
// speed x that much simulated time before the first token: about 4 ms x 4 = 16 ms,
// 6-7% of the ~0.25 s median TTFB compared here, on a loaded 2-core machine (it was
// 10-16% at speed 10, and once 17% at speed 4 under a load average of 5). Speed 2
// halves that share again at the cost of about a minute of wall time.
const agreementSpeed = 2

// agreementScenario is the reference workload (prompt sizes, turns, output length)
// cut to two one-minute stages of 4 and 8 sessions, affinity on, with a 1 s client
// gap between turns. Affinity off is left out: its shortest-queue choices depend on
// the instant each turn arrives relative to the balancer's 100 ms load snapshots, so
// one choice made differently (a millisecond of HTTP time) sends the two worlds'
// conversations down different replicas, and over a minute's 25-50 turns the hit
// rates then differ by up to ~10 points by chance (docs/simulator.md).
func agreementScenario() *loadgen.Scenario {
	return &loadgen.Scenario{
		Name:          "agreement",
		Seed:          3,
		Stages:        []int{4, 8},
		StageDuration: time.Minute,
		Variants:      []string{"on"},
		// A client gap of its own, so neither world depends on how long the HTTP
		// client takes to send the next turn, and the virtual world does not start
		// every turn exactly on a step boundary (zero think time does: its TTFB is
		// then up to one decode step lower; docs/simulator.md).
		ThinkTime: time.Second,
	}
}

// runWorld runs the scenario in one world and summarises it. The results directory
// is a temporary one, or <WARDEN_AGREEMENT_DIR>/{virtual,http} when that variable is
// set (to compare the worlds turn by turn after a failure).
func runWorld(t *testing.T, virtual bool) []report.Summary {
	t.Helper()
	return runWorldWith(t, virtual, agreementScenario(), agreementSpeed)
}

// runWorldWith runs sc in one world at speed (HTTP world) and summarises it.
func runWorldWith(t *testing.T, virtual bool, sc *loadgen.Scenario, speed float64) []report.Summary {
	t.Helper()
	name := "http"
	if virtual {
		name = "virtual"
	}
	dir := filepath.Join(t.TempDir(), name)
	if d := os.Getenv("WARDEN_AGREEMENT_DIR"); d != "" {
		dir = filepath.Join(d, name)
	}
	start := time.Now()
	_, err := Run(context.Background(), Options{
		Scenario: sc,
		Virtual:  virtual,
		Speed:    speed,
		OutDir:   dir,
		RunID:    "agreement-" + name,
	})
	if err != nil {
		t.Fatalf("%s world: %v", name, err)
	}
	run, err := report.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := report.Summarize(run)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s world: %.1f s wall", name, time.Since(start).Seconds())
	return sums
}

// TestVirtualAgreesWithHTTP runs one short scenario with one seed in the virtual-time
// world and in the HTTP world (simulated cluster and router on loopback), and checks
// that per stage the prefix-cache hit rate agrees within 3 points and the median TTFB
// within 15%. The virtual world has no network or client time and the HTTP world has
// goroutine scheduling jitter (docs/simulator.md, "Virtual and HTTP worlds"); beyond
// that they run the same engine, policy and sessions.
func TestVirtualAgreesWithHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs the HTTP world for about a minute of wall time")
	}
	compareWorlds(t, runWorld(t, true), runWorld(t, false), 2)
}

// compareWorlds checks per stage that the virtual (v) and HTTP (h) summaries
// agree: prefix hits within 3 points, TTFB p50 within 15 %.
func compareWorlds(t *testing.T, v, h []report.Summary, stages int) {
	t.Helper()
	if len(v) != len(h) || len(v) != stages {
		t.Fatalf("%d virtual and %d HTTP stage summaries, want %d each", len(v), len(h), stages)
	}
	for i := range v {
		a, b := v[i], h[i]
		t.Run(a.Variant+"/"+strconv.Itoa(a.Sessions), func(t *testing.T) {
			t.Logf("virtual: turns %d, hits %.1f%%, TTFB p50 %.3f s p95 %.3f s, out tok/min %.0f; HTTP: turns %d, hits %.1f%%, TTFB p50 %.3f s p95 %.3f s, out tok/min %.0f",
				a.TurnsOK, a.PrefixHitsPct, a.TTFBP50S, a.TTFBP95S, a.OutputTokensPerMin,
				b.TurnsOK, b.PrefixHitsPct, b.TTFBP50S, b.TTFBP95S, b.OutputTokensPerMin)
			if a.Variant != b.Variant || a.Sessions != b.Sessions {
				t.Fatalf("stage mismatch: %s/%d vs %s/%d", a.Variant, a.Sessions, b.Variant, b.Sessions)
			}
			if a.TurnsOK == 0 || b.TurnsOK == 0 || a.TurnsFailed+b.TurnsFailed > 0 {
				t.Fatalf("turns ok %d/%d, failed %d/%d", a.TurnsOK, b.TurnsOK, a.TurnsFailed, b.TurnsFailed)
			}
			if d := math.Abs(a.PrefixHitsPct - b.PrefixHitsPct); !(d <= 3) {
				t.Errorf("prefix hits: virtual %.1f%%, HTTP %.1f%% (%.1f points apart, want <= 3)", a.PrefixHitsPct, b.PrefixHitsPct, d)
			}
			if r := math.Abs(a.TTFBP50S-b.TTFBP50S) / b.TTFBP50S; !(r <= 0.15) {
				t.Errorf("TTFB p50: virtual %.3f s, HTTP %.3f s (%.0f%% apart, want <= 15%%)", a.TTFBP50S, b.TTFBP50S, 100*r)
			}
		})
	}
}

// longOffEnv enables TestVirtualAgreesWithHTTPOffLongStages (make agreement-off).
const longOffEnv = "WARDEN_AGREEMENT_OFF"

// TestVirtualAgreesWithHTTPOffLongStages checks the "off" variant (vLLM's
// shortest-queue balancer), which the short test leaves out: on the reference
// workload (think time 0) at 4, 8 and 16 sessions with 12-minute stages, long
// enough (~300-700 turns a stage) that which replica each turn happened to hit
// averages out, the worlds must agree within the same 3 points and 15 %. About 6
// minutes of wall time at speed 6, so it runs only with WARDEN_AGREEMENT_OFF=1
// (make agreement-off). Measured on 2026-11-29: docs/simulator.md.
func TestVirtualAgreesWithHTTPOffLongStages(t *testing.T) {
	if os.Getenv(longOffEnv) == "" {
		t.Skip("set " + longOffEnv + "=1 to run (about 6 minutes of wall time)")
	}
	sc := loadgen.DefaultScenario() // the reference workload (scenarios/claude-code-reference.yaml)
	sc.Name = "agreement-off"
	sc.Variants = []string{"off"}
	sc.Stages = []int{4, 8, 16}
	sc.StageDuration = 12 * time.Minute
	compareWorlds(t, runWorldWith(t, true, sc, 6), runWorldWith(t, false, sc, 6), 3)
}
