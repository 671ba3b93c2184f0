package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// The pinning check over a simulated DP server: a server that reads
// X-data-parallel-rank is "honored"; one that ignores it (IgnoreRankHeader, vLLM's
// balancer placing every request, the answers still 200) is "ignored", and the
// detail names the rank and where the probes ran.
func TestDPPinningCheckOverSimulator(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 1, DataParallelSize: 4, Speed: 20, ReplyTokens: 4, IgnoreRankHeader: ignore})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		got := routerhttp.CheckDPPinning(ctx, nil, cl.URLs()[0], "", 4)
		// dp_ranks larger than the server's DP size: refused before any probe.
		if wrong := routerhttp.CheckDPPinning(ctx, nil, cl.URLs()[0], "", 8); wrong.Verdict != routerhttp.PinRankMismatch {
			t.Errorf("dp_ranks 8 on a 4-rank server: %q (%s), want rank-mismatch", wrong.Verdict, wrong.Detail)
		}
		cl.Close()
		cancel()
		want := routerhttp.PinHonored
		if ignore {
			want = routerhttp.PinIgnored
		}
		if got.Verdict != want {
			t.Errorf("ignore header %v: verdict %q (%s), want %q", ignore, got.Verdict, got.Detail, want)
		}
		if ignore && !strings.Contains(got.Detail, "pinned to rank 3") {
			t.Errorf("detail does not name the first rank probed: %s", got.Detail)
		}
		t.Logf("ignore header %v: %s: %s", ignore, got.Verdict, got.Detail)
	}
}

// The router checks pinning itself at start: on a DP server that ignores the
// header, every rank's /status carries the "ignored" verdict, the replica card
// warns, and the log has an error naming the URL; with skip_pinning_check the
// probes are never sent and /status says "skipped".
func TestRouterChecksPinningAtStart(t *testing.T) {
	for _, skip := range []bool{false, true} {
		f := startPinFleet(t, simhttp.Config{Replicas: 1, DataParallelSize: 4, Speed: 20, ReplyTokens: 4, IgnoreRankHeader: true}, 4,
			func(c *routerhttp.Config) { c.SkipPinningCheck = skip })
		rt, url := f.rt, f.sim.URLs()[0]
		if !skip {
			f.verdict()
			for _, r := range rt.Status().Models[0].Replicas {
				if r.DPPinning == nil || r.DPPinning.Verdict != routerhttp.PinIgnored {
					t.Errorf("replica %s: dp_pinning %+v, want ignored", r.Name, r.DPPinning)
				}
			}
			// The replica card warns, naming the ranks but not the URL.
			var card bytes.Buffer
			if err := routerhttp.RenderCard(&card, rt.Card(), 0); err != nil {
				t.Fatal(err)
			}
			if c := card.String(); !strings.Contains(c, `data-pinning="ignored"`) || !strings.Contains(c, "r0/rank3") || strings.Contains(c, url) {
				t.Errorf("card: no pinning warning with the ranks' names, or the URL shown:\n%s", c)
			}
			if s := f.logs.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "DP pinning check") || !strings.Contains(s, url) {
				t.Errorf("no error logged for the ignored header:\n%s", s)
			}
			continue
		}
		// Wait until the router has scraped the server (the scrape loop starts
		// with the probes' goroutine), then check no request was finished.
		for deadline := time.Now().Add(10 * time.Second); rt.Status().Models[0].Replicas[0].KVCapacityTokens == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no scrape within 10 s")
			}
		}
		time.Sleep(200 * time.Millisecond)
		var finished int64
		for _, e := range f.sim.Engines() {
			st := e.Stats()
			finished += st.RequestsFinished + st.PromptTokens
		}
		if p := rt.Status().Models[0].Replicas[0].DPPinning; finished != 0 || p == nil || p.Verdict != routerhttp.PinSkipped {
			t.Errorf("skip_pinning_check: %d requests finished on the server, dp_pinning %+v", finished, p)
		}
	}
}

// pinFleet is a simulated DP server with a router in front of it (one URL with
// dp_ranks ranks), running until the test ends.
type pinFleet struct {
	sim  *simhttp.Cluster
	rt   *routerhttp.Router
	logs *syncBuffer
}

