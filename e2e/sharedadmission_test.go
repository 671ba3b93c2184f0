package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Two routers on one Redis with admission on (the admission queue's decisions
// shared): two long conversations admitted through a fill both
// replicas' KV caches (39,392 tokens each; ~30k-token prompts), so a new
// conversation through b, which routed neither, waits until they end
// (X-Warden-Admission: held). Without the exchange b would admit it at once.
func TestTwoRoutersShareAdmission(t *testing.T) {
	rs := testredis.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 2, Speed: 20, DevMode: true, MaxNumSeqs: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	hc := &http.Client{Timeout: 60 * time.Second}
	model, err := engineapi.FirstModel(ctx, hc, cl.URLs()[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startSharedRouter(t, cl, rs.URL(), "127.0.0.1:0")
	b := startSharedRouter(t, cl, rs.URL(), "127.0.0.1:0")
	for _, r := range []*sharedRouter{a, b} {
		if !waitFor(10*time.Second, func() bool {
			for _, rep := range r.rt.Status().Models[0].Replicas {
				if rep.KVCapacityTokens <= 0 {
					return false
				}
			}
			return stateUp(t, hc, r.url())
		}) {
			t.Fatalf("%s: KV capacities not learned or state not up", r.url())
		}
		if err := r.rt.Pools()[0].Balancer.SetAdmission(router.AdmissionConfig{Mode: router.AdmissionFit, MaxHold: -1}); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("word ", 24_000) // ~120 KB: ~30k tokens at the router's 4 bytes per token
	post := func(base, session string, maxTokens int, stream bool) (*http.Response, error) {
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, model, stream, maxTokens, session+" "+long)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", session)
		return hc.Do(req)
	}
	// Two long streams through a: admitted, one per replica, in flight.
	var wg sync.WaitGroup
	for i := range 2 {
		resp, err := post(a.url(), fmt.Sprint("long-", i), 1500, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get(wire.HeaderAdmission); resp.StatusCode != 200 || got != "admitted" {
			t.Fatalf("long-%d through a: %d, admission %q", i, resp.StatusCode, got)
		}
		wg.Go(func() { io.Copy(io.Discard, resp.Body); resp.Body.Close() })
	}
	if !waitFor(3*time.Second, func() bool { return b.rt.Pools()[0].Balancer.Admission().RemoteConversations == 2 }) {
		t.Fatalf("b never saw a's conversations: %+v", b.rt.Pools()[0].Balancer.Admission())
	}
	// b's card says what the other router counts.
	if cr, err := hc.Get(b.url() + "/status/card"); err != nil {
		t.Error(err)
	} else {
		page, _ := io.ReadAll(cr.Body)
		cr.Body.Close()
		if !strings.Contains(string(page), "Other routers (shared state): <b>2</b> conversations") {
			t.Errorf("b's card does not show a's two conversations (status %d)", cr.StatusCode)
		}
	}
	resp, err := post(b.url(), "new", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	wg.Wait()
	adm, held := resp.Header.Get(wire.HeaderAdmission), resp.Header.Get(wire.HeaderHeldMs)
	t.Logf("new through b: %d, admission %q, held %s ms", resp.StatusCode, adm, held)
	if resp.StatusCode != 200 || adm != "held" || held == "0" {
		t.Errorf("a new conversation through b while a's fill every replica: admission %q held %s ms, want held", adm, held)
	}
}
