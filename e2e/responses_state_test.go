package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// TestResponseContinuationAcrossRouters: two routers share a real redis-server
// (`state:`); simulated vLLM servers keep stored responses per server
// (VLLM_ENABLE_RESPONSES_API_STORE=1). A response produced through router A is
// continued (previous_response_id, no session key) through router B, which never
// saw it: B sends it to the replica that produced it (decision "response") and
// the server finds the response (200, not vLLM's 404).
func TestResponseContinuationAcrossRouters(t *testing.T) {
	rs := testredis.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 4, Speed: 20, ResponsesStore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	hc := &http.Client{Timeout: 30 * time.Second}
	model, err := engineapi.FirstModel(ctx, hc, cl.URLs()[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startSharedRouter(t, cl, rs.URL(), "127.0.0.1:0")
	b := startSharedRouter(t, cl, rs.URL(), "127.0.0.1:0")
	for _, r := range []*sharedRouter{a, b} {
		deadline := time.Now().Add(5 * time.Second)
		for !stateUp(t, hc, r.url()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: shared state not up", r.url())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	post := func(base, body string) (*http.Response, string) {
		t.Helper()
		resp, err := hc.Post(base+wire.PathResponses, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, out := post(a.url(), `{"model":"`+model+`","input":"the first turn of a conversation","max_output_tokens":4}`)
	if resp.StatusCode != 200 {
		t.Fatalf("first turn through A: %d %s", resp.StatusCode, out)
	}
	var first struct{ ID string }
	if err := json.Unmarshal([]byte(out), &first); err != nil || first.ID == "" {
		t.Fatalf("first turn: no id in %s", out)
	}
	producer := resp.Header.Get(wire.HeaderReplica)
	for i := range 3 {
		resp, out = post(b.url(), `{"model":"`+model+`","input":"and then?","max_output_tokens":4,"stream":`+map[bool]string{true: "true", false: "false"}[i%2 == 1]+`,"previous_response_id":"`+first.ID+`"}`)
		if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderReplica) != producer || resp.Header.Get(wire.HeaderDecision) != router.ReasonResponse.String() {
			t.Fatalf("continuation %d through B: %d on %s (%s), want 200 on %s (response): %.300s", i, resp.StatusCode,
				resp.Header.Get(wire.HeaderReplica), resp.Header.Get(wire.HeaderDecision), producer, out)
		}
	}
	t.Logf("%s produced on %s through A; continued on %s through B", first.ID, producer, producer)
}
