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

// ListenAndServe serves Handler on cfg.Listen and AdminHandler on cfg.AdminListen
// (when not "-"), and runs the background loops, until ctx ends; then it shuts the
// servers down, letting requests in flight finish for up to grace. The servers
// have a read-header timeout only: no read, write or idle timeout may cut a live
// stream.
func (rt *Router) ListenAndServe(ctx context.Context, grace time.Duration) error {
	srvs := []*http.Server{{Addr: rt.cfg.Listen, Handler: rt.Handler()}}
	if rt.cfg.AdminListen != "-" {
		srvs = append(srvs, &http.Server{Addr: rt.cfg.AdminListen, Handler: rt.AdminHandler()})
	}
	var lns []net.Listener
	for _, s := range srvs {
		s.ReadHeaderTimeout = 30 * time.Second
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("listening on %s: %w", s.Addr, err)
		}
		lns = append(lns, ln)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(srvs)+1)
	var wg sync.WaitGroup
	rt.logSettings()
	wg.Go(func() { rt.Run(ctx) })
	for i, s := range srvs {
		rt.log.Info("router listening", "listener", []string{"api", "admin"}[i], "addr", lns[i].Addr().String())
		wg.Go(func() {
			if err := s.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving %s: %w", s.Addr, err)
				cancel()
			}
		})
	}
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), grace)
	defer scancel()
	for _, s := range srvs {
		if s.Shutdown(sctx) != nil {
			s.Close() // grace over: cut what is left
		}
	}
	wg.Wait()
	close(errc)
	return <-errc
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
