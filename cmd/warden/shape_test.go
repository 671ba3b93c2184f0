package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

// `warden bench --virtual --scenario scenarios/agent-sessions.yaml` exits 0 on
// the reference fleet (which includes `report --check`), its calls are the
// synthesized trees' with subagent calls among them, and no call was over
// max_model_len at token_scale 0.125.
func TestBenchAgentShapeVirtual(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if out, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/agent-sessions.yaml", "--out", dir); err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	m, _, _, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.AgentTraces) != 2 {
		t.Fatalf("agent_traces %+v: want one per variant", m.AgentTraces)
	}
	for _, rep := range m.AgentTraces {
		if rep.Format != loadgen.FormatSynthesized || rep.SkippedOverLength != 0 || rep.SubagentsStarted == 0 || rep.MaxModelLen != 32768 {
			t.Errorf("replay %+v: want synthesized, none over 32,768, subagents started", rep)
		}
	}
	f, err := os.Open(filepath.Join(dir, "turns.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, sub, failed := 0, 0, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r loadgen.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		calls++
		if !r.OK() {
			failed++
		}
		if r.Trace != nil && r.Trace.Agent != nil && r.Trace.Agent.Agent != "" {
			sub++
		}
	}
	if calls == 0 || sub == 0 || failed != 0 {
		t.Errorf("%d calls, %d of subagents, %d failed: want subagent calls and no failure", calls, sub, failed)
	}
	for _, v := range m.Variants {
		for i, w := range v.Stages {
			if want := []int{4, 8, 16, 32}[i]; w.Sessions != want {
				t.Errorf("variant %s stage %d: %d sessions, want the scenario's %d live trees", v.Name, i, w.Sessions, want)
			}
		}
	}
	t.Logf("%d calls, %d of subagents", calls, sub)
}
