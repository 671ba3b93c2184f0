package routerhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// ListenAndServe listens on cfg.Listen and cfg.AdminListen (when not "-") and
// runs Serve on them until ctx ends and the shutdown is over.
func (rt *Router) ListenAndServe(ctx context.Context) error {
	api, err := net.Listen("tcp", rt.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", rt.cfg.Listen, err)
	}
	var admin net.Listener
	if rt.cfg.AdminListen != "-" {
		if admin, err = net.Listen("tcp", rt.cfg.AdminListen); err != nil {
			api.Close()
			return fmt.Errorf("listening on %s: %w", rt.cfg.AdminListen, err)
		}
	}
	return rt.Serve(ctx, api, admin)
}

// ErrDrainCut is wrapped by Serve's error when requests in flight were cut at
// drain_timeout.
var ErrDrainCut = errors.New("requests in flight cut at drain_timeout")

// cutGrace is how long the handlers of requests cut at drain_timeout get to
// write their error event and return before their connections are closed.
const cutGrace = time.Second

// ShutdownBound is the longest Serve takes from the end of its context (SIGTERM)
// to its return with c's settings (WithDefaults applied): drain_delay, drain_timeout, then cutGrace
// for the API listener's cut requests and cutGrace for the admin listener. A
// supervisor's stop timeout (Kubernetes terminationGracePeriodSeconds less
// the preStop hook, systemd TimeoutStopSec) at least this long never kills a
// drain (deploy/).
func (c Config) ShutdownBound() time.Duration {
	return c.DrainDelay + c.DrainTimeout + 2*cutGrace
}

// Serve serves Handler on api and AdminHandler on admin (nil: none), and runs
// the background loops, until ctx ends; then it shuts down in order
// (drain.go): /ready answers 503 at once while the API listener still serves
// for cfg.DrainDelay; then that listener closes, requests held by admission
// get 503 with Retry-After, and requests in flight get up to cfg.DrainTimeout
// to finish, after which they are cut. The admin listener and the background
// loops (health checks, scrapes, the shared state's heartbeat) run until the
// end, so the drain is watched on /status and routed with shared state. A
// line logs what finished, what was cut and what was refused. The error
// wraps ErrDrainCut when something was cut. The servers have a read-header
// timeout only: no read, write or idle timeout may cut a live stream.
func (rt *Router) Serve(ctx context.Context, api, admin net.Listener) error {
	srvs := []*http.Server{{Handler: rt.Handler()}}
	lns := []net.Listener{api}
	if admin != nil {
		srvs = append(srvs, &http.Server{Handler: rt.AdminHandler()})
		lns = append(lns, admin)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The loops outlive ctx: they end once the servers are done.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	errc := make(chan error, len(srvs))
	var wg, serving sync.WaitGroup
	rt.logSettings()
	wg.Go(func() { rt.Run(runCtx) })
	for i, s := range srvs {
		s.ReadHeaderTimeout = 30 * time.Second
		rt.log.Info("router listening", "listener", []string{"api", "admin"}[i], "addr", lns[i].Addr().String())
		serving.Go(func() {
			if err := s.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving %s: %w", lns[i].Addr(), err)
				cancel()
			}
		})
	}
	<-ctx.Done()
	stats, took := rt.shutdown(srvs[0])
	for _, s := range srvs[1:] {
		sctx, scancel := context.WithTimeout(context.Background(), cutGrace)
		if s.Shutdown(sctx) != nil {
			s.Close()
		}
		scancel()
	}
	serving.Wait()
	stopRun()
	wg.Wait()
	rt.log.Info("router stopped", "finished", stats.Finished, "cut_at_drain_timeout", stats.Cut,
		"held_refused", stats.HeldRefused, "drain_timeout", rt.cfg.DrainTimeout.String(), "took", took.Round(time.Millisecond).String())
	close(errc)
	err := <-errc
	if stats.Cut > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d (drain_timeout %s)", ErrDrainCut, stats.Cut, rt.cfg.DrainTimeout))
	}
	return err
}

// shutdown runs the shutdown of the API server s (Serve) and returns its
// counts and how long it took from its start.
func (rt *Router) shutdown(s *http.Server) (DrainStats, time.Duration) {
	p := rt.proxy
	t0 := time.Now()
	p.BeginDrain()
	// Connection: close on every response from now on, so keep-alive clients
	// come back through the load balancer (net/http Server.SetKeepAlivesEnabled).
	s.SetKeepAlivesEnabled(false)
	rt.log.Info("shutting down: /ready answers 503; still serving for drain_delay", "drain_delay", rt.cfg.DrainDelay.String(), "in_flight", p.InFlight())
	time.Sleep(rt.cfg.DrainDelay)
	dctx, dcancel := context.WithTimeout(context.Background(), rt.cfg.DrainTimeout)
	defer dcancel()
	// The listener closes first (Shutdown runs its OnShutdown functions
	// after closing it), then what is held is refused: a request that reaches
	// the gate after that is refused too.
	inFlight := make(chan int, 1)
	var once sync.Once
	s.RegisterOnShutdown(func() { once.Do(func() { inFlight <- p.StopHolding() }) })
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(dctx) }()
	rt.log.Info("shutting down: listener closed; requests in flight finish within drain_timeout", "in_flight", <-inFlight, "drain_timeout", rt.cfg.DrainTimeout.String())
	if err := <-done; errors.Is(err, context.DeadlineExceeded) {
		cut := p.CutInFlight()
		rt.log.Warn("drain_timeout reached: cutting the requests still in flight", "cut", cut, "drain_timeout", rt.cfg.DrainTimeout.String())
		cctx, ccancel := context.WithTimeout(context.Background(), cutGrace)
		if s.Shutdown(cctx) != nil {
			s.Close()
		}
		ccancel()
	}
	return p.DrainStats(), time.Since(t0)
}

// BearerTransport returns a RoundTripper that sends every request through base
// (nil: http.DefaultTransport) with "Authorization: Bearer <key>", for a vLLM
// server started with --api-key (Config.APIKey; warden bench --api-key).
func BearerTransport(base http.RoundTripper, key string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return bearerTransport{base: base, value: "Bearer " + key}
}

type bearerTransport struct {
	base  http.RoundTripper
	value string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.value)
	return t.base.RoundTrip(r)
}
