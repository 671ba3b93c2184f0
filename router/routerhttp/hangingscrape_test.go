package routerhttp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// docs/router.md failure case 5, the "never block" half: a replica whose /metrics hangs (accepts
// the connection, never answers) does not hold up routing. Requests are placed
// and answered while every scrape of it is still waiting, and the replica is
// not read as loaded or as idle: it has no scrape, so the router's own counts
// decide (ScrapeAgeS < 0).
func TestHangingMetricsNeverBlockRouting(t *testing.T) {
	release := make(chan struct{})
	var scrapesIn, scrapesOut atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			scrapesIn.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			scrapesOut.Add(1)
		case "/health":
			w.WriteHeader(http.StatusOK)
		default:
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
		}
	}))
	defer up.Close()
	defer close(release) // before up.Close: let the hanging handlers return

	cfg, err := ConfigForURLs([]string{"a=" + up.URL}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ScrapeInterval = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for deadline := time.Now().Add(10 * time.Second); scrapesIn.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the router never scraped")
		}
	}
	front := httptest.NewServer(rt.Handler())
	defer front.Close()
	for i := range 5 {
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set(wire.HeaderSessionID, fmt.Sprintf("s%d", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if scrapesOut.Load() != 0 {
			t.Fatalf("a scrape returned before request %d was answered: the test no longer holds /metrics", i)
		}
	}
	st := rt.Status().Models[0].Replicas[0]
	if st.ScrapeAgeS >= 0 || !st.Healthy || st.ServedTotal != 5 {
		t.Errorf("replica after a hanging scrape: scrape age %v, healthy %v, served %d; want never scraped (< 0), healthy, 5", st.ScrapeAgeS, st.Healthy, st.ServedTotal)
	}
}
