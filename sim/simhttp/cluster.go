package simhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

// shutdownGrace bounds how long Close waits for handlers to write their last event
// before it closes the remaining connections.
const shutdownGrace = 5 * time.Second

// Cluster is a set of simulated vLLM servers listening on loopback ports, sharing one
// simulated clock.
type Cluster struct {
	cfg     Config
	clock   *simclock.Scaled
	servers []*Server
	https   []*http.Server
	urls    []string

	wg        sync.WaitGroup // Serve goroutines
	errMu     sync.Mutex
	err       error
	closeOnce sync.Once
	closed    chan struct{}
	watchMu   sync.Mutex
	stopWatch func() bool // unregisters the ctx watch
}

// Start validates cfg, starts cfg.Replicas servers (each with DataParallelSize
// engines) listening on Host at BasePort+i (random ports when BasePort is 0), and
// returns once all are accepting connections. The cluster stops when ctx is done or
// Close is called; Wait blocks until then.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating simulator config: %w", err)
	}
	cfg.fill()
	if cfg.Clock == nil {
		cfg.Clock = simclock.NewScaled(cfg.Speed)
	}
	if cfg.APIServers > 0 && cfg.frontend == nil {
		ecfg, err := cfg.engineConfig()
		if err != nil {
			return nil, err
		}
		cfg.frontend = newFrontend(ecfg.Profile.Frontend, cfg.APIServers)
	}
	c := &Cluster{cfg: cfg, clock: cfg.Clock, closed: make(chan struct{})}
	for i := range cfg.Replicas {
		if err := c.startOne(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.watchMu.Lock()
	c.stopWatch = context.AfterFunc(ctx, c.Close)
	c.watchMu.Unlock()
	return c, nil
}

func (c *Cluster) startOne(i int) error {
	port := 0
	if c.cfg.BasePort > 0 {
		port = c.cfg.BasePort + i
	}
	addr := net.JoinHostPort(c.cfg.Host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s for simulated server %d: %w", addr, i, err)
	}
	srv, err := NewServer(c.cfg, i)
	if err != nil {
		_ = ln.Close()
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second}
	c.servers = append(c.servers, srv)
	c.https = append(c.https, hs)
	c.urls = append(c.urls, "http://"+ln.Addr().String())
	c.wg.Go(func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.errMu.Lock()
			c.err = errors.Join(c.err, fmt.Errorf("serving simulated server %d: %w", i, err))
			c.errMu.Unlock()
		}
	})
	return nil
}

// URLs returns each server's base URL ("http://127.0.0.1:port"), in server order.
func (c *Cluster) URLs() []string { return append([]string(nil), c.urls...) }

// Servers returns the servers in order.
func (c *Cluster) Servers() []*Server { return append([]*Server(nil), c.servers...) }

// Engines returns every engine, server by server and rank by rank within a server
// (Engine.Server and Engine.Rank say which).
func (c *Cluster) Engines() []*Engine {
	var out []*Engine
	for _, s := range c.servers {
		out = append(out, s.engines...)
	}
	return out
}

// Clock returns the cluster's simulated clock.
func (c *Cluster) Clock() *simclock.Scaled { return c.clock }

// Config returns the effective configuration (defaults filled in).
func (c *Cluster) Config() Config { return c.cfg }

// Close stops the engines (requests still in flight end with an error event or a 503),
// shuts the HTTP servers down and waits for every goroutine the cluster started. It is
// safe to call more than once and from several goroutines.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		c.watchMu.Lock()
		if c.stopWatch != nil {
			c.stopWatch()
		}
		c.watchMu.Unlock()
		for _, s := range c.servers {
			s.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		var wg sync.WaitGroup
		for _, hs := range c.https {
			wg.Go(func() {
				if hs.Shutdown(ctx) != nil {
					_ = hs.Close()
				}
			})
		}
		wg.Wait()
		c.wg.Wait()
		close(c.closed)
	})
}

// Wait blocks until the cluster has stopped (ctx done or Close) and returns any error
// a listener failed with.
func (c *Cluster) Wait() error {
	<-c.closed
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}
