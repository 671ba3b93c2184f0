package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Regression: with state: the card's Conversations columns showed only this
// router's sessions although its legend says they are what the policies decide
// on (with shared state, the larger of this router's and the other routers'
// live sets). Four conversations through a: b's card shows them, marked as
// another router's.
func TestSharedStateCardShowsWhatPoliciesDecideOn(t *testing.T) {
	rs := testredis.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 2, Speed: 20, DevMode: true, MaxNumSeqs: 32})
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
		if !waitFor(10*time.Second, func() bool { return stateUp(t, hc, r.url()) }) {
			t.Fatalf("%s: state not up", r.url())
		}
	}
	for i := range 4 {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"conversation %d"}]}`, model, i)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", fmt.Sprint("conv-", i))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("conv-%d: %d", i, resp.StatusCode)
		}
	}
	decided := func() int {
		n := 0
		for _, rep := range b.rt.Status().Models[0].Replicas {
			live, _ := rep.DecidedLive()
			n += live
		}
		return n
	}
	if !waitFor(5*time.Second, func() bool { return decided() == 4 }) {
		t.Fatalf("b's status: %d live conversations decided on, want a's 4", decided())
	}
	resp, err := hc.Get(b.url() + "/status/card")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	n := 0
	for _, m := range regexp.MustCompile(`data-conversations="(\d+)"`).FindAllStringSubmatch(string(page), -1) {
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	if n != 4 || !strings.Contains(string(page), `data-shared="true"`) {
		t.Errorf("b's card rows count %d live conversations (want a's 4, marked as another router's)", n)
	}
}
