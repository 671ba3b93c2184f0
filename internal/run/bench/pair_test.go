package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// TestComparePairLlamaCpp: affinity off and on as two runs against llama.cpp
// stand-ins (fresh servers for the second run, as a restart would give: no
// prefix-cache reset), then report.Compare on the two results directories
// prints the off -> on table across them (stayed % from the router's header in
// both), and refuses the pair once one run's manifest says another engine
// kind.
func TestComparePairLlamaCpp(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world for two stubStages")
	}
	cfg := enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 4, TokenDelay: 5 * time.Millisecond}
	dirOff, _, off := runStubBenchWith(t, startStubs(t, 4, cfg), "llama-off", 4, "off", nil)
	dirOn, _, on := runStubBenchWith(t, startStubs(t, 4, cfg), "llama-on", 4, "on", nil)
	t.Logf("off: turns %d stayed %.1f %%, usage cached %.1f %%; on: turns %d stayed %.1f %%, usage cached %.1f %%",
		off.TurnsOK, off.StayedPct, off.UsageCachedPct, on.TurnsOK, on.StayedPct, on.UsageCachedPct)

	var out, md bytes.Buffer
	c, err := report.Compare(dirOff, dirOn, &out, report.CompareOptions{Markdown: &md})
	if err != nil {
		t.Fatalf("Compare: %v\n%s", err, out.String())
	}
	t.Logf("warden compare:\n%s", out.String())
	if len(c.Pair) != 2 || c.Pair[0] != "off" || c.Pair[1] != "on" || len(c.Stages) != 1 {
		t.Fatalf("pair %v, %d stages; want off -> on, 1 stage", c.Pair, len(c.Stages))
	}
	for _, d := range c.Stages[0].Deltas {
		if d.Metric == report.MetricStayedPct && (d.Value != 100 || d.Base >= 100) {
			t.Errorf("stayed %% %v -> %v: want off under 100 and on 100 (4 sessions, 4 x 4 slots)", d.Base, d.Value)
		}
	}
	if !strings.Contains(out.String(), "off -> on across two runs: llama-off") || !strings.Contains(md.String(), "| 4 ") {
		t.Errorf("output or markdown lacks the off -> on table:\n%s\n%s", out.String(), md.String())
	}
	if !strings.Contains(md.String(), "no prefix-cache reset endpoint") {
		t.Errorf("markdown does not carry the runs' notes (llama.cpp without reset):\n%s", md.String())
	}

	// The same pair with one run's engines recorded as SGLang: refused.
	other := t.TempDir()
	for _, f := range []string{"manifest.json", "turns.jsonl", "series.csv"} {
		b, err := os.ReadFile(filepath.Join(dirOn, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "manifest.json" {
			var m loadgen.Manifest
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m.Engines[0].Kind = string(engines.KindSGLang)
			if b, err = json.Marshal(&m); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(other, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := report.Compare(dirOff, other, &bytes.Buffer{}, report.CompareOptions{}); !errors.Is(err, report.ErrEngineMismatch) ||
		!strings.Contains(err.Error(), "engine kinds (llamacpp vs llamacpp,sglang)") {
		t.Errorf("pair with another engine kind: %v, want ErrEngineMismatch naming the kinds", err)
	}
}