// startPinFleet starts the simulator (simCfg) and a router over its one URL with
// dp_ranks set, changed by mutate, logging into fleet.logs.
func startPinFleet(t *testing.T, simCfg simhttp.Config, dpRanks int, mutate func(*routerhttp.Config)) *pinFleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := simhttp.Start(ctx, simCfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cfg, err := routerhttp.ConfigForURLs([]string{fmt.Sprintf("%s,dp_ranks=%d", cl.URLs()[0], dpRanks)}, true)
	if err != nil {
		cancel()
		cl.Close()
		t.Fatal(err)
	}
	f := &pinFleet{sim: cl, logs: &syncBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(f.logs, nil))
	cfg.Clock = cl.Clock()
	if mutate != nil {
		mutate(&cfg)
	}
	if f.rt, err = routerhttp.New(cfg); err != nil {
		cancel()
		cl.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); f.rt.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return f
}

// verdict waits (up to 10 s) for the pinning check to end and returns the
// first replica's dp_pinning (nil, or still pending, when it did not end).
func (f *pinFleet) verdict() *routerhttp.PinCheck {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p := f.rt.Status().Models[0].Replicas[0].DPPinning
		if (p != nil && p.Verdict != routerhttp.PinPending) || time.Now().After(deadline) {
			return p
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the router's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// dp_ranks larger than the server's DP size: the check says "rank-mismatch" and
// the router keeps the ranks the server does not have out of placement, so
// conversations get answers instead of vLLM's 400 for an out-of-range rank.
func TestRouterKeepsMissingRanksOut(t *testing.T) {
	f := startPinFleet(t, simhttp.Config{Replicas: 1, DataParallelSize: 4, Speed: 20, ReplyTokens: 8}, 8,
		func(c *routerhttp.Config) { c.HealthInterval = 200 * time.Millisecond }) // health checks run after the verdict too
	rt, cl := f.rt, f.sim
	if p := f.verdict(); p == nil || p.Verdict != routerhttp.PinRankMismatch {
		t.Fatalf("dp_pinning %+v, want rank-mismatch", p)
	}
	ctx := context.Background()
	time.Sleep(100 * time.Millisecond) // let a health check run after the verdict
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	for s := range 8 {
		if err := driveSession(ctx, srv.URL, cl.Config().Model, fmt.Sprintf("mismatch-%d", s), false, uint64(s), 2); err != nil {
			t.Fatalf("session %d: %v", s, err)
		}
	}
	for _, r := range rt.Status().Models[0].Replicas {
		if want := *r.Rank < 4; r.Healthy != want || (!want && r.ServedTotal != 0) {
			t.Errorf("replica %s: healthy %v, served %d; want healthy %v", r.Name, r.Healthy, r.ServedTotal, want)
		}
	}
	// The card names the missing ranks only.
	var card bytes.Buffer
	if err := routerhttp.RenderCard(&card, rt.Card(), 0); err != nil {
		t.Fatal(err)
	}
	c := card.String()
	i := strings.Index(c, `data-pinning="rank-mismatch"`)
	if i < 0 {
		t.Fatalf("card has no rank-mismatch warning")
	}
	warning := c[i : i+strings.Index(c[i:], "</div>")]
	if !strings.Contains(warning, "r0/rank4, r0/rank5, r0/rank6, r0/rank7") || strings.Contains(warning, "r0/rank3") {
		t.Errorf("card warning does not name exactly the missing ranks: %s", warning)
	}
}

// A server started with --api-key: the router's pinning probes carry
// Config.APIKey, so the check decides ("honored"); without it they get 401
// and the verdict is "unverified", saying so.
func TestRouterPinningCheckWithAPIKey(t *testing.T) {
	for _, key := range []string{"s3cret", ""} {
		f := startPinFleet(t, simhttp.Config{Replicas: 1, DataParallelSize: 2, Speed: 20, ReplyTokens: 4, APIKey: "s3cret"}, 2,
			func(c *routerhttp.Config) { c.APIKey = key })
		want, detail := routerhttp.PinHonored, "each of 2 ranks"
		if key == "" {
			want, detail = routerhttp.PinUnverified, "status 401"
		}
		if p := f.verdict(); p == nil || p.Verdict != want || !strings.Contains(p.Detail, detail) {
			t.Errorf("key %q: dp_pinning %+v, want %q with %q", key, p, want, detail)
		}
	}
}
