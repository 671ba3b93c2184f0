// Package redisstate is the Redis implementation of router.SharedState: session
// homes, in-flight counts and live working sets shared by every `warden route`
// whose config names the same store (`state: redis://host:port/db`). It is the
// only package that talks to Redis; the pure core (package router) sees the
// interface only.
//
// # Keys (prefix P, default DefaultPrefix; model M)
//
//   - P h:M:<session>  string, the session's home replica key (URL, or URL#rank<k>
//     for a DP rank), followed by " weak" when the router that wrote it back
//     after an outage had placed it during the outage (a home from before the
//     outage replaces it: router.SharedHome.Weak); PX the session TTL. <session> is the first 16 bytes of
//     SHA-256 of the session key in hex, so no session id is stored. Written only
//     by claimScript (first write wins: SET when the key is absent or still holds
//     the value the writer read; with a reservation only where the admission
//     rule finds room), its idle TTL refreshed by PEXPIRE; deleted by
//     forgetScript (a placement whose request the upstream refused, only while
//     the key still holds that placement) and Reset.
//   - P f:M:<router>   hash replica key -> this router's requests in flight; PX
//     KeyTTL, refreshed by every heartbeat, so a router that dies leaves no
//     in-flight count behind after KeyTTL.
//   - P l:M:<router>   hash replica key -> "live tokens" of this router's session
//     table; PX KeyTTL.
//   - P a:M:<router>   hash, only while this router's admission gate is on:
//     "q" -> "<waiting> <oldest wait ms>", and "c:<SessionID hex>" ->
//     "<replica key> <context tokens>" for every conversation it counts
//     (router.Balancer.AdmissionShare); replaced by every heartbeat (admScript),
//     PX KeyTTL.
//   - P d:M            hash replica key -> "move" or "finish": the replicas
//     draining (router.DrainMode; Pool.SetDrain writes it, every heartbeat
//     reads it back and refreshes its TTL, DrainTTL), so every router sees a
//     drain set through any of them; claimScript never picks a draining
//     candidate while another is left.
//   - P r:M            sorted set router id -> expiry (Unix ms); PX KeyTTL. The
//     routers alive are the members whose score is in the future.
//   - P v:M            hash SessionID hex -> "<replica key> <tokens> <expiry
//     Unix ms>": the admission reservations (claimScript), one per new
//     conversation admitted in the last KeyTTL, so a gate that has not yet
//     published a conversation it admitted still counts in every other
//     router's next admission; PX KeyTTL.
//   - P s:M            list of true first turns' cached tokens (S samples, the
//     newest router.AdmissionPrefixSamples), P g:M list of conversation gaps in
//     ms (the newest router.AdmissionIdleSamples), P c:M:<SessionID hex> hash
//     "n" requests in flight over every router, "end" Unix ms of the last end
//     (convScript); PX ConvTTL.
//
// Every key has a TTL: a flood of session ids only adds keys that expire.
//
// # What waits for Redis
//
// The sticky lookup reads the home with server-assisted client-side caching
// (RESP3 CLIENT TRACKING, rueidis DoCache): a known session's home is read from
// local memory, and Redis pushes an invalidation when another router changes it.
// A placement, move or re-home runs claimScript, one round trip. The in-flight
// changes of sticky requests and their ends are published at once by the
// store's goroutine as deltas (flushScript: one round trip per burst of
// changes, which also reads the other routers' counts back), never on a
// request's path; the heartbeat (every Heartbeat) publishes the live sets and
// refreshes every TTL. Every request-path call
// waits at most Timeout; a failure opens the circuit (no request-path call)
// until a heartbeat succeeds and CircuitOpen has passed, and the router routes
// from its own view meanwhile. The first heartbeat after an outage rewrites the
// router's in-flight hash from its exact local counts.
package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/lmwarden/warden/router"
)

// Defaults of Options.
const (
	DefaultPrefix = "warden:"
	// DefaultTimeout bounds every call to Redis (wall time): the most a request
	// waits for a hung Redis before it is routed from the local view.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultHeartbeat is how often each router publishes its live counts,
	// refreshes its keys' TTLs and reads the others' counts when it has no
	// in-flight change of its own to publish (those go at once: Store.Run).
	DefaultHeartbeat = 100 * time.Millisecond
	// DefaultKeyTTL is the TTL of a router's own keys (in-flight, live,
	// registration): a dead router's counts vanish after it.
	DefaultKeyTTL = 2 * time.Second
	// DefaultCircuitOpen is the least time request-path calls stay off after a
	// failure (then they resume once a heartbeat succeeds).
	DefaultCircuitOpen = 500 * time.Millisecond
	// ConvTTL is the TTL of a conversation's gap record and of the S and gap
	// lists: a gap longer than it is not measured (the idle window is capped
	// at the live window, minutes at most).
	ConvTTL = 10 * time.Minute
	// weakSuffix ends a home's value when the router that wrote it placed it
	// while Redis did not answer (router.SharedHome.Weak).
	weakSuffix = " weak"
	// maxEvents bounds the conversation events queued while Redis does not
	// answer (the oldest are dropped).
	maxEvents = 4096
)

