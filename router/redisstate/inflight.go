package redisstate

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/lmwarden/warden/router"
)

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
	if err := p.beatAdmission(cctx, c, others); err != nil {
		return err
	}
	// Last, so the counts and the admission gate go out when they did
	// before drains were shared.
	return p.beatDrains(cctx, c)
}
