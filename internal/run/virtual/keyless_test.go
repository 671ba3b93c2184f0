package virtual

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

var keylessMeasure = flag.Bool("keyless", false, "run TestKeylessMeasurement: keyless prefix vs shortest-queue vs one shared cache, 4 and 8 replicas, 3 seeds (docs/routing.md \"Keyless placement\")")

// keylessRun is one virtual run of the keyless reference workload: the reference
// conversations (loadgen.DefaultScenario: a 3,500-token system prompt shared by
// all, a unique first message, six turns) sent with no session key, one stage of
// sessions on replicas, variant "on" with the given keyless placement.
type keylessRun struct {
	sum report.Summary
	// boundPct: the prefix-cache hit % one LRU cache of the fleet's total KV size
	// would have had on the same requests in the same order (router.PrefixIndex
	// with one replica over the prompts' KV-block hashes).
	boundPct float64
}

func runKeyless(t *testing.T, keyless string, replicas, sessions int, seed uint64) keylessRun {
	return runKeylessShape(t, keyless, replicas, sessions, seed, 0, 0)
}

// runKeylessShape is runKeyless with the system prompt and first user message of
// the given sizes in tokens (0: the reference's 3,500 and 6,000).
func runKeylessShape(t *testing.T, keyless string, replicas, sessions int, seed uint64, systemTokens, firstTokens int) keylessRun {
	t.Helper()
	sc := loadgen.DefaultScenario()
	sc.Name, sc.Seed = "keyless-reference", seed
	if systemTokens > 0 {
		sc.SystemPromptTokens = systemTokens
	}
	if firstTokens > 0 {
		sc.FirstTurnTokens = firstTokens
	}
	sc.SessionHeader = loadgen.SessionHeaderNone
	sc.Stages, sc.Variants = []int{sessions}, []string{"on"}
	sc = sc.WithDefaults()
	p := sim.ProfileA4000Qwen3_4B
	blocks := p.NumGPUBlocks(sim.DefaultBlockSize)
	total := int64(replicas) * int64(blocks-1) * sim.DefaultBlockSize
	shared := router.NewPrefixIndex(1, sim.DefaultBlockSize)
	var hit, queried int64
	dir := t.TempDir()
	out, err := loadgen.CreateResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Config{
		Scenario: sc, Replicas: replicas, Engine: sim.EngineConfig{Profile: p}, Out: out, RunID: "keyless",
		Balancer: router.BalancerConfig{Keyless: keyless, OnDecision: func(e router.DecisionEvent) {
			n := shared.Match(0, e.Facts.Prefix) * sim.DefaultBlockSize
			hit += int64(min(n, e.Facts.PromptTokens))
			queried += int64(e.Facts.PromptTokens)
			shared.Record(0, e.Facts.Prefix, total)
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sums, err := report.SummarizeDir(dir)
	if err != nil || len(sums) != 1 {
		t.Fatalf("summaries %v: %v", sums, err)
	}
	return keylessRun{sum: sums[0], boundPct: 100 * float64(hit) / float64(max(queried, 1))}
}

// Keyless prefix placement recovers most of what a session key gives: on the
// keyless reference at 8 sessions on 4 replicas (the fleet's KV cache holds the
// working set) it reads far more of the prompts from the prefix cache than
// shortest-queue, and every request it routes carries the prefix hashes.
func TestKeylessPrefixBeatsShortestQueue(t *testing.T) {
	sq := runKeyless(t, router.KeylessShortestQueue, 4, 8, 1)
	px := runKeyless(t, router.KeylessPrefix, 4, 8, 1)
	t.Logf("prefix hits %%: shortest-queue %.1f, prefix %.1f, shared-cache bound %.1f / %.1f", sq.sum.PrefixHitsPct, px.sum.PrefixHitsPct, sq.boundPct, px.boundPct)
	if px.sum.TurnsOK == 0 || sq.sum.TurnsOK == 0 {
		t.Fatalf("no turns: %d %d", sq.sum.TurnsOK, px.sum.TurnsOK)
	}
	if px.sum.PrefixHitsPct < 1.5*sq.sum.PrefixHitsPct {
		t.Errorf("prefix hits %.1f %% < 1.5x shortest-queue's %.1f %%", px.sum.PrefixHitsPct, sq.sum.PrefixHitsPct)
	}
	if px.boundPct <= 0 {
		t.Errorf("shared-cache bound %.1f %%: the decisions carried no prefix hashes", px.boundPct)
	}
}

// TestKeylessMeasurement is the table in docs/routing.md "Keyless placement": the
// keyless reference at 4 and 8 replicas (2 and 4 sessions per replica), keyless
// shortest-queue vs prefix vs the shared-cache bound, 3 seeds; per cell the mean
// and the half range over the seeds. It takes about a minute, so it runs only with
// -args -keyless:
//
//	go test ./internal/run/virtual -run TestKeylessMeasurement -v -args -keyless
func TestKeylessMeasurement(t *testing.T) {
	if !*keylessMeasure {
		t.Skip("run with -args -keyless")
	}
	// The reference, then the shared-prompt shape a user reported (a ~5 KB,
	// 1,250-token system prompt and a short, 50-token first message: the prompt is
	// over half of a first request).
	for _, shape := range [][2]int{{0, 0}, {1250, 50}} {
		t.Log(keylessTable(t, shape[0], shape[1]))
	}
}

func keylessTable(t *testing.T, systemTokens, firstTokens int) string {
	seeds := []uint64{1, 2, 3}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nsystem prompt %d tokens, first message %d tokens (0: the reference's)\n", systemTokens, firstTokens)
	sb.WriteString("| replicas | sessions | keyless | prefix hits % | shared-cache bound % | hits / bound | TTFB p50 (s) | TTFB p95 (s) | out tok/min |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, replicas := range []int{4, 8} {
		for _, perReplica := range []int{2, 4} {
			sessions := replicas * perReplica
			for _, k := range []string{router.KeylessShortestQueue, router.KeylessPrefix} {
				var hits, bound, ratio, p50, p95, tok []float64
				for _, seed := range seeds {
					r := runKeylessShape(t, k, replicas, sessions, seed, systemTokens, firstTokens)
					if r.sum.TurnsOK == 0 {
						t.Fatalf("%d replicas, %d sessions, %s, seed %d: no turns", replicas, sessions, k, seed)
					}
					hits = append(hits, r.sum.PrefixHitsPct)
					bound = append(bound, r.boundPct)
					ratio = append(ratio, r.sum.PrefixHitsPct/r.boundPct)
					p50 = append(p50, r.sum.TTFBP50S)
					p95 = append(p95, r.sum.TTFBP95S)
					tok = append(tok, r.sum.OutputTokensPerMin)
				}
				fmt.Fprintf(&sb, "| %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", replicas, sessions, k,
					meanRange(hits, "%.1f"), meanRange(bound, "%.1f"), meanRange(ratio, "%.2f"),
					meanRange(p50, "%.2f"), meanRange(p95, "%.2f"), meanRange(tok, "%.0f"))
			}
		}
	}
	return sb.String()
}

// meanRange formats the mean of xs and half its range ("12.3 ± 0.4").
func meanRange(xs []float64, f string) string {
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, x := range xs {
		lo, hi, sum = min(lo, x), max(hi, x), sum+x
	}
	return fmt.Sprintf(f+" ± "+f, sum/float64(len(xs)), (hi-lo)/2)
}
