package redisstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/lmwarden/warden/router"
)

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
	arr, err := claimScript.Exec(ctx, c, []string{p.homeKey(session), p.flightKey, p.regKey, p.resKey, p.drainKey}, args).ToArray()
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
