package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// A run stopped by a rule (manifest "stopped") says why in summary.md, at the
// top and in the note of the stage it cut, instead of "run interrupted".
func TestSummaryMarkdownSaysWhyTheRunStopped(t *testing.T) {
	m := &loadgen.Manifest{
		RunID: "stopped", Scenario: testScenario([]int{2, 4}, time.Minute), Replicas: []string{"r0"},
		Variants: []loadgen.Variant{{Name: "off", Stages: []loadgen.StageWindow{
			{Sessions: 2, Start: 0, End: sec(12), Complete: false, Started: 1, Completed: 1},
		}}},
	}
	dir := t.TempDir()
	writeRunDir(t, dir, m, []loadgen.Result{okTurn("off", 0, 0, "r0", 1, 1, 5, 10)}, nil)
	// Add "stopped" as the runner writes it.
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	raw["stopped"] = map[string]string{
		"reason": "running variant off: too many consecutive failed turns: 50 in a row, last: http 404",
		"rule":   "50 turns in a row failed (max_consecutive_failures)",
	}
	if b, err = json.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := Summarize(run)
	if err != nil {
		t.Fatal(err)
	}
	md := string(SummaryMarkdown(&run.Manifest, sums, nil, nil))
	for _, want := range []string{
		"- **stopped**: running variant off: too many consecutive failed turns: 50 in a row, last: http 404 (rule: 50 turns in a row failed (max_consecutive_failures))",
		"stage did not complete (run stopped: running variant off: too many consecutive failed turns",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "run interrupted") {
		t.Errorf("summary.md says the stopped run was interrupted:\n%s", md)
	}
}
