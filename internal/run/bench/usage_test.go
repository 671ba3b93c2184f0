package bench

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// TestUsageAgreesWithCountersOverEveryAPI runs a short HTTP benchmark against the
// simulated cluster once per API and checks that the hit rate from per-request
// usage (cached / prompt tokens as the harness reads them) agrees with the
// engines' own prefix-cache counters, and that the APIs (chat, Anthropic
// messages, Responses) report the same prompt sizes. A usage whose fields are read with the wrong semantics shows here: the
// Anthropic stream once carried the whole prompt in input_tokens beside
// cache_read_input_tokens, the harness added the two, and usage read 41 % where
// the counters read 68 %.
func TestUsageAgreesWithCountersOverEveryAPI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world for a few seconds")
	}
	prompt, cached := map[string]float64{}, map[string]float64{}
	for _, api := range []string{loadgen.APIOpenAIChat, loadgen.APIAnthropicMessages, loadgen.APIOpenAIResponses} {
		sc := loadgen.DefaultScenario()
		sc.Name, sc.API = "usage-"+api, api
		// 60 simulated seconds at speed 5 (12 s of wall time): enough turns
		// (~12) that the windows' edge turns stay within the 8-point bound even
		// when parallel tests load the machine (at speed 10 the starved
		// simulator finished 6 turns in 40 s and read 8.3 points apart).
		sc.Stages, sc.StageDuration, sc.Variants = []int{2}, 60*time.Second, []string{"on"}
		dir := filepath.Join(t.TempDir(), api)
		if _, err := Run(context.Background(), Options{Scenario: sc, Speed: 5, OutDir: dir, RunID: "usage-" + api}); err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		sums, err := report.SummarizeDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		s := sums[0]
		t.Logf("%s: turns %d, prefix hits %.1f %%, usage cached %.1f %%, prompt tokens mean %.0f", api, s.TurnsOK, s.PrefixHitsPct, s.UsageCachedPct, s.PromptTokensMean)
		if s.TurnsOK == 0 || math.IsNaN(s.UsageCachedPct) {
			t.Fatalf("%s: %d turns, usage cached %v", api, s.TurnsOK, s.UsageCachedPct)
		}
		// The two windows differ by the turns in flight at their edges: with 2
		// sessions a turn is 1/12 of the window, and 10.3 points apart was seen
		// with right semantics; the misread Anthropic usage was 27 points off.
		if d := math.Abs(s.UsageCachedPct - s.PrefixHitsPct); d > 15 {
			t.Errorf("%s: usage cached %.1f %% vs counters %.1f %% (%.1f points apart)", api, s.UsageCachedPct, s.PrefixHitsPct, d)
		}
		prompt[api] = s.PromptTokensMean
		cached[api] = s.UsageCachedPct
	}
	// The APIs run the same workload: their usage must read alike.
	if a, o := cached[loadgen.APIAnthropicMessages], cached[loadgen.APIOpenAIChat]; math.Abs(a-o) > 6 {
		t.Errorf("usage cached: anthropic %.1f %% vs openai %.1f %%", a, o)
	}
	if r, o := cached[loadgen.APIOpenAIResponses], cached[loadgen.APIOpenAIChat]; math.Abs(r-o) > 6 {
		t.Errorf("usage cached: responses %.1f %% vs openai %.1f %%", r, o)
	}
	if a, o := prompt[loadgen.APIAnthropicMessages], prompt[loadgen.APIOpenAIChat]; math.Abs(a-o) > 0.1*o {
		t.Errorf("prompt tokens mean: anthropic %.0f vs openai %.0f", a, o)
	}
	if r, o := prompt[loadgen.APIOpenAIResponses], prompt[loadgen.APIOpenAIChat]; math.Abs(r-o) > 0.1*o {
		t.Errorf("prompt tokens mean: responses %.0f vs openai %.0f", r, o)
	}
}
