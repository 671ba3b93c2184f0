package routerhttp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// Recorded Claude Code traffic (testdata/claude-code-request-1.json, a 17 KB main
// request, and the first side request of claude-code-request-2.json, 757 bytes,
// same legacy metadata.user_id session) through the proxy: the side request stays
// on the conversation's replica and the replica's live working set in /status is
// still the main request's estimate.
func TestRecordedSideRequestKeepsTheConversation(t *testing.T) {
	var main struct {
		Body json.RawMessage `json:"body"`
	}
	var side struct {
		Requests []struct {
			Body json.RawMessage `json:"body"`
		} `json:"requests"`
	}
	for name, v := range map[string]any{"claude-code-request-1.json": &main, "claude-code-request-2.json": &side} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(side.Requests) == 0 || len(side.Requests[0].Body)*4 > len(main.Body) {
		t.Fatalf("fixtures: side request %d bytes against main %d", len(side.Requests[0].Body), len(main.Body))
	}
	f := newFront(t, true, nil, newStub(t, "a"), newStub(t, "b"))
	resp, _ := f.post(t, "/v1/messages", nil, string(main.Body))
	home := resp.Header.Get(wire.HeaderReplica)
	if d := resp.Header.Get(wire.HeaderDecision); d != router.ReasonPlaced.String() {
		t.Fatalf("main request: decision %q, want placed", d)
	}
	resp, _ = f.post(t, "/v1/messages", nil, string(side.Requests[0].Body))
	if got, d := resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision); got != home || d != router.ReasonSticky.String() {
		t.Fatalf("side request: %s on %s, want sticky on %s", d, got, home)
	}
	for _, r := range f.pool().Balancer.Status() {
		if r.Name != home {
			continue
		}
		if want := int64(router.EstimatePromptTokens(len(main.Body))); r.Live != 1 || r.LiveTokens != want {
			t.Errorf("%s: %d live conversations, %d live tokens; want 1, %d (the main request's estimate)", home, r.Live, r.LiveTokens, want)
		}
	}
}
