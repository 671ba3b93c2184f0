package main

import (
	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

func TestTraceStatsPrintsTable2(t *testing.T) {
	out, err := run(t, "trace", "stats", sharedtrace.Path(t, sharedtrace.Mooncake))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"requests        12,031", "mean input      12,035 tokens", "mean output     343 tokens", "cache ratio     37.3 %", "conversations   8,056"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTraceLRUWritesCSVAndPNG(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "trace", "lru", sharedtrace.Path(t, sharedtrace.Mooncake), "--capacity", "0.1M,10M", "--out", filepath.Join(dir, "c"))
	if err != nil {
		t.Fatal(err)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "c.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "capacity_tokens,hit_pct\n100000,4.27"; !strings.HasPrefix(string(csv), want) || !strings.Contains(string(csv), "unbounded,37.3") {
		t.Errorf("csv %q, want it to start %q and end with the ceiling\n%s", csv, want, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "c.png")); err != nil || fi.Size() < 1000 {
		t.Errorf("png: %v", err)
	}
}

func TestTraceBadInputWritesNothing(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`+"\n"+
		`{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0]}`+"\n"), 0o644)
	_, err := run(t, "trace", "slice", bad, "--out", filepath.Join(dir, "out.jsonl"))
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl line 2: 1 hash_ids for input_length 600") {
		t.Fatalf("err %v, want line 2 named", err)
	}
	if _, err := run(t, "trace", "lru", bad, "--out", filepath.Join(dir, "lru")); err == nil {
		t.Fatal("lru accepted a bad trace")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("files written on bad input: %v", ents)
	}
}

func TestBenchTraceBadLineWritesNoResults(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`+"\n"+
		`{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}`+"\n"), 0o644)
	out := filepath.Join(dir, "run")
	_, err := run(t, "bench", "--virtual", "--trace", bad, "--out", out)
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl line 2: timestamp 1 ms is before") {
		t.Fatalf("err %v, want line 2 named", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("results directory exists after a bad trace: %v", err)
	}
	if _, err := run(t, "bench", "--virtual", "--speedup", "2"); err == nil || !strings.Contains(err.Error(), "--speedup: only with a trace replay") {
		t.Errorf("--speedup without a trace: %v", err)
	}
}

func TestBenchTraceVirtualSessionMode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	if _, err := run(t, "bench", "--virtual", "--trace", sharedtrace.Path(t, sharedtrace.Mooncake), "--trace-mode", "session", "--to", "3m", "--sample", "0.1",
		"--trace-window", "1m", "--out", out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"manifest.json", "results.csv", "summary.md", "turns.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

// A --trace run is labelled by the trace, not the default scenario; without
// --from/--to the window reads "whole trace"; sessions/h is n/a, not 0 (a
// trace marks no last turn).
func TestBenchTraceLabels(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	stdout, err := run(t, "bench", "--virtual", "--trace", sharedtrace.Path(t, sharedtrace.Mooncake), "--trace-mode", "session", "--sample", "0.02",
		"--variants", "on", "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "trace "+sharedtrace.Path(t, sharedtrace.Mooncake)+", on") || strings.Contains(stdout, "claude-code-reference") {
		t.Errorf("header does not name the trace:\n%s", stdout)
	}
	md, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	for _, want := range []string{"- trace: `" + sharedtrace.Path(t, sharedtrace.Mooncake) + "`", "mode session, whole trace", "| n/a |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
	if strings.Contains(string(md), "0s..0s") || strings.Contains(string(md), "claude-code-reference") {
		t.Errorf("summary.md has the default scenario's labels:\n%s", md)
	}
	man, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	if !strings.Contains(string(man), `"name": "trace-conversation_trace"`) {
		t.Errorf("manifest does not name the trace")
	}
}

// The shipped trace scenario loads (its trace path is relative to the file)
// and runs in virtual time on a window of it.
func TestTraceScenarioFile(t *testing.T) {
	sharedtrace.Path(t, sharedtrace.Mooncake) // the scenario names it beside the repository
	out := filepath.Join(t.TempDir(), "run")
	if _, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/mooncake-conversation.yaml", "--to", "2m",
		"--trace-window", "1m", "--variants", "on", "--out", out); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Trace replay", "## Goodput", "mode session"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
}

// bench --help lists every session key style the scenario accepts; it used to
// leave out codex.
func TestBenchHelpListsSessionHeaders(t *testing.T) {
	out, err := run(t, "bench", "--help")
	if err != nil {
		t.Fatal(err)
	}
	want := "session key style: " + strings.Join(loadgen.SessionHeaders, ", ")
	if !strings.Contains(out, want) || !strings.Contains(want, loadgen.SessionHeaderCodex) {
		t.Errorf("bench --help lacks %q:\n%s", want, out)
	}
}

// trace lru's --out is a file prefix; its help says so (a user took it for a
// directory, as bench's --out is).
func TestTraceLRUHelpSaysOutIsPrefix(t *testing.T) {
	out, err := run(t, "trace", "lru", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "output file prefix, not a directory") {
		t.Errorf("trace lru --help does not say --out is a prefix:\n%s", out)
	}
}
