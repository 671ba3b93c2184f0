package virtual

import (
	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
	"github.com/lmwarden/warden/sim"
)

// A slice of the Mooncake conversation trace on the reference cluster, in both
// modes, affinity off and on: the accounting adds up, every prompt the engines
// saw was exactly the trace's input_length tokens, and in session mode every
// reconstructed conversation carried its own key.
func TestTraceReplayBothModes(t *testing.T) {
	for _, mode := range []string{loadgen.TraceTimestamp, loadgen.TraceSession} {
		t.Run(mode, func(t *testing.T) {
			sc := loadgen.TinyScenario()
			sc.Variants = []string{"off", "on"}
			// The reference network and API servers (the delayed event path,
			// where a prompt waits before it reaches its engine).
			sc.RTT, sc.APIServers = loadgen.ReferenceRTT, loadgen.ReferenceAPIServers
			sc.Trace = &loadgen.TraceSpec{File: sharedtrace.Path(t, sharedtrace.Mooncake), Mode: mode, To: 5 * time.Minute, Sample: 0.2, Window: time.Minute}
			var results []loadgen.Result
			prof, err := sim.LookupProfile("a4000-qwen3-4b")
			if err != nil {
				t.Fatal(err)
			}
			m, err := Run(t.Context(), Config{Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: prof}, RunID: "test",
				OnResult: func(r loadgen.Result) { results = append(results, r) }})
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Traces) != 2 {
				t.Fatalf("manifest traces %d, want 2", len(m.Traces))
			}
			rep := m.Traces[0]
			if rep.Requests == 0 || rep.Sent+rep.NotSent != rep.Requests || rep.Conversations == 0 {
				t.Errorf("replay %+v", rep)
			}
			if rep.CeilingPct < rep.SharedLRUPct || rep.SharedLRUTokens <= 0 {
				t.Errorf("ceiling %.1f %% below the shared LRU's %.1f %%", rep.CeilingPct, rep.SharedLRUPct)
			}
			ok, keyed := 0, map[string]string{} // variant/conversation -> key (keys differ by variant, as for synthetic sessions)
			for _, r := range results {
				if r.Trace == nil {
					t.Fatalf("result without its trace request: %+v", r)
				}
				if r.OK() {
					ok++
					if r.PromptTokens != r.Trace.InputLength || r.OutputTokens != max(1, r.Trace.OutputLength) {
						t.Errorf("request %d: %d prompt / %d output tokens, trace says %d / %d", r.Trace.Index, r.PromptTokens, r.OutputTokens, r.Trace.InputLength, r.Trace.OutputLength)
					}
				}
				if mode == loadgen.TraceTimestamp && r.SessionKey != "" {
					t.Errorf("timestamp mode sent key %q", r.SessionKey)
				}
				if mode == loadgen.TraceSession {
					c := r.Variant + "/" + strconv.FormatInt(r.Session, 10)
					if k, seen := keyed[c]; r.SessionKey == "" || (seen && k != r.SessionKey) {
						t.Errorf("conversation %s: key %q (before %q)", c, r.SessionKey, k)
					}
					keyed[c] = r.SessionKey
				}
			}
			if ok == 0 {
				t.Fatal("no request succeeded")
			}
			// No request hits more than its block ids allow: its cached tokens are
			// at most its leading full blocks that some other request of the run
			// shares (a prompt that is not what it should be would hit more).
			ids := traceIDs(t)
			count := map[string]map[int64]int{} // variant -> block id -> requests with it
			for _, r := range results {
				if count[r.Variant] == nil {
					count[r.Variant] = map[int64]int{}
				}
				for _, id := range ids[r.Trace.Index][:r.Trace.InputLength/512] {
					count[r.Variant][id]++
				}
			}
			for _, r := range results {
				full := ids[r.Trace.Index][:r.Trace.InputLength/512]
				k := 0
				for k < len(full) && count[r.Variant][full[k]] > 1 {
					k++
				}
				if r.OK() && r.CachedTokens > k*512 {
					t.Errorf("%s request %d: %d cached tokens, but only %d leading blocks are shared (%d tokens)", r.Variant, r.Trace.Index, r.CachedTokens, k, k*512)
				}
			}
			t.Logf("%s: %d results, %d ok; replay %+v", mode, len(results), ok, rep)
		})
	}
}

// traceIDs returns the hash ids of every request of the Mooncake trace.
func traceIDs(t *testing.T) [][]int64 {
	f, err := os.Open(sharedtrace.Path(t, sharedtrace.Mooncake))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]int64
	err = trace.Each(trace.NewReader(f, "", 0), func(r trace.Request) error { out = append(out, r.HashIDs); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}
