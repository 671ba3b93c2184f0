package routerhttp

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/redisstate"
)

// Shared-state metric names (`state:` set; docs/router.md "Several routers").
const (
	MetricStateUp        = "warden_state_up"              // gauge: 1 while the last call to the store succeeded
	MetricStateErrors    = "warden_state_errors_total"    // counter: failed calls (timeouts included)
	MetricStateFallbacks = "warden_state_fallbacks_total" // counter: decisions made from the local view alone
	MetricStateOutages   = "warden_state_outages_total"   // counter: up -> down transitions (each logged once)
	MetricStateWait      = "warden_state_wait_seconds"    // histogram: per request, what wire.HeaderStateMs reports
)

// stateWaitBuckets are MetricStateWait's upper bounds in seconds: a cached read
// (~1 us), a loopback round trip (20-50 us), a distant store, and around the
// default state_timeout (50 ms).
var stateWaitBuckets = []float64{5e-6, 25e-6, 100e-6, 250e-6, 1e-3, 5e-3, 0.02, 0.04, 0.05, 0.06, 0.075, 0.1, 0.25}

// setStateHeader adds wire.HeaderStateMs to a routed call's response when the
// pool shares state.
func (c *call) setStateHeader(h http.Header) {
	if c.pool.Balancer.Shared() {
		h.Set(wire.HeaderStateMs, strconv.FormatFloat(float64(c.stateWait)/float64(time.Millisecond), 'f', 3, 64))
	}
}

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
	speed := 1.0
	if sc, ok := cfg.Clock.(*simclock.Scaled); ok && sc.Speed > 0 {
		speed = sc.Speed
	}
	st, err := redisstate.Open(redisstate.Options{
		URL: cfg.State, Prefix: cfg.StatePrefix, Timeout: cfg.StateTimeout,
		SessionTTL: cfg.SessionTTL, Logger: cfg.Logger, ClockSpeed: speed,
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
	sp := st.Pool(pool.Model, keys, func() []router.LiveSet { return pool.Balancer.LiveSets() })
	sp.SetAdmission(func() router.AdmissionShare { return pool.Balancer.AdmissionShare() })
	return sp
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
	m.stateWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricStateWait, Help: "Wall time one request waited on the shared state store (" + wire.HeaderStateMs + "), seconds.",
		Buckets: stateWaitBuckets,
	})
	m.reg.MustRegister(m.stateWait)
}

// observeStateWait records one request's wait on the shared state (nothing
// before registerStateMetrics).
func (m *Metrics) observeStateWait(d time.Duration) {
	if m != nil && m.stateWait != nil {
		m.stateWait.Observe(d.Seconds())
	}
}

// State returns the shared state store (`state:`), nil without one.
func (rt *Router) State() *redisstate.Store { return rt.state }
