package redisstate

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/lmwarden/warden/router"
)

// DrainTTL is the TTL of a model's drain hash (P d:M), refreshed by every
// heartbeat of every router: a drain lasts while any router runs (and this
// long after the last one stopped), and ends only when undrained.
const DrainTTL = 10 * time.Minute

// drainState is a pool's view of the drain hash: the store's modes as last
// read, with this router's writes not yet made applied over them.
type drainState struct {
	read    map[string]router.DrainMode // replica key -> mode, as last read
	pending map[string]router.DrainMode // writes not yet made (DrainNone: delete)
}

// Drain returns replica i's drain mode (router.SharedState.Drain): the store's
// as last read, this router's own writes applied at once. It does not block.
func (p *Pool) Drain(i int) router.DrainMode {
	d := p.drains.Load()
	if d == nil || i < 0 || i >= len(*d) {
		return router.DrainNone
	}
	return (*d)[i]
}

// SetDrain writes replica i's drain mode to the drain hash (HSET, or HDEL for
// router.DrainNone), bounded by the heartbeat's timeout (an admin call, not a
// request's); Drain gives it at once. When Redis does not answer the write is
// kept and made by the next heartbeat that reaches it (ok false).
func (p *Pool) SetDrain(i int, m router.DrainMode) (time.Duration, bool) {
	key := p.key(i)
	if key == "" {
		return 0, false
	}
	p.dmu.Lock()
	defer p.dmu.Unlock()
	p.drain.pending[key] = m
	p.publishDrains()
	cp := p.s.client.Load()
	if cp == nil || p.s.down.Load() {
		return 0, false // not connected yet, or down: the heartbeat writes it
	}
	c := *cp
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.s.beatTimeout())
	defer cancel()
	err := p.writeDrains(ctx, c)
	wait := time.Since(t0)
	if err != nil {
		p.s.fail("drain", err)
		return wait, false
	}
	return wait, true
}

// writeDrains makes the pending drain writes (caller holds dmu).
func (p *Pool) writeDrains(ctx context.Context, c rueidis.Client) error {
	if len(p.drain.pending) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, 0, len(p.drain.pending)+1)
	for k, m := range p.drain.pending {
		if m == router.DrainNone {
			cmds = append(cmds, c.B().Hdel().Key(p.drainKey).Field(k).Build())
		} else {
			cmds = append(cmds, c.B().Hset().Key(p.drainKey).FieldValue().FieldValue(k, m.String()).Build())
		}
	}
	cmds = append(cmds, c.B().Pexpire().Key(p.drainKey).Milliseconds(DrainTTL.Milliseconds()).Build())
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	for k, m := range p.drain.pending {
		if m == router.DrainNone {
			delete(p.drain.read, k)
		} else {
			p.drain.read[k] = m
		}
	}
	clear(p.drain.pending)
	return nil
}

// beatDrains is the heartbeat's part of the drains: the pending writes, the
// hash's TTL refreshed and the hash read back (so every router sees every
// drain within one heartbeat).
func (p *Pool) beatDrains(ctx context.Context, c rueidis.Client) error {
	p.dmu.Lock()
	defer p.dmu.Unlock()
	if err := p.writeDrains(ctx, c); err != nil {
		return err
	}
	res := c.DoMulti(ctx,
		c.B().Pexpire().Key(p.drainKey).Milliseconds(DrainTTL.Milliseconds()).Build(),
		c.B().Hgetall().Key(p.drainKey).Build())
	if err := res[0].Error(); err != nil {
		return err
	}
	kv, err := res[1].AsStrMap()
	if err != nil {
		return err
	}
	read := make(map[string]router.DrainMode, len(kv))
	for k, v := range kv {
		if m, err := router.ParseDrainMode(v); err == nil {
			read[k] = m
		}
	}
	p.drain.read = read
	p.publishDrains()
	return nil
}

// publishDrains rebuilds the per-replica modes Drain reads (caller holds dmu).
func (p *Pool) publishDrains() {
	p.kmu.RLock()
	modes := make([]router.DrainMode, len(p.keys))
	for i, k := range p.keys {
		m, ok := p.drain.pending[k]
		if !ok {
			m = p.drain.read[k]
		}
		modes[i] = m
	}
	p.kmu.RUnlock()
	p.drains.Store(&modes)
}
