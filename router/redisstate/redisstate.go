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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
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

// Run drives the heartbeat, the publication of in-flight changes and the TTL
// refreshes until ctx ends; then it publishes the changes not yet published
// (the last requests' ends, conversation events) and closes the client. Nothing
// is deleted: the router's own keys (in-flight, live sets, registration) are
// left to expire (KeyTTL), and session homes, reservations and conversation
// records keep their TTLs for the routers that go on.
//
// An in-flight change (a request sent or ended) is published as soon as Run is
// free, not at the next heartbeat: the other routers add these counts to the
// replicas' load, and a count published once per heartbeat and read once per
// heartbeat was up to two heartbeats old (200 ms) while a claim counts at once.
// Right after a router's turns ended, another counted them still in flight
// beside the next turns of the same conversations (24 requests on 4 replicas
// where 8 ran, in the two-router e2e test), and WorkingSet moved conversations
// for an overflow that was not there.
func (s *Store) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.refresher(ctx)
	}()
	t := time.NewTicker(s.opt.Heartbeat)
	defer t.Stop()
	s.beat(ctx)
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			fctx, cancel := context.WithTimeout(context.Background(), s.beatTimeout())
			s.flush(fctx)
			cancel()
			if c := s.client.Load(); c != nil {
				(*c).Close()
			}
			return
		case <-t.C:
			s.beat(ctx)
		case <-s.kick:
			s.flush(ctx)
		}
	}
}

// beat runs one heartbeat over every pool: the rewrite after an outage when no
// claim is in flight, deltas otherwise.
func (s *Store) beat(ctx context.Context) {
	c, err := s.connect()
	if err != nil {
		s.fail("connect", err)
		return
	}
	abs := !s.synced.Load()
	if abs && s.claims.Load() > 0 {
		return // a claim started before the failure has not returned yet
	}
	s.pmu.Lock()
	pools := append([]*Pool(nil), s.pools...)
	s.pmu.Unlock()
	for _, p := range pools {
		if err := p.beat(ctx, c, abs); err != nil {
			s.fail("heartbeat", err)
			return
		}
	}
	if abs {
		s.synced.Store(true)
	}
	s.recovered()
}

// flush publishes every pool's in-flight changes since the last beat or flush
// and reads the other routers' counts back (flushScript). Only while the store
// is up and in sync: otherwise the heartbeat's rewrite publishes exact counts.
func (s *Store) flush(ctx context.Context) {
	c := s.client.Load()
	if c == nil || s.down.Load() || !s.synced.Load() {
		return
	}
	s.pmu.Lock()
	pools := append([]*Pool(nil), s.pools...)
	s.pmu.Unlock()
	for _, p := range pools {
		if err := p.flush(ctx, *c); err != nil {
			s.fail("publish", err)
			return
		}
	}
}

// refresher sends the PEXPIREs that keep read homes alive.
func (s *Store) refresher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case k := <-s.refresh:
			c, ok := s.available()
			if !ok {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, s.opt.Timeout)
			err := c.Do(cctx, c.B().Pexpire().Key(k).Milliseconds(s.opt.SessionTTL.Milliseconds()).Build()).Error()
			cancel()
			if err != nil && ctx.Err() == nil {
				s.fail("refresh", err)
			}
		}
	}
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

// homeKey is the session's home key: the hex of SHA-256's first 16 bytes.
func (p *Pool) homeKey(session string) string {
	sum := sha256.Sum256([]byte(session))
	return p.homePrefix + hex.EncodeToString(sum[:16])
}