// Options configures a Store. Zero values take the defaults above.
type Options struct {
	// URL: redis://[user:password@]host:port/db, or rediss:// for TLS.
	URL string
	// Prefix of every key (DefaultPrefix).
	Prefix string
	// RouterID names this router in the store; default a random 8-byte hex id,
	// new at every start.
	RouterID    string
	Timeout     time.Duration
	Heartbeat   time.Duration
	KeyTTL      time.Duration
	CircuitOpen time.Duration
	// SessionTTL is the idle TTL of a home (router.DefaultSessionTTL). A home's
	// TTL is refreshed when less than SessionTTL - SessionTTL/60 is left, so at
	// most one write per session per 1/60 of the TTL (one a minute at 1 h) and
	// the effective idle TTL is between 59/60 and 1 times SessionTTL.
	SessionTTL time.Duration
	// ClockSpeed is the router's clock in seconds per wall second (a scaled
	// simulator clock; 0 means 1): Redis measures gaps in wall time, the
	// Balancer's idle window is on its clock.
	ClockSpeed float64
	Logger     *slog.Logger // nil: slog.Default()
	// ClientOption, when set, is applied to the rueidis options after the URL
	// (tests).
	ClientOption func(*rueidis.ClientOption)
}

// Store is one router's connection to the shared state: one rueidis client
// (connected lazily, so a router starts while Redis is down), the circuit and
// the heartbeat over every model's Pool. Safe for concurrent use.
type Store struct {
	opt  Options
	copt rueidis.ClientOption
	log  *slog.Logger

	cmu    sync.Mutex // serializes connecting
	client atomic.Pointer[rueidis.Client]

	pmu   sync.Mutex
	pools []*Pool

	// openUntil: request-path calls are off before this instant (Unix ns);
	// down: the last call failed (logged once per outage).
	openUntil atomic.Int64
	down      atomic.Bool
	// synced: the router's in-flight hashes hold its exact counts; cleared by a
	// failure, set by the heartbeat's rewrite. Claims run only while it is set.
	synced atomic.Bool
	// claims counts claims in flight: the rewrite waits for none.
	claims atomic.Int64

	errs, fallbacks, outages atomic.Uint64
	lastErr                  atomic.Value // string: the last failure, "op: error"

	refresh chan string // home keys whose TTL to refresh
	// kick wakes Run to publish in-flight changes now (Pool.count); one slot,
	// so a burst of changes is one flush.
	kick chan struct{}
}

// Open checks o and returns a Store; it does not connect (Run does, and keeps
// trying). Errors: an empty or malformed URL, a scheme other than redis or
// rediss.
func Open(o Options) (*Store, error) {
	if o.URL == "" {
		return nil, errors.New("state: a redis:// or rediss:// URL is required")
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("state: parsing %q: %w", Redact(o.URL), err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("state: %q: scheme must be redis or rediss", Redact(o.URL))
	}
	copt, err := rueidis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("state: parsing %q: %w", Redact(o.URL), err)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.RouterID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.RouterID = hex.EncodeToString(b[:])
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.KeyTTL <= 0 {
		o.KeyTTL = DefaultKeyTTL
	}
	if o.CircuitOpen <= 0 {
		o.CircuitOpen = DefaultCircuitOpen
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = router.DefaultSessionTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ClockSpeed <= 0 {
		o.ClockSpeed = 1
	}
	// One connection, so commands run in Redis in the order they were sent (a
	// rewrite after an outage runs after every command queued before it), no
	// retries (a retry would exceed the timeout), a dial bounded like a call.
	copt.PipelineMultiplex = -1
	copt.DisableRetry = true
	copt.Dialer.Timeout = max(o.Timeout, 200*time.Millisecond)
	copt.ConnWriteTimeout = max(10*o.Timeout, time.Second)
	copt.CacheSizeEachConn = 16 << 20
	if o.ClientOption != nil {
		o.ClientOption(&copt)
	}
	return &Store{opt: o, copt: copt, log: o.Logger, refresh: make(chan string, 1024), kick: make(chan struct{}, 1)}, nil
}

// Redact returns u with any password replaced by "xxx", for logs and errors.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	if _, ok := p.User.Password(); ok {
		p.User = url.UserPassword(p.User.Username(), "xxx")
	}
	return p.String()
}

