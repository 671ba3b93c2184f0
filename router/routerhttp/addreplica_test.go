package routerhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// docs/router.md failure case 8 end to end: a replica added through the admin API while the
// router serves moves no existing session, takes new ones, is listed in /status,
// and gets its health checks and scrapes at once; bad additions are refused with
// what was wrong.
func TestAddingReplicaThroughAdminMovesNoSession(t *testing.T) {
	a, b, c := newStub(t, "a"), newStub(t, "b"), newStub(t, "c")
	f := newFront(t, true, func(cfg *Config) {
		cfg.AdminToken = "tok"
		cfg.HealthInterval, cfg.ScrapeInterval = time.Second, time.Second
	}, a, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.rt.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	admin := httptest.NewServer(f.rt.AdminHandler())
	defer admin.Close()

	homes := map[string]string{}
	for i := range 8 {
		key := "s" + string(rune('0'+i))
		resp, _ := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderClaudeSession: key}, chatBody("m"))
		homes[key] = resp.Header.Get(wire.HeaderReplica)
	}

	code, body := adminDo(t, admin, "POST", "/admin/models/*/replicas", "tok", `{"name":"c","url":"`+c.srv.URL+`"}`)
	if code != http.StatusCreated || !strings.Contains(body, `"c"`) {
		t.Fatalf("add: %d %s", code, body)
	}
	for key, home := range homes {
		resp, _ := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderClaudeSession: key}, chatBody("m"))
		if got := resp.Header.Get(wire.HeaderReplica); got != home || resp.Header.Get(wire.HeaderDecision) != "sticky" {
			t.Errorf("session %s: served by %s (%s) after the addition, want %s (sticky)", key, got, resp.Header.Get(wire.HeaderDecision), home)
		}
	}
	// The new replica holds no session: the next new ones go there first.
	resp, _ := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderClaudeSession: "new"}, chatBody("m"))
	if resp.Header.Get(wire.HeaderReplica) != "c" {
		t.Errorf("a new session went to %s, want the empty new replica c", resp.Header.Get(wire.HeaderReplica))
	}
	st := f.rt.Status().Models[0]
	if len(st.Replicas) != 3 || st.Replicas[2].Name != "c" || st.Replicas[2].URL != c.srv.URL {
		t.Errorf("status replicas %+v", st.Replicas)
	}
	// Its loops started: the stub sees /health and /metrics soon.
	deadline := time.Now().Add(guard)
	for {
		c.mu.Lock()
		var health, metrics bool
		for _, r := range c.reqs {
			health = health || strings.HasPrefix(r.URI, "/health")
			metrics = metrics || strings.HasPrefix(r.URI, "/metrics")
		}
		c.mu.Unlock()
		if health && metrics {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the added replica was never health-checked and scraped")
		}
		time.Sleep(5 * time.Millisecond)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"name":"c","url":"http://127.0.0.1:1"}`, `already used`},
		{`{"name":"d","url":"not a url"}`, `is not an http(s) URL`},
		{`{"url":"http://127.0.0.1:1"}`, `name: required`},
		{`{"name":"d","url":"http://127.0.0.1:1","dp_ranks":-1}`, `dp_ranks`},
		{`{"name":"d","address":"x"}`, `unknown field`},
	} {
		code, body := adminDo(t, admin, "POST", "/admin/models/*/replicas", "tok", tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s: %d %s, want 400 with %q", tc.body, code, body, tc.want)
		}
	}
	if n := len(f.rt.Status().Models[0].Replicas); n != 3 {
		t.Errorf("%d replicas after refused additions, want 3", n)
	}
}
