package routerhttp

import (
	"fmt"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp/redisstate"
)

// Shared-state metric names (`state:` set; docs/router.md "Several routers").
const (
	MetricStateUp        = "warden_state_up"              // gauge: 1 while the last call to the store succeeded
	MetricStateErrors    = "warden_state_errors_total"    // counter: failed calls (timeouts included)
	MetricStateFallbacks = "warden_state_fallbacks_total" // counter: decisions made from the local view alone
	MetricStateOutages   = "warden_state_outages_total"   // counter: up -> down transitions (each logged once)
)

// checkStateURL is Validate's check of `state:`: a redis:// or rediss:// URL
// with a host.
func checkStateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("scheme %q: want redis or rediss", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("no host")
	}
	return nil
}

// openState builds the shared store of cfg (nil without `state:`).
func openState(cfg Config) (*redisstate.Store, error) {
	if cfg.State == "" {
		return nil, nil
	}
	st, err := redisstate.Open(redisstate.Options{
		URL: cfg.State, Prefix: cfg.StatePrefix, Timeout: cfg.StateTimeout,
		SessionTTL: cfg.SessionTTL, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("router config: %w", err)
	}
	return st, nil
}

// statePool is the store's view of one pool, keyed by URL and DP rank.
func statePool(st *redisstate.Store, pool *Pool) *redisstate.Pool {
	var keys []string
	for _, up := range pool.Upstreams {
		keys = append(keys, redisstate.ReplicaKey(up.URL.String(), up.Rank))
	}
	// pool.Balancer is set after this call: read it at each heartbeat.
	return st.Pool(pool.Model, keys, func() []router.LiveSet { return pool.Balancer.LiveSets() })
}

// registerStateMetrics adds the store's gauges and counters to m.
func registerStateMetrics(m *Metrics, st *redisstate.Store) {
	up := func() float64 {
		if st.Up() {
			return 1
		}
		return 0
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricStateUp, Help: "1 while the shared state store (state:) answers, 0 while the router routes from its own view."}, up),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricStateErrors, Help: "Calls to the shared state store that failed or timed out."}, func() float64 { return float64(st.Errors()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricStateFallbacks, Help: "Routing steps taken from the local view because the shared state store did not answer."}, func() float64 { return float64(st.Fallbacks()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricStateOutages, Help: "Times the shared state store went from answering to not."}, func() float64 { return float64(st.Outages()) }),
	)
}

// State returns the shared state store (`state:`), nil without one.
func (rt *Router) State() *redisstate.Store { return rt.state }