// beatTimeout bounds one heartbeat: off the request path, so ten request
// timeouts, which a loaded host's scheduling noise does not reach (a heartbeat
// that times out stops the claims until the next one succeeds).
func (s *Store) beatTimeout() time.Duration { return 10 * s.opt.Timeout }

// RouterID returns this router's id in the store.
func (s *Store) RouterID() string { return s.opt.RouterID }

// Timeout returns the bound of one call to Redis.
func (s *Store) Timeout() time.Duration { return s.opt.Timeout }

// Up reports whether the last call to Redis succeeded.
func (s *Store) Up() bool { return !s.down.Load() && s.client.Load() != nil }

// Errors returns the number of failed calls to Redis; Fallbacks the number of
// requests routed from the local view because the store could not answer (a
// failed call or an open circuit); Outages the number of times the store went
// from up to down.
func (s *Store) Errors() uint64    { return s.errs.Load() }
func (s *Store) Fallbacks() uint64 { return s.fallbacks.Load() }
func (s *Store) Outages() uint64   { return s.outages.Load() }

// LastError returns the last failed call as "op: error" ("" none).
func (s *Store) LastError() string {
	v, _ := s.lastErr.Load().(string)
	return v
}

// Pool returns the shared state of one model, whose replicas have the given
// keys (ReplicaKey, in Balancer order). live reads the model's local live
// working sets (router.Balancer.LiveSets) for the heartbeat; nil publishes none.
func (s *Store) Pool(model string, keys []string, live func() []router.LiveSet) *Pool {
	p := &Pool{s: s, model: model, live: live}
	pre := s.opt.Prefix
	p.homePrefix = pre + "h:" + model + ":"
	p.flightPrefix = pre + "f:" + model + ":"
	p.livePrefix = pre + "l:" + model + ":"
	p.flightKey = p.flightPrefix + s.opt.RouterID
	p.liveKey = p.livePrefix + s.opt.RouterID
	p.admPrefix = pre + "a:" + model + ":"
	p.admKey = p.admPrefix + s.opt.RouterID
	p.regKey = pre + "r:" + model
	p.resKey = pre + "v:" + model
	p.prefixKey = pre + "s:" + model
	p.gapKey = pre + "g:" + model
	p.convPrefix = pre + "c:" + model + ":"
	p.drainKey = pre + "d:" + model
	p.drain = drainState{read: map[string]router.DrainMode{}, pending: map[string]router.DrainMode{}}
	p.setKeys(keys)
	s.pmu.Lock()
	s.pools = append(s.pools, p)
	s.pmu.Unlock()
	return p
}

// ReplicaKey is a replica's key in the store: its URL without a trailing slash,
// and "#rank<k>" for DP rank k (rank < 0: none). Routers with differently
// ordered configs agree on it.
func ReplicaKey(u string, rank int) string {
	u = strings.TrimRight(u, "/")
	if rank < 0 {
		return u
	}
	return u + "#rank" + strconv.Itoa(rank)
}

// available reports whether a request-path call may be tried now, and counts a
// fallback when not.
func (s *Store) available() (rueidis.Client, bool) {
	c := s.client.Load()
	if c == nil || time.Now().UnixNano() < s.openUntil.Load() || s.down.Load() {
		s.fallbacks.Add(1)
		return nil, false
	}
	return *c, true
}

// fail records a failed call: the circuit opens, the rewrite is due, and the
// first failure of an outage is logged.
func (s *Store) fail(what string, err error) {
	s.errs.Add(1)
	s.lastErr.Store(what + ": " + err.Error())
	s.openUntil.Store(time.Now().Add(s.opt.CircuitOpen).UnixNano())
	s.synced.Store(false)
	if !s.down.Swap(true) {
		s.outages.Add(1)
		s.log.Warn("shared state unreachable: routing from this router's own view until it answers",
			"state", Redact(s.opt.URL), "op", what, "err", err, "timeout", s.opt.Timeout)
	}
}

