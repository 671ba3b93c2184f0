package redisstate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/lmwarden/warden/router"
)

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
