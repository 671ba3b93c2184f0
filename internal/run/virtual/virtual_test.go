package virtual

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

func smokeScenario(t *testing.T) *loadgen.Scenario {
	t.Helper()
	sc, err := loadgen.LoadScenario("../../../scenarios/smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func runOnce(t *testing.T, sc *loadgen.Scenario, dir string) *loadgen.Manifest {
	t.Helper()
	prof, err := sim.LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	out, err := loadgen.CreateResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Run(context.Background(), Config{
		Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: prof}, Out: out, RunID: "test",
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return m
}

// Two runs with the same seed must write identical turn records and series.
func TestSameSeedSameResults(t *testing.T) {
	sc := smokeScenario(t)
	a, b := t.TempDir(), t.TempDir()
	runOnce(t, sc, a)
	runOnce(t, sc, b)
	for _, f := range []string{loadgen.TurnsFile, loadgen.SeriesFile} {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, f))
		if err != nil {
			t.Fatal(err)
		}
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs of one seed (%d vs %d bytes)", f, len(x), len(y))
		}
	}
}

// The run keeps the closed loop's accounting, turns succeed, later turns of a session
// hit the prefix cache, and with affinity on every later turn stays on its replica.
func TestVirtualRunShape(t *testing.T) {
	sc := smokeScenario(t)
	dir := t.TempDir()
	m := runOnce(t, sc, dir)
	if len(m.Variants) != 2 || !m.Variants[0].Complete || !m.Variants[1].Complete {
		t.Fatalf("variants = %+v", m.Variants)
	}
	_, results, series, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) == 0 {
		t.Fatal("no series samples")
	}
	home := map[string]string{}
	var ok, later, stayed, cachedLater int
	for _, r := range results {
		if !r.OK() {
			t.Errorf("turn failed: %+v", r)
			continue
		}
		ok++
		if r.TTFB() <= 0 || r.Done < r.FirstToken {
			t.Errorf("bad times: %+v", r)
		}
		if r.OutputTokens != sc.WithDefaults().MaxOutputTokens {
			t.Errorf("output tokens = %d", r.OutputTokens)
		}
		k := r.Variant + "/" + r.SessionKey
		if r.Turn == 0 {
			home[k] = r.Replica
			continue
		}
		if r.Variant == "on" {
			later++
			if r.Replica == home[k] {
				stayed++
			}
			if r.CachedTokens > r.PromptTokens/2 {
				cachedLater++
			}
		}
	}
	if ok < 20 {
		t.Fatalf("only %d turns succeeded", ok)
	}
	if later == 0 || stayed != later {
		t.Errorf("affinity on: %d of %d later turns stayed on their replica", stayed, later)
	}
	if cachedLater != later {
		t.Errorf("affinity on: %d of %d later turns had more than half their prompt cached", cachedLater, later)
	}
}

// A turn still in flight at its request_timeout fails as the HTTP client's would: it
// is aborted on its engine, recorded with a timeout error, and its session is
// replaced; turns that finish in time are unaffected.
func TestRequestTimeout(t *testing.T) {
	sc := smokeScenario(t)
	// Cold first turns of 500 to 8000 words take about 0.2 to 3.5 s to prefill.
	sc.FirstTurnTokens = 4000
	sc.FirstTurnSpread = loadgen.TokenRange{Min: 500, Max: 8000}
	sc.RequestTimeout = 2 * time.Second
	dir := t.TempDir()
	m := runOnce(t, sc, dir)
	_, results, _, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	timedOut, ok := 0, 0
	for _, r := range results {
		switch {
		case r.OK():
			ok++
		case strings.HasPrefix(r.Err, "timeout:"):
			timedOut++
			if r.Done-r.Sent != sc.RequestTimeout {
				t.Errorf("timed-out turn: %+v", r)
			}
		case !r.OK():
			t.Errorf("turn failed otherwise: %+v", r)
		}
	}
	if timedOut == 0 || ok == 0 {
		t.Fatalf("%d turns timed out and %d succeeded; want some of each", timedOut, ok)
	}
	for _, v := range m.Variants {
		if err := v.Check(); err != nil {
			t.Errorf("variant %s: %v", v.Name, err)
		}
	}
	t.Logf("%d of %d turns timed out", timedOut, len(results))
}

// The router in the virtual world knows each replica's KV capacity, as the HTTP
// router learns it from vllm:cache_config_info ((num_gpu_blocks - 1) x
// block_size), so capacity-aware rules (WorkingSet's fit move, ColdMove) act in
// both worlds.
func TestRouterSeesKVCapacity(t *testing.T) {
	prof, err := sim.LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := sim.NewEngine(sim.EngineConfig{Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(probe.Config().NumGPUBlocks-1) * int64(probe.Config().BlockSize)
	var seen []int64
	_, err = Run(context.Background(), Config{
		Scenario: smokeScenario(t), Replicas: 2, Engine: sim.EngineConfig{Profile: prof},
		Balancer: router.BalancerConfig{OnDecision: func(ev router.DecisionEvent) {
			for _, v := range ev.View {
				seen = append(seen, v.KVCapacityTokens)
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) == 0 || want <= 0 {
		t.Fatalf("%d views, want capacity %d", len(seen), want)
	}
	for _, got := range seen {
		if got != want {
			t.Fatalf("a decision saw KV capacity %d, want %d", got, want)
		}
	}
}

// Poll instants are jittered within their intervals (loadgen.PollSchedule), so
// "replicas busy" cannot alias with a lock-step load: after the poll at the
// variant's start, poll k lies in [start + k s, start + (k+1) s), not on the grid.
func TestPollInstantsAreJitteredWithinTheirIntervals(t *testing.T) {
	sc := smokeScenario(t)
	dir := t.TempDir()
	m := runOnce(t, sc, dir)
	_, _, series, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := m.Variants[0].Stages[0].Start
	var instants []time.Duration
	for _, s := range series {
		if s.Variant == m.Variants[0].Name && s.Replica == "r0" {
			instants = append(instants, s.T)
		}
	}
	if len(instants) < 10 || instants[0] != start {
		t.Fatalf("%d polls of r0, first at %v; want >= 10, the first at the variant's start %v", len(instants), instants[0], start)
	}
	onGrid := 0
	for k, at := range instants[1:] {
		lo := start + time.Duration(k)*loadgen.DefaultScrapeInterval
		if at < lo || at >= lo+loadgen.DefaultScrapeInterval {
			t.Fatalf("poll %d at %v, want within [%v, %v)", k, at, lo, lo+loadgen.DefaultScrapeInterval)
		}
		if (at-start)%loadgen.DefaultScrapeInterval == 0 {
			onGrid++
		}
	}
	if onGrid > 1 {
		t.Errorf("%d of %d polls on the fixed 1 s grid: not jittered", onGrid, len(instants)-1)
	}
}
