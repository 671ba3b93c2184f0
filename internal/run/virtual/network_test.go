package virtual

import (
	"context"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim"
)

// oneSessionTurns runs one session of the smoke workload alone on one replica and
// returns its turns.
func oneSessionTurns(t *testing.T, edit func(*loadgen.Scenario)) []loadgen.Result {
	t.Helper()
	sc := smokeScenario(t)
	sc.Stages = []int{1}
	sc.Variants = []string{"on"}
	edit(sc)
	var got []loadgen.Result
	_, err := Run(context.Background(), Config{
		Scenario: sc, Replicas: 1, Engine: sim.EngineConfig{Profile: sim.ProfileA4000Qwen3_4B},
		OnResult: func(r loadgen.Result) { got = append(got, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 3 {
		t.Fatalf("%d turns, want at least 3", len(got))
	}
	return got
}

// An RTT adds exactly one RTT to every TTFB and to every turn's duration on an
// otherwise idle server, and spaces the turns by it.
func TestRTTAddsOneRoundTrip(t *testing.T) {
	const rtt = 80 * time.Millisecond
	base := oneSessionTurns(t, func(sc *loadgen.Scenario) { sc.ThinkTime, sc.ThinkSpread = 0, loadgen.DurationRange{} })
	net := oneSessionTurns(t, func(sc *loadgen.Scenario) { sc.ThinkTime, sc.ThinkSpread, sc.RTT = 0, loadgen.DurationRange{}, rtt })
	for i := range 3 {
		b, n := base[i], net[i]
		if d := n.TTFB() - b.TTFB(); d != rtt {
			t.Errorf("turn %d: TTFB %s with RTT vs %s without: +%s, want +%s", i, n.TTFB(), b.TTFB(), d, rtt)
		}
		if d := (n.Done - n.Sent) - (b.Done - b.Sent); d != rtt {
			t.Errorf("turn %d: duration grew by %s, want %s", i, d, rtt)
		}
	}
	// Zero think time: the next turn is sent when the previous end reaches the client.
	if net[1].Sent != net[0].Done {
		t.Errorf("turn 1 sent at %s, turn 0 done at %s", net[1].Sent, net[0].Done)
	}
}

// The API-server model delays a request by its preprocessing (chat template +
// tokenization) and every event by the step's output handling.
func TestAPIServerAddsFrontendTime(t *testing.T) {
	base := oneSessionTurns(t, func(*loadgen.Scenario) {})
	fe := oneSessionTurns(t, func(sc *loadgen.Scenario) { sc.APIServers = 1 })
	c := sim.ProfileA4000Qwen3_4B.Frontend
	for i := range 3 {
		b, f := base[i], fe[i]
		pre := c.ChatTemplate + time.Duration(f.PromptTokens)*c.TokenizePerToken
		post := c.EngineCoreHop + c.DetokenizePerToken
		// The engine starts later by pre, so its step grid moves; the first token is
		// at least pre + post later, and at most one decode step more.
		d := f.TTFB() - b.TTFB()
		if d < pre+post || d > pre+post+40*time.Millisecond {
			t.Errorf("turn %d: TTFB +%s, want +%s to +%s", i, d, pre+post, pre+post+40*time.Millisecond)
		}
	}
}