// Home reads the session's home, from the local cache when Redis has not
// invalidated it, and queues a TTL refresh when the home's TTL has run down by
// more than SessionTTL/60.
func (p *Pool) Home(session string) (router.SharedHome, time.Duration, bool) {
	h := router.SharedHome{Replica: -1}
	c, ok := p.s.available()
	if !ok {
		return h, 0, false
	}
	t0 := time.Now()
	k := p.homeKey(session)
	ctx := newLazyTimeout(p.s.opt.Timeout) // no timer unless the read leaves the cache
	defer ctx.cancel()
	// The local copy lives as long as the key (rueidis keeps min(this, the
	// server's PTTL)), so CachePTTL below is the key's remaining TTL.
	res := c.DoCache(ctx, c.B().Get().Key(k).Cache(), p.s.opt.SessionTTL)
	wait := time.Since(t0)
	v, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		return h, wait, true
	}
	if err != nil {
		p.s.fail("home", err)
		p.s.fallbacks.Add(1)
		return h, wait, false
	}
	key, weak := strings.CutSuffix(v, weakSuffix)
	h.Token, h.Replica, h.Weak = v, p.lookup(key), weak
	ttl := p.s.opt.SessionTTL
	if left := res.CachePTTL(); left >= 0 && time.Duration(left)*time.Millisecond < ttl-ttl/60 {
		select {
		case p.s.refresh <- k:
		default: // full: the next read asks again
		}
	}
	return h, wait, true
}

