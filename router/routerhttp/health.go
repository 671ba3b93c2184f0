package routerhttp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// ejectProbeInterval is how often the router looks for ejected replicas whose
// ejection time is over (simulated time).
const ejectProbeInterval = time.Second

// probeEjected sends each ejected replica whose ejection time is over
// (Balancer.DueProbes) one probe, a one-token chat completion of the pool's
// model (for a pool serving any model, the latest one a client asked for),
// pinned to its DP rank, with api_key: a 200 returns the replica to placement,
// anything else keeps it ejected for the next step of backoff. Its /health is
// no help here: the replica was ejected while it answered 200.
func (rt *Router) probeEjected(ctx context.Context) {
	for _, pool := range rt.proxy.Pools() {
		for _, i := range pool.Balancer.DueProbes() {
			up := pool.Upstream(i)
			hc := &http.Client{Transport: rt.client.Transport, Timeout: pinProbeTimeout}
			if k := rt.cfg.APIKey; k != "" {
				hc.Transport = BearerTransport(rt.client.Transport, k)
			}
			err := chatProbe(ctx, hc, up.URL.String(), pool.probeModel(), up.Rank, "warden ejection probe: reply with one word.")
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				pool.Balancer.EndProbe(i, true, "")
				rt.log.Info("replica returned: its probe succeeded", "model", pool.Model, "replica", up.Name)
				continue
			}
			if e, ok := pool.Balancer.EndProbe(i, false, "probe: "+err.Error()); ok {
				rt.proxy.logEjection(pool, e)
			}
		}
	}
}

func (rt *Router) get(ctx context.Context, t *target, path string) (*http.Response, error) {
	u := *t.url
	u.Path = singleJoin(u.Path, path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	return rt.client.Do(req)
}

func singleJoin(a, b string) string {
	switch {
	case a == "" || a == "/":
		return b
	case a[len(a)-1] == '/':
		return a + b[1:]
	}
	return a + b
}

func (rt *Router) checkHealth(ctx context.Context, t *target) {
	ok := false
	resp, err := rt.get(ctx, t, wire.PathHealth)
	if err == nil {
		ok = resp.StatusCode == http.StatusOK
		if !ok {
			err = fmt.Errorf("GET /health: status %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	changed := t.healthy != ok
	t.healthy = ok
	if changed && ok {
		t.propsAt = time.Time{} // a recovered server may have restarted with other settings
	}
	have := len(t.replicas) - t.missing
	t.mu.Unlock()
	for k, i := range t.replicas {
		t.pool.Balancer.SetHealthy(i, ok && k < have)
	}
	if !ok {
		// A hung replica keeps its connections open: without this, requests
		// already sent to it would wait for the client's own timeout.
		if n := rt.proxy.AbortSilent(t.pool, t.replicas, rt.silentAbort); n > 0 {
			rt.log.Warn("ended requests on a replica that failed its health check", "model", t.pool.Model,
				"url", t.url.String(), "requests", n, "silent_for", rt.silentAbort)
		}
	}
	if changed {
		lvl := slog.LevelInfo
		if !ok {
			lvl = slog.LevelWarn
		}
		rt.log.Log(ctx, lvl, "upstream health changed", "model", t.pool.Model, "url", t.url.String(), "healthy", ok, "err", err)
	}
}
