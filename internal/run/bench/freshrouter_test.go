package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
)

// Each variant of an HTTP run through the embedded router gets a fresh router:
// what the previous variant's router served and learned is gone when the next
// variant's preparation (SetAffinity) returns. The old code switched affinity
// and reset session homes on one router, whose served counts (and learned
// estimates, tie-break RNG) carried over.
func TestEmbeddedRouterFreshPerVariant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := &loadgen.Scenario{Name: "fresh", Seed: 1, Stages: []int{1}, StageDuration: 10 * time.Second,
		FirstTurnTokens: 200, SystemPromptTokens: 100, TurnTokens: 50, Turns: 2, MaxOutputTokens: 8}
	h := &httpRun{o: Options{Scenario: sc, SimReplicas: 2, Profile: DefaultProfile, Speed: 20,
		MaxNumSeqs: 32, Policy: router.DefaultAffinityPolicy}, progress: io.Discard}
	var cancel context.CancelFunc
	h.runCtx, cancel = context.WithCancel(context.Background())
	h.cleanups = append(h.cleanups, cancel)
	defer h.close()
	if err := h.target(); err != nil {
		t.Fatal(err)
	}
	if err := h.preflight(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.embeddedRouter(); err != nil {
		t.Fatal(err)
	}
	if err := h.rc.SetAffinity(ctx, true); err != nil { // variant 1
		t.Fatal(err)
	}
	body := `{"model":"` + servedModel(t, h.rc.BaseURL) + `","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequest(http.MethodPost, h.rc.BaseURL+wire.PathChatCompletions, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderClaudeSession, "s1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("turn through the router: status %d", resp.StatusCode)
	}
	if served, sessions := routerCounts(t, h.adminURL); served != 1 || sessions != 1 {
		t.Fatalf("after one turn: served %d, sessions %d; want 1 and 1", served, sessions)
	}
	if err := h.rc.SetAffinity(ctx, false); err != nil { // variant 2
		t.Fatal(err)
	}
	if served, sessions := routerCounts(t, h.adminURL); served != 0 || sessions != 0 {
		t.Errorf("next variant's router: served %d, sessions %d; want 0 and 0 (a fresh router)", served, sessions)
	}
}

// servedModel asks base for its first model.
func servedModel(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + wire.PathModels)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) == 0 {
		t.Fatalf("GET /v1/models: %v (%d models)", err, len(m.Data))
	}
	return m.Data[0].ID
}

// routerCounts reads the router's /status: requests served and sessions homed,
// summed over models and replicas.
func routerCounts(t *testing.T, admin string) (served uint64, sessions int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, admin+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+DefaultAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st routerhttp.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Models {
		sessions += m.Sessions
		for _, r := range m.Replicas {
			served += r.ServedTotal
		}
	}
	return served, sessions
}