// Claim runs claimScript (see router.SharedState.Claim).
func (p *Pool) Claim(session, expect string, cands []int, pickLeast, weak bool, res *router.Reservation) (router.ClaimResult, time.Duration, bool) {
	s := p.s
	out := router.ClaimResult{Replica: -1}
	c, ok := s.available()
	if !ok || !s.synced.Load() || len(cands) == 0 {
		if ok {
			s.fallbacks.Add(1)
		}
		return out, 0, false
	}
	s.claims.Add(1)
	defer s.claims.Add(-1)
	least := "0"
	if pickLeast {
		least = "1"
	}
	suffix := ""
	if weak {
		suffix = weakSuffix
	}
	args := []string{expect, ms(s.opt.SessionTTL), ms(s.opt.KeyTTL), least, p.flightPrefix, "", suffix}
	var fits []int64
	for k, i := range cands {
		if key := p.key(i); key != "" {
			args = append(args, key)
			if res != nil && k < len(res.Fit) {
				fits = append(fits, res.Fit[k])
			}
		}
	}
	if res != nil {
		args[5] = p.reservationJSON(res, fits)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	arr, err := claimScript.Exec(ctx, c, []string{p.homeKey(session), p.flightKey, p.regKey, p.resKey}, args).ToArray()
	wait := time.Since(t0)
	if err == nil && len(arr) != 3 {
		err = fmt.Errorf("claim script returned %d values", len(arr))
	}
	if err != nil {
		s.fail("claim", err)
		s.fallbacks.Add(1)
		return out, wait, false
	}
	k, _ := arr[0].ToString()
	k = strings.TrimSuffix(k, weakSuffix)
	adopted, _ := arr[1].AsInt64()
	full, _ := arr[2].AsInt64()
	if full == 1 {
		out.Full = true
		return out, wait, true
	}
	i := p.lookup(k)
	if i < 0 {
		// Homed on a replica this router does not have: the script counted
		// the request there, the router will not send it there; the next
		// heartbeat rewrites the hash from the exact local counts.
		s.synced.Store(false)
		return out, wait, false
	}
	out.Replica, out.Adopted = i, adopted == 1
	return out, wait, true
}

// reservationJSON is claimScript's ARGV[6] for res, with fits the candidates'
// room in the order of the replica keys passed.
func (p *Pool) reservationJSON(res *router.Reservation, fits []int64) string {
	type resJSON struct {
		ID    string  `json:"id"`
		Self  string  `json:"self"`
		AP    string  `json:"ap"`
		Tok   int64   `json:"tok"`
		First int64   `json:"first"`
		E     int64   `json:"e"`
		S     int64   `json:"s"`
		M     int64   `json:"m"`
		Force int     `json:"force"`
		Fit   []int64 `json:"fit"`
		Own   [][]any `json:"own"`
	}
	r := resJSON{ID: strconv.FormatUint(res.ID, 16), Self: p.s.opt.RouterID, AP: p.admPrefix, Tok: res.Tokens,
		First: res.First, E: res.Expected, S: res.Shared, M: res.Running, Fit: fits, Own: [][]any{}}
	if res.Force {
		r.Force = 1
	}
	for _, cv := range res.Own {
		if k := p.key(cv.Replica); k != "" {
			r.Own = append(r.Own, []any{strconv.FormatUint(cv.ID, 16), k, cv.Tokens, cv.First})
		}
	}
	b, _ := json.Marshal(r) // plain strings and numbers: cannot fail
	return string(b)
}

// ObserveFirstTurn, Began and Ended queue conversation events for convScript
// (router.SharedState), published with the next flush or heartbeat.
func (p *Pool) ObserveFirstTurn(cached int) { p.event("p", strconv.Itoa(cached)) }
func (p *Pool) Began(id uint64, side bool) {
	kind := "b0"
	if side {
		kind = "b1"
	}
	p.event(kind, strconv.FormatUint(id, 16))
}
func (p *Pool) Ended(id uint64) { p.event("e", strconv.FormatUint(id, 16)) }

func (p *Pool) event(kind, v string) {
	p.emu.Lock()
	if len(p.events) >= 2*maxEvents {
		p.events = append(p.events[:0], p.events[2:]...)
	}
	p.events = append(p.events, kind, v)
	p.emu.Unlock()
	select {
	case p.s.kick <- struct{}{}:
	default:
	}
}

// publishEvents sends the queued conversation events (convScript); on a
// failure they are dropped (a lost sample or gap, never a wrong count that
// lasts: the conversation records expire).
func (p *Pool) publishEvents(ctx context.Context, c rueidis.Client) error {
	p.emu.Lock()
	ev := p.events
	p.events = nil
	p.emu.Unlock()
	if len(ev) == 0 {
		return nil
	}
	args := append([]string{p.convPrefix, ms(ConvTTL), ms(ConvTTL), strconv.Itoa(router.AdmissionPrefixSamples), strconv.Itoa(router.AdmissionIdleSamples)}, ev...)
	return convScript.Exec(ctx, c, []string{p.prefixKey, p.gapKey}, args).Error()
}

// Refresh reads the other routers' in-flight hashes (othersScript; see
// router.SharedState.Refresh), bounded by Timeout like every request-path call.
func (p *Pool) Refresh() (time.Duration, bool) {
	s := p.s
	c, ok := s.available()
	if !ok {
		return 0, false
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	arr, err := othersScript.Exec(ctx, c, []string{p.regKey}, []string{s.opt.RouterID, p.flightPrefix}).ToArray()
	wait := time.Since(t0)
	if err != nil {
		s.fail("refresh in-flight", err)
		s.fallbacks.Add(1)
		return wait, false
	}
	p.storeFlights(arr)
	return wait, true
}

// Forget deletes the session's home if it still holds replica i
// (forgetScript; see router.SharedState.Forget), bounded by Timeout.
func (p *Pool) Forget(session string, i int) (time.Duration, bool) {
	s := p.s
	k := p.key(i)
	c, ok := s.available()
	if !ok || k == "" {
		return 0, false
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	err := forgetScript.Exec(ctx, c, []string{p.homeKey(session)}, []string{k, weakSuffix}).Error()
	wait := time.Since(t0)
	if err != nil {
		s.fail("forget", err)
		return wait, false
	}
	return wait, true
}

// Reset deletes every session home of the pool's model in the store (SCAN and
// UNLINK; an admin operation, bounded by 10 s, not the request timeout). The
// other routers' local tables are not reset: call Reset through each router
// (the benchmark does, before each variant).
func (p *Pool) Reset(ctx context.Context) error {
	c := p.s.client.Load()
	if c == nil {
		return errors.New("shared state: not connected")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		e, err := (*c).Do(ctx, (*c).B().Scan().Cursor(cursor).Match(globEscape(p.homePrefix)+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("shared state: scanning homes: %w", err)
		}
		if len(e.Elements) > 0 {
			if err := (*c).Do(ctx, (*c).B().Unlink().Key(e.Elements...).Build()).Error(); err != nil {
				return fmt.Errorf("shared state: deleting homes: %w", err)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}

// Acquired, Released and Claimed keep the local counts (router.SharedState).
func (p *Pool) Acquired(i int) { p.count(i, 1, 1) }
func (p *Pool) Released(i int) { p.count(i, -1, -1) }
func (p *Pool) Claimed(i int)  { p.count(i, 1, 0) }

func (p *Pool) count(i int, local, pending int64) {
	p.cmu.Lock()
	if i < 0 || i >= len(p.local) {
		p.cmu.Unlock()
		return
	}
	p.local[i] += local
	p.pending[i] += pending
	p.cmu.Unlock()
	select { // a claim publishes nothing but reads the others' counts back
	case p.s.kick <- struct{}{}:
	default: // a flush is due already
	}
}

// takePending returns the in-flight changes not yet published (abs: the exact
// counts instead) and clears them.
func (p *Pool) takePending(n int, abs bool) []int64 {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	vals := make([]int64, n)
	for i := range n {
		if abs {
			vals[i] = p.local[i]
		} else {
			vals[i] = p.pending[i]
		}
		p.pending[i] = 0
	}
	return vals
}

// flush publishes the pool's pending in-flight changes (none after a claim
// alone) and stores the other routers' in-flight counts it reads back, keeping
// their live sets from the last beat.
func (p *Pool) flush(ctx context.Context, c rueidis.Client) error {
	s := p.s
	p.kmu.RLock()
	keys := p.keys
	p.kmu.RUnlock()
	vals := p.takePending(len(keys), false)
	args := []string{s.opt.RouterID, ms(s.opt.KeyTTL), p.flightPrefix}
	for i, k := range keys {
		if vals[i] != 0 {
			args = append(args, k, strconv.FormatInt(vals[i], 10))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.beatTimeout())
	defer cancel()
	arr, err := flushScript.Exec(cctx, c, []string{p.flightKey, p.regKey}, args).ToArray()
	if err != nil {
		return err // as in beat: the rewrite after the failure makes the hash exact
	}
	if len(arr) == 1 {
		if v, _ := arr[0].ToString(); v == "resync" {
			s.synced.Store(false)
			return nil
		}
	}
	p.storeFlights(arr)
	return p.publishEvents(cctx, c)
}

// storeFlights replaces the other routers' in-flight counts by arr (pairs of
// router id and in-flight hash, as flushScript and othersScript return them),
// keeping their live sets from the last beat.
func (p *Pool) storeFlights(arr []rueidis.RedisMessage) {
	p.kmu.RLock()
	n := len(p.keys)
	p.kmu.RUnlock()
	rl := make([]router.RemoteLoad, n)
	if old := p.remote.Load(); old != nil {
		copy(rl, *old)
	}
	for i := range rl {
		rl[i].InFlight = 0
	}
	for j := 0; j+1 < len(arr); j += 2 {
		flights, _ := arr[j+1].ToArray()
		p.addFlights(rl, flights)
	}
	p.remote.Store(&rl)
}

// addFlights adds one router's in-flight hash (HGETALL, flat) to rl.
func (p *Pool) addFlights(rl []router.RemoteLoad, flights []rueidis.RedisMessage) {
	for f := 0; f+1 < len(flights); f += 2 {
		k, _ := flights[f].ToString()
		n, _ := flights[f+1].AsInt64()
		if i := p.lookup(k); i >= 0 && i < len(rl) {
			rl[i].InFlight += int(max(n, 0))
		}
	}
}

// Remote returns the other routers' load on replica i: in-flight counts as of
// this router's last publication or heartbeat, live sets as of its last
// heartbeat.
func (p *Pool) Remote(i int) router.RemoteLoad {
	r := p.remote.Load()
	if r == nil || i < 0 || i >= len(*r) {
		return router.RemoteLoad{}
	}
	return (*r)[i]
}

// beat publishes this router's counts (abs: the exact counts, replacing the
// hash; else the changes since the last beat) and live sets, registers the
// router and reads the others' (beatScript).
func (p *Pool) beat(ctx context.Context, c rueidis.Client, abs bool) error {
	s := p.s
	p.kmu.RLock()
	keys := p.keys
	p.kmu.RUnlock()
	mode := "delta"
	if abs {
		mode = "abs"
	}
	vals := p.takePending(len(keys), abs)
	args := []string{s.opt.RouterID, ms(s.opt.KeyTTL), mode, p.flightPrefix, p.livePrefix, strconv.Itoa(len(keys))}
	for i, k := range keys {
		args = append(args, k, strconv.FormatInt(vals[i], 10))
	}
	if p.live != nil {
		for i, l := range p.live() {
			if i < len(keys) && l.Live > 0 {
				args = append(args, keys[i], strconv.Itoa(l.Live), strconv.FormatInt(l.LiveTokens, 10))
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.beatTimeout())
	defer cancel()
	arr, err := beatScript.Exec(cctx, c, []string{p.flightKey, p.liveKey, p.regKey}, args).ToArray()
	if err != nil {
		// The deltas may or may not have been applied: the rewrite that follows
		// the failure (fail clears synced) makes the hash exact again.
		p.remote.Store(nil)
		return err
	}
	if len(arr) == 1 {
		if v, _ := arr[0].ToString(); v == "resync" {
			s.synced.Store(false) // the hash expired: rewrite it next beat
			return nil
		}
	}
	rl := make([]router.RemoteLoad, len(keys))
	for j := 0; j+2 < len(arr); j += 3 {
		flights, _ := arr[j+1].ToArray()
		p.addFlights(rl, flights)
		lives, _ := arr[j+2].ToArray()
		for f := 0; f+1 < len(lives); f += 2 {
			k, _ := lives[f].ToString()
			v, _ := lives[f+1].ToString()
			live, tokens, _ := strings.Cut(v, " ")
			nl, _ := strconv.Atoi(live)
			nt, _ := strconv.ParseInt(tokens, 10, 64)
			if i := p.lookup(k); i >= 0 && i < len(rl) {
				rl[i].Live = max(rl[i].Live, nl)
				rl[i].LiveTokens = max(rl[i].LiveTokens, nt)
			}
		}
	}
	p.remote.Store(&rl)
	if err := p.publishEvents(cctx, c); err != nil {
		return err
	}
	var others []string
	for j := 0; j+2 < len(arr); j += 3 {
		if id, err := arr[j].ToString(); err == nil {
			others = append(others, id)
		}
	}
	return p.beatAdmission(cctx, c, others)
}

// SetAdmission makes the heartbeat publish the model's admission gate (the
// conversations it counts and its queue, router.Balancer.AdmissionShare) and
// read the other routers' (RemoteAdmission).
func (p *Pool) SetAdmission(share func() router.AdmissionShare) { p.adm.Store(&share) }

// remoteAdm is the other routers' admission gates as last read, and when.
type remoteAdm struct {
	ra   router.RemoteAdmission
	read time.Time
}

// RemoteAdmission returns the other routers' admission gates as of the last
// heartbeat (their waiters' wait advanced by the time since), nil when none
// publishes one or the last heartbeat failed.
func (p *Pool) RemoteAdmission() *router.RemoteAdmission {
	r := p.remoteAdm.Load()
	if r == nil {
		return nil
	}
	ra := r.ra
	if ra.Waiting > 0 {
		ra.OldestHeld += time.Since(r.read)
	}
	return &ra
}

// beatAdmission publishes this router's admission gate (admScript) when it is
// on, or was at the last beat (to clear it), and reads the gates of the other
// routers alive (others).
func (p *Pool) beatAdmission(ctx context.Context, c rueidis.Client, others []string) error {
	f := p.adm.Load()
	if f == nil {
		return nil
	}
	share := (*f)()
	if !share.On && !p.admOn {
		p.remoteAdm.Store(nil)
		return nil
	}
	args := []string{ms(p.s.opt.KeyTTL), p.admPrefix, strconv.Itoa(len(others))}
	args = append(args, others...)
	if share.On {
		args = append(args, "q", strconv.Itoa(share.Waiting)+" "+ms(share.OldestHeld))
		for _, cv := range share.Convs {
			if k := p.key(cv.Replica); k != "" {
				args = append(args, "c:"+strconv.FormatUint(cv.ID, 16), k+" "+strconv.FormatInt(cv.Tokens, 10)+" "+strconv.FormatInt(cv.First, 10))
			}
		}
	}
	arr, err := admScript.Exec(ctx, c, []string{p.admKey, p.prefixKey, p.gapKey}, args).ToArray()
	if err == nil && len(arr) < 2 {
		err = fmt.Errorf("admission script returned %d values", len(arr))
	}
	if err != nil {
		p.remoteAdm.Store(nil)
		return err
	}
	p.admOn = share.On
	if !share.On {
		p.remoteAdm.Store(nil)
		return nil
	}
	ra := router.RemoteAdmission{Convs: map[uint64]router.RemoteConv{}}
	p.learned(&ra, arr[len(arr)-2], arr[len(arr)-1])
	for _, m := range arr[:len(arr)-2] {
		kv, _ := m.ToArray()
		for f := 0; f+1 < len(kv); f += 2 {
			k, _ := kv[f].ToString()
			v, _ := kv[f+1].ToString()
			p.addRemoteAdm(&ra, k, v)
		}
	}
	p.remoteAdm.Store(&remoteAdm{ra: ra, read: time.Now()})
	return nil
}

// learned sets ra's S and gap percentile from the shared lists (LRANGE
// replies of convScript's lists): S the median sample, the gaps' p90 on the
// router's clock, as router/admission.go computes its own.
func (p *Pool) learned(ra *router.RemoteAdmission, prefix, gaps rueidis.RedisMessage) {
	ints := func(m rueidis.RedisMessage) []int64 {
		vs, _ := m.AsStrSlice()
		out := make([]int64, 0, len(vs))
		for _, v := range vs {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	if s := ints(prefix); len(s) > 0 {
		ra.SharedPrefix, ra.PrefixSamples = s[len(s)/2], len(s)
	}
	if g := ints(gaps); len(g) > 0 {
		ra.GapP90 = time.Duration(float64(g[len(g)*9/10]) * float64(time.Millisecond) * p.s.opt.ClockSpeed)
		ra.GapSamples = len(g)
	}
}

// addRemoteAdm adds one field of another router's admission hash to ra: "q"
// "<waiting> <oldest held ms>", or "c:<id hex>" "<replica key> <tokens>".
func (p *Pool) addRemoteAdm(ra *router.RemoteAdmission, k, v string) {
	if k == "q" {
		w, held, _ := strings.Cut(v, " ")
		n, _ := strconv.Atoi(w)
		h, _ := strconv.ParseInt(held, 10, 64)
		ra.Waiting += n
		if n > 0 {
			ra.OldestHeld = max(ra.OldestHeld, time.Duration(h)*time.Millisecond)
		}
		return
	}
	id, ok := strings.CutPrefix(k, "c:")
	if !ok {
		return
	}
	// "<replica key> <tokens> <first>" (beatAdmission).
	sid, err := strconv.ParseUint(id, 16, 64)
	c2 := strings.LastIndexByte(v, ' ')
	c1 := strings.LastIndexByte(v[:max(c2, 0)], ' ')
	if err != nil || c1 < 0 {
		return
	}
	i := p.lookup(v[:c1])
	tok, err := strconv.ParseInt(v[c1+1:c2], 10, 64)
	first, err2 := strconv.ParseInt(v[c2+1:], 10, 64)
	if i < 0 || err != nil || err2 != nil {
		return
	}
	rc := router.RemoteConv{Replica: i, Tokens: tok, First: first}
	if old, seen := ra.Convs[sid]; seen {
		// Another gate counts it too: the largest context (and its replica),
		// the smallest known first context.
		if tok <= old.Tokens {
			rc.Replica, rc.Tokens = old.Replica, old.Tokens
		}
		if old.First > 0 && (first <= 0 || old.First < first) {
			rc.First = old.First
		}
	}
	ra.Convs[sid] = rc
}

// globEscape escapes the glob characters of s for SCAN MATCH (a model named
// "*" is a literal star in its keys).
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
