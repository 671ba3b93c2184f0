package routerhttp

import (
	"io"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

// exampleConfig is the example shipped with docs/router.md.
const exampleConfig = "../../docs/router.example.yaml"

// TestExampleConfig: the documented example parses strictly, validates, builds a
// Router with the replicas it describes, and names every field of the schema.
func TestExampleConfig(t *testing.T) {
	raw, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Fatalf("example config does not validate: %v", err)
	}
	if cfg.ScrapeInterval != time.Second || cfg.SnapshotInterval != 100*time.Millisecond || cfg.SessionTTL != time.Hour {
		t.Errorf("durations: scrape %v, snapshot %v, ttl %v", cfg.ScrapeInterval, cfg.SnapshotInterval, cfg.SessionTTL)
	}
	if len(cfg.Models) != 4 || cfg.Models[0].OverflowThreshold != 0 || cfg.Models[1].OverflowThreshold != 12 || cfg.Models[2].Engine != "llamacpp" ||
		cfg.Models[3].Engine != "" || len(cfg.Models[3].Replicas) != 2 || cfg.Models[3].Replicas[1].URL != "http://cpu3.internal:8080" {
		t.Fatalf("models: %+v", cfg.Models)
	}

	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Clock = &simclock.Manual{}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range rt.Status().Models {
		for _, r := range m.Replicas {
			got = append(got, m.Model+":"+r.Name)
		}
	}
	want := "Qwen/Qwen3-32B:gpu0 Qwen/Qwen3-32B:gpu1 Qwen/Qwen3-32B:gpu9 qwen3-coder:dp/rank0 qwen3-coder:dp/rank1 qwen3-coder:dp/rank2 qwen3-coder:dp/rank3 qwen2.5-coder-7b:r0 qwen2.5-coder-7b:r1 *:r0 *:r1"
	if strings.Join(got, " ") != want {
		t.Errorf("replicas %v, want %s", got, want)
	}
	if d := rt.Status().Models[0].Replicas[2].Draining; d != "finish" {
		t.Errorf("gpu9 draining %q, want finish (drain: finish)", d)
	}
	if n, auto := rt.Pools()[0].Balancer.OverflowThreshold(); n != 8 || !auto {
		t.Errorf("model 0 threshold %d (auto %v), want auto 8", n, auto)
	}
	// All replicas llama.cpp: slot-based, auto threshold slots - 1.
	if n, auto := rt.Pools()[2].Balancer.OverflowThreshold(); n != 3 || !auto {
		t.Errorf("model 2 (llama.cpp, 4 slots) threshold %d (auto %v), want auto 3 (router.SlotOverflowThreshold)", n, auto)
	}
	// URL strings, engine auto: undetected before any scrape, so vLLM's rule
	// (TestEngineAutoIsTheDefault shows the switch once detected).
	if ms := rt.Status().Models[3]; ms.SlotBased || ms.OverflowThreshold != 64 || ms.Replicas[0].Engine != "unknown" {
		t.Errorf("model 3 (auto): slot_based %v, threshold %d, engine %q; want vLLM's 64 and unknown until scraped", ms.SlotBased, ms.OverflowThreshold, ms.Replicas[0].Engine)
	}

	// Every YAML field of the schema appears in the example.
	for _, typ := range []reflect.Type{reflect.TypeFor[Config](), reflect.TypeFor[ModelConfig](), reflect.TypeFor[ReplicaConfig]()} {
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			if !regexp.MustCompile(`(?m)^\s*(- )?` + regexp.QuoteMeta(tag) + `:`).Match(raw) {
				t.Errorf("%s.%s (yaml %q) is missing from %s", typ.Name(), f.Name, tag, exampleConfig)
			}
		}
	}
}