// recovered records a successful heartbeat after failures.
func (s *Store) recovered() {
	if s.down.Swap(false) {
		s.log.Info("shared state reachable again", "state", Redact(s.opt.URL))
	}
}

// connect makes the client if there is none (heartbeat goroutine only).
func (s *Store) connect() (rueidis.Client, error) {
	if c := s.client.Load(); c != nil {
		return *c, nil
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if c := s.client.Load(); c != nil {
		return *c, nil
	}
	c, err := rueidis.NewClient(s.copt)
	if err != nil {
		return nil, err
	}
	s.client.Store(&c)
	return c, nil
}

// Pool is one model's shared state: router.SharedState over a Store.
type Pool struct {
	s     *Store
	model string
	live  func() []router.LiveSet

	homePrefix, flightPrefix, livePrefix, admPrefix string
	flightKey, liveKey, regKey, admKey              string
	resKey, prefixKey, gapKey, convPrefix           string

	// emu guards events: conversation events (convScript pairs) not yet
	// published.
	emu    sync.Mutex
	events []string

	// adm reads the model's admission gate (router.Balancer.AdmissionShare)
	// for the heartbeat (nil: none); admOn: the last beat published one.
	adm       atomic.Pointer[func() router.AdmissionShare]
	admOn     bool
	remoteAdm atomic.Pointer[remoteAdm]

	kmu   sync.RWMutex
	keys  []string       // replica keys by index
	index map[string]int // replica key -> index

	// Local counts by replica (guarded by cmu): this router's exact in-flight
	// count, and the change not yet published.
	cmu     sync.Mutex
	local   []int64
	pending []int64

	remote atomic.Pointer[[]router.RemoteLoad]

	// dmu guards drain and serializes the drain hash's writes and reads
	// (drain.go); drains is what Drain reads, by replica index.
	dmu      sync.Mutex
	drain    drainState
	drains   atomic.Pointer[[]router.DrainMode]
	drainKey string
}

var _ router.SharedState = (*Pool)(nil)

func (p *Pool) setKeys(keys []string) {
	p.kmu.Lock()
	defer p.kmu.Unlock()
	p.keys = append([]string(nil), keys...)
	p.index = make(map[string]int, len(keys))
	for i, k := range keys {
		p.index[k] = i
	}
	p.cmu.Lock()
	for len(p.local) < len(keys) {
		p.local = append(p.local, 0)
		p.pending = append(p.pending, 0)
	}
	p.cmu.Unlock()
}

// AddReplica appends a replica's key (router.Balancer.AddReplica's index order).
func (p *Pool) AddReplica(key string) {
	p.kmu.RLock()
	keys := append(p.keys[:len(p.keys):len(p.keys)], key)
	p.kmu.RUnlock()
	p.setKeys(keys)
	p.dmu.Lock()
	p.publishDrains()
	p.dmu.Unlock()
}

func (p *Pool) key(i int) string {
	p.kmu.RLock()
	defer p.kmu.RUnlock()
	if i < 0 || i >= len(p.keys) {
		return ""
	}
	return p.keys[i]
}

func (p *Pool) lookup(k string) int {
	p.kmu.RLock()
	defer p.kmu.RUnlock()
	if i, ok := p.index[k]; ok {
		return i
	}
	return -1
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// lazyTimeout is a context with a deadline whose timer starts only when
// something asks for Done: Home's read is a local cache hit almost always,
// and rueidis answers a hit without looking at the context (pipe.DoCache:
// cache.Flight), so context.WithTimeout's timer, cancelCtx and channel were
// made and stopped for nothing on every sticky decision (3-4 of its 8-9
// allocations and about 0.3 us, BenchmarkStickyDecision sticky-redis). A miss
// waits on Done as before and ends at the same deadline.
type lazyTimeout struct {
	deadline time.Time
	mu       sync.Mutex
	done     chan struct{}
	timer    *time.Timer
	err      error
}

// newLazyTimeout returns a context that ends d from now; call its cancel when
// done, as with context.WithTimeout.
func newLazyTimeout(d time.Duration) *lazyTimeout {
	return &lazyTimeout{deadline: time.Now().Add(d)}
}

func (c *lazyTimeout) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *lazyTimeout) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else {
			c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
		}
	}
	return c.done
}

func (c *lazyTimeout) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
	return c.err
}

func (c *lazyTimeout) Value(any) any { return nil }

func (c *lazyTimeout) cancel() { c.end(context.Canceled) }

func (c *lazyTimeout) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(err)
}

func (c *lazyTimeout) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.done != nil {
		close(c.done)
	}
}
