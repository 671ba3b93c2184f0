package main

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"github.com/lmwarden/warden/loadgen/agent"
)

// rank is the nearest-rank p-quantile, counted here, not by agent.Quantile.
func rank(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(p*float64(len(s))))-1)]
}

// rawCounts recounts, from the JSON itself (not agent.Read): the parent's
// calls per file, every parent call's output, spawns (runs of subagent
// entries in a parent's list) and every subagent's calls.
func rawCounts(t *testing.T, dir string) (calls, outputs, subCalls []float64, spawns int) {
	t.Helper()
	type entry struct {
		Type     string  `json:"type"`
		Out      float64 `json:"out"`
		Requests []entry `json:"requests"`
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Requests []entry }
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		n, inRun := 0, false
		for _, e := range f.Requests {
			if e.Type == "subagent" {
				if !inRun {
					spawns++
				}
				inRun = true
				k := 0
				for _, s := range e.Requests {
					if s.Type != "subagent" {
						k++
					}
				}
				subCalls = append(subCalls, float64(k))
				continue
			}
			inRun = false
			n++
			outputs = append(outputs, e.Out)
		}
		calls = append(calls, float64(n))
	}
	return calls, outputs, subCalls, spawns
}

// synthCounts recounts the same from Generate's trees directly.
func synthCounts(p agent.SynthParams, seed uint64, n int) (calls, outputs []float64) {
	for i := range n {
		tr := agent.Generate(p, seed, i)
		k := 0
		for _, st := range tr.Steps {
			if st.Agent == 0 {
				k++
				outputs = append(outputs, float64(st.Call.Out))
			}
		}
		calls = append(calls, float64(k))
	}
	return calls, outputs
}

// readAgentsCSV returns the CSV's rows by figure, each as column -> cell.
func readAgentsCSV(t *testing.T, path string) (map[string]map[string]string, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	var names []string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out[r[0]] = m
		names = append(names, r[0])
	}
	return out, names
}

func cell(t *testing.T, rows map[string]map[string]string, fig, col string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(rows[fig][col], 64)
	if err != nil {
		t.Fatalf("%s %s: %q: %v", fig, col, rows[fig][col], err)
	}
	return v
}

// trace agents on the 69 real sessions: its rows agree with counts taken
// from the JSON files and from Generate's trees by this test, and --help
// lists every row it prints.
func TestTraceAgentsRecount(t *testing.T) {
	dir := filepath.Dir(sharedtrace.Path(t, "claude-code/trace_0277.json"))
	out := filepath.Join(t.TempDir(), "agents.csv")
	const n, seed = 300, 5
	stdout, err := run(t, "trace", "agents", dir, "--synth", strconv.Itoa(n), "--seed", strconv.Itoa(seed), "--csv", out)
	if err != nil {
		t.Fatal(err)
	}
	rows, names := readAgentsCSV(t, out)
	calls, outputs, subCalls, spawns := rawCounts(t, dir)
	sCalls, sOutputs := synthCounts(agent.DefaultParams(), seed, n)
	eq := func(fig, col string, want float64) {
		t.Helper()
		if got := cell(t, rows, fig, col); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s %s: %g, recount %g", fig, col, got, want)
		}
	}
	eq("sessions", "trace_value", float64(len(calls)))
	eq("sessions", "synth_value", n)
	eq("calls per session", "trace_p50", rank(calls, 0.5))
	eq("calls per session", "trace_p90", rank(calls, 0.9))
	eq("calls per session", "trace_max", slices.Max(calls))
	eq("calls per session", "synth_p50", rank(sCalls, 0.5))
	eq("calls per session", "synth_p90", rank(sCalls, 0.9))
	eq("calls per session", "ratio_p50", rank(sCalls, 0.5)/rank(calls, 0.5))
	eq("output", "trace_p50", rank(outputs, 0.5))
	eq("output", "trace_p90", rank(outputs, 0.9))
	eq("output", "synth_p90", rank(sOutputs, 0.9))
	eq("spawn share", "trace_value", float64(spawns)/float64(len(outputs)))
	eq("subagent calls", "trace_n", float64(len(subCalls)))
	eq("subagent calls", "trace_p50", rank(subCalls, 0.5))
	for _, want := range []string{"sessions", "calls per session", "first prompt", "first message", "prompt", "output", "new input",
		"tool gap", "human gap", "spawn share", "fan-out width", "subagent calls", "subagent task", "subagent new input",
		"subagent output", "compactions per session", "post-compaction prompt", "parent head", "subagent head"} {
		if rows[want] == nil {
			t.Errorf("no row %q in %v", want, names)
		}
	}
	help, err := run(t, "trace", "agents", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.Contains(stdout, " "+name+" ") {
			t.Errorf("the table lacks row %q:\n%s", name, stdout)
		}
		if !strings.Contains(help, "  "+name+" ") {
			t.Errorf("--help does not explain row %q:\n%s", name, help)
		}
	}
}

// --scenario takes the agent: section and the scenario's seed: the shipped
// scenario only scales and caps the replay, so its synthesized column is the
// defaults' at seed 1.
func TestTraceAgentsScenario(t *testing.T) {
	file := sharedtrace.Path(t, "claude-code/trace_0277.json")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
	if _, err := run(t, "trace", "agents", file, "--synth", "50", "--scenario", "../../scenarios/agent-sessions.yaml", "--csv", a); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "trace", "agents", file, "--synth", "50", "--seed", "1", "--csv", b); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(a)
	cb, _ := os.ReadFile(b)
	if string(ca) != string(cb) || len(ca) == 0 {
		t.Errorf("scenario run differs from defaults at seed 1:\n%s\n%s", ca, cb)
	}
}

// Input not of this format is refused naming the file; so is a scenario
// without synthesized agent sessions.
func TestTraceAgentsBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`+"\n"), 0o644)
	_, err := run(t, "trace", "agents", bad)
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl: not a Claude Code trace") {
		t.Errorf("err %v, want the file named as not a Claude Code trace", err)
	}
	empty := t.TempDir()
	if _, err := run(t, "trace", "agents", empty); err == nil || !strings.Contains(err.Error(), "holds no *.json") {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := run(t, "trace", "agents", dir, "--scenario", "../../scenarios/smoke.yaml"); err == nil || !strings.Contains(err.Error(), `want "agent"`) {
		t.Errorf("chain scenario: %v", err)
	}
	if _, err := run(t, "trace", "agents", dir, "--synth", "0"); err == nil || !strings.Contains(err.Error(), "--synth 0") {
		t.Errorf("--synth 0: %v", err)
	}
}
