package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Non-streaming conversations (OpenAI chat and Anthropic messages, as
// driveSession sends them) through the router to the simulator: the router reads
// the cache counts from the JSON replies' usage, so its usage totals (the card's
// "usage" column) count every turn and the later turns' cached prefix.
func TestNonStreamingUsageReachesTheRouter(t *testing.T) {
	f := startFleet(t, simhttp.Config{Replicas: 2, Speed: 10, ReplyTokens: 24}, 32)
	model := f.sim.Config().Model
	for s, anthropic := range []bool{false, true} {
		if err := driveSession(context.Background(), f.url, model, fmt.Sprintf("usage-session-%d", s), anthropic, uint64(s), 3); err != nil {
			t.Fatal(err)
		}
	}
	reqs := f.log.all() // waits for the handlers, so their usage is counted
	var prompt, cached uint64
	for _, r := range f.rt.Status().Models[0].Replicas {
		prompt += r.UsagePromptTokens
		cached += r.UsageCachedTokens
	}
	if len(reqs) != 6 {
		t.Fatalf("%d requests logged, want 6", len(reqs))
	}
	for _, r := range reqs {
		if r.Stream {
			t.Fatalf("a request streamed: %v", r)
		}
	}
	// Six turns of at least the ~600-token system prompt each; turns 2 and 3 of
	// each session find at least the system prompt and turn 1 in the cache.
	if prompt < 6*600 || cached < 4*600 || cached >= prompt {
		t.Fatalf("router usage totals: %d prompt, %d cached tokens over 6 non-streaming turns", prompt, cached)
	}
	t.Logf("router usage totals over 6 non-streaming turns: %d prompt, %d cached tokens", prompt, cached)
}

// The cold-move policy serves conversations over HTTP (simulator, router,
// OpenAI and Anthropic, non-streaming): every turn succeeds, and every decision is
// one a session-affinity policy gives.
func TestColdMovePolicyOverHTTP(t *testing.T) {
	f := startFleet(t, simhttp.Config{Replicas: 3, Speed: 10, ReplyTokens: 24}, 32)
	model := f.sim.Config().Model
	if err := f.rt.SetPolicy(model, router.PolicyColdMove); err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		if err := driveSession(context.Background(), f.url, model, fmt.Sprintf("cold-%d", s), s%2 == 1, uint64(s), 4); err != nil {
			t.Fatal(err)
		}
	}
	reqs := f.log.all()
	if len(reqs) != 16 {
		t.Fatalf("%d requests, want 16", len(reqs))
	}
	for _, r := range reqs {
		switch r.Decision {
		case "placed", "sticky", "moved", "overflow":
		default:
			t.Errorf("decision %q: %v", r.Decision, r)
		}
		if r.Status != 200 {
			t.Errorf("status %d: %v", r.Status, r)
		}
	}
}
