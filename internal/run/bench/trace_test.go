package bench

import (
	"context"
	"encoding/json"
	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/loadgen"
)

// runTraceBench replays 30 recorded seconds of the Mooncake trace (a fifth of
// its conversations, 10x faster) over HTTP in report windows of window (the
// last one drains) and returns the manifest and the OK results.
func runTraceBench(t *testing.T, name string, window time.Duration, o Options, mods ...func(*loadgen.Scenario)) (loadgen.Manifest, []loadgen.Result) {
	t.Helper()
	sc := loadgen.DefaultScenario()
	sc.Name, sc.Variants = name, []string{"on"}
	sc.Trace = &loadgen.TraceSpec{File: sharedtrace.Path(t, sharedtrace.Mooncake), Mode: loadgen.TraceSession, To: 30 * time.Second, Sample: 0.2,
		Speedup: 10, Window: window}
	for _, m := range mods {
		m(sc)
	}
	o.Scenario, o.OutDir, o.RunID = sc, filepath.Join(t.TempDir(), name), name
	var progress strings.Builder
	o.Progress = &progress
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	m, results, _, err := loadgen.ReadResults(o.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	var ok []loadgen.Result
	for _, r := range results {
		if r.OK() {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 || len(m.Traces) != 1 || m.TraceCalibration == nil {
		t.Fatalf("%d OK results, traces %+v, calibration %+v\n%s", len(ok), m.Traces, m.TraceCalibration, progress.String())
	}
	b, _ := json.Marshal(m.TraceCalibration)
	t.Logf("%s: %d OK of %d; calibration %s", name, len(ok), len(results), b)
	return *m, ok
}

// On the simulator (warden sim behind the embedded router), calibration
// through its /tokenize is exact: every prompt is input_length tokens and every
// output output_length (ignore_eos + min_tokens).
func TestTraceReplayHTTPSimulator(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world")
	}
	m, ok := runTraceBench(t, "trace-sim", 30*time.Second, Options{SimReplicas: 4, Profile: DefaultProfile, Speed: 5.0 / raceSlowdown})
	if c := m.TraceCalibration; c.Endpoint != "POST /tokenize (vllm)" || c.Samples == 0 || c.ErrMaxPct > 1 {
		t.Errorf("calibration %+v: want the simulator's /tokenize, error within 1 %%", c)
	}
	for _, r := range ok {
		if r.PromptTokens != r.Trace.InputLength || r.OutputTokens != max(1, r.Trace.OutputLength) {
			t.Errorf("request %d: %d prompt / %d output tokens, trace %d / %d", r.Trace.Index, r.PromptTokens, r.OutputTokens, r.Trace.InputLength, r.Trace.OutputLength)
		}
	}
}

// Over the Anthropic Messages API (as Claude Code sends): the same
// calibrated prompts, each call's max_tokens its output_length, not forced
// (the simulator, as a model, stops at its natural reply length), and the
// manifest says the outputs are not forced.
func TestTraceReplayHTTPAnthropic(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world")
	}
	m, ok := runTraceBench(t, "trace-anthropic", 30*time.Second, Options{SimReplicas: 4, Profile: DefaultProfile, Speed: 5.0 / raceSlowdown},
		func(sc *loadgen.Scenario) { sc.API = loadgen.APIAnthropicMessages })
	for _, r := range ok {
		if r.PromptTokens != r.Trace.InputLength || r.OutputTokens < 1 || r.OutputTokens > max(1, r.Trace.OutputLength) {
			t.Errorf("request %d: %d prompt / %d output tokens, trace %d / at most %d", r.Trace.Index, r.PromptTokens, r.OutputTokens, r.Trace.InputLength, r.Trace.OutputLength)
		}
	}
	if !strings.Contains(strings.Join(m.Notes, "\n"), "outputs are not forced") {
		t.Errorf("manifest notes %q: want the unforced-output note", m.Notes)
	}
}

// Against llama.cpp stand-ins (one byte a token): calibration goes through
// /apply-template and /tokenize, n_predict forces the output length, and the
// prompts land within 1 % of input_length.
func TestTraceReplayHTTPLlamaCpp(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world")
	}
	urls := startStubs(t, 2, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 8, ContextLen: 200_000, TokenDelay: time.Millisecond})
	// Wall time against the stubs: the race detector on two loaded cores sent
	// every request 8-9 s late and none ended inside 5 s windows in one CI run.
	m, ok := runTraceBench(t, "trace-llamacpp", 5*time.Second*raceSlowdown, Options{Replicas: urls, Engine: "auto"})
	c := m.TraceCalibration
	if !strings.Contains(c.Endpoint, "/apply-template") || c.Samples == 0 || c.ErrMaxPct > 1 || c.TokensPerWord < 4 {
		t.Errorf("calibration %+v: want /apply-template + /tokenize, about 5 byte-tokens a word, error within 1 %%", c)
	}
	for _, r := range ok {
		if d := float64(r.PromptTokens-r.Trace.InputLength) / float64(r.Trace.InputLength); d > 0.01 || d < -0.01 {
			t.Errorf("request %d: %d prompt tokens for input_length %d", r.Trace.Index, r.PromptTokens, r.Trace.InputLength)
		}
		if r.OutputTokens != max(1, r.Trace.OutputLength) {
			t.Errorf("request %d: %d output tokens, want %d", r.Trace.Index, r.OutputTokens, r.Trace.OutputLength)
		}
	}
}
