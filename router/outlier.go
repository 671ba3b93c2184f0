package router

import "time"

// Outlier ejection defaults (OutlierConfig). Envoy's outlier detection
// (envoyproxy.io, config.cluster.v3.OutlierDetection) defaults to
// consecutive_5xx 5, base_ejection_time 30 s (times the number of ejections),
// max_ejection_time 300 s and max_ejection_percent 10 % "but will eject at
// least one host regardless of the value".
const (
	// DefaultEjectConsecutiveFailures: Envoy's consecutive_5xx.
	DefaultEjectConsecutiveFailures = 5
	// DefaultEjectWindow: the failures of a streak must fall within this of
	// its first one. Envoy's streak has no window (its interval, 10 s, paces
	// its sweeps); ours is a minute so that a conversation's turns, tens of
	// seconds apart, still add up while hours-apart failures do not.
	DefaultEjectWindow = time.Minute
	// DefaultEjectBaseTime: Envoy's base_ejection_time; the k-th ejection in a
	// row lasts k times this, at most DefaultEjectMaxTime (Envoy's
	// max_ejection_time).
	DefaultEjectBaseTime = 30 * time.Second
	DefaultEjectMaxTime  = 5 * time.Minute
	// DefaultEjectMaxPercent caps the share of a pool's replicas ejected at
	// once, at least one of two or more (as Envoy): 25 % lets one of 4 go (and
	// one of 2 or 3, two of 8) where Envoy's 10 % is meant for large clusters;
	// an ejected replica's load lands on the others, so the cap stays low.
	DefaultEjectMaxPercent = 25
	// DefaultSlowStartWindow: a replica back from ejection takes new
	// conversations at a share that ramps up over this window (slowStartShare),
	// as Envoy's slow start mode ramps a returning host's weight (envoyproxy.io,
	// arch_overview/upstream/load_balancing/slow_start: weight x max(10 %,
	// time since start / window), aggression 1). Envoy has no default window;
	// two base ejection times is a choice, not measured.
	DefaultSlowStartWindow = time.Minute
	// slowStartMinWeight is Envoy's min_weight_percent default (10 %).
	slowStartMinWeight = 0.1
)

// OutlierConfig configures the ejection of a replica whose requests fail while
// its health check passes (BalancerConfig.Outlier). Zero values mean the
// defaults above; ConsecutiveFailures < 0 turns ejection off.
type OutlierConfig struct {
	ConsecutiveFailures int
	Window              time.Duration
	BaseTime, MaxTime   time.Duration
	MaxPercent          int
	// SlowStart is the slow start window after a return (0: the default,
	// negative: none).
	SlowStart time.Duration
}

func (c OutlierConfig) withDefaults() OutlierConfig {
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = DefaultEjectConsecutiveFailures
	}
	if c.Window <= 0 {
		c.Window = DefaultEjectWindow
	}
	if c.BaseTime <= 0 {
		c.BaseTime = DefaultEjectBaseTime
	}
	if c.MaxTime <= 0 {
		c.MaxTime = DefaultEjectMaxTime
	}
	if c.MaxPercent <= 0 {
		c.MaxPercent = DefaultEjectMaxPercent
	}
	if c.SlowStart == 0 {
		c.SlowStart = DefaultSlowStartWindow
	}
	return c
}

// outlierState is one replica's ejection state (guarded by Balancer.mu).
type outlierState struct {
	streak      int           // consecutive failures
	streakStart time.Duration // the streak's first failure
	ejected     bool
	probing     bool
	until       time.Duration // end of the ejection: then a probe decides
	inRow       int           // ejections since the replica last served a request well
	total       uint64        // ejections ever (metric)
	reason      string        // the failure that ejected it
	// Slow start after a return (EndProbe ok): since when, and the placements
	// made in the pool since then (placed) and of them on this replica (taken).
	warming       bool
	warmSince     time.Duration
	placed, taken int
}

// Ejection is what ObserveOutcome and EndProbe report about a change of a
// replica's ejection.
type Ejection struct {
	Replica int
	For     time.Duration // how long the ejection lasts before a probe
	InRow   int           // ejections in a row
	Reason  string
}

// ObserveOutcome records how a request sent to replica i ended: failed (a 5xx
// the caller blames on the replica, or a connection that broke before any
// response) with why, or served. ConsecutiveFailures failures in a row within
// Window eject the replica while the cap allows: it is out of placement (its
// sessions re-home) until a probe after the ejection time succeeds (DueProbes,
// EndProbe). A served request ends the streak. It reports an ejection it caused.
func (b *Balancer) ObserveOutcome(i int, failed bool, why string) (Ejection, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) || b.outlier.ConsecutiveFailures < 0 {
		return Ejection{}, false
	}
	o := &b.reps[i].out
	now := b.now()
	if !failed {
		o.streak = 0
		if !o.ejected {
			o.inRow = 0
		}
		return Ejection{}, false
	}
	if o.ejected {
		return Ejection{}, false
	}
	if o.streak == 0 || now-o.streakStart > b.outlier.Window {
		o.streak, o.streakStart = 0, now
	}
	o.streak++
	if o.streak < b.outlier.ConsecutiveFailures || !b.mayEject() {
		return Ejection{}, false
	}
	b.sync(now)
	return b.eject(i, now, why), true
}

// mayEject reports whether the cap allows one more ejection (caller holds mu):
// at most MaxPercent of the replicas, at least one of two or more, never all.
func (b *Balancer) mayEject() bool {
	n, out := len(b.reps), 0
	for i := range b.reps {
		if b.reps[i].out.ejected {
			out++
		}
	}
	allowed := max(1, n*b.outlier.MaxPercent/100)
	return n >= 2 && out < allowed && out < n-1
}

// eject ejects replica i now, for its next step of backoff (caller holds mu).
func (b *Balancer) eject(i int, now time.Duration, why string) Ejection {
	o := &b.reps[i].out
	o.inRow++
	o.total++
	d := min(b.outlier.BaseTime*time.Duration(o.inRow), b.outlier.MaxTime)
	o.ejected, o.until, o.streak, o.reason = true, now+d, 0, why
	return Ejection{Replica: i, For: d, InRow: o.inRow, Reason: why}
}

// DueProbes returns the ejected replicas whose ejection time is over and that
// no probe is checking yet, and marks them as being probed: the caller sends
// each a probe request and reports with EndProbe.
func (b *Balancer) DueProbes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var due []int
	for i := range b.reps {
		if o := &b.reps[i].out; o.ejected && !o.probing && now >= o.until {
			o.probing = true
			due = append(due, i)
		}
	}
	return due
}

// EndProbe reports the probe of ejected replica i: ok returns it to placement
// (its old sessions stay where they re-homed); otherwise it stays ejected for
// the next step of backoff, reported with why.
func (b *Balancer) EndProbe(i int, ok bool, why string) (Ejection, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.reps) || !b.reps[i].out.ejected {
		return Ejection{}, false
	}
	o := &b.reps[i].out
	o.probing = false
	b.sync(b.now())
	if ok {
		o.ejected, o.reason = false, ""
		if b.outlier.SlowStart > 0 {
			o.warming, o.warmSince, o.placed, o.taken = true, b.now(), 0, 0
		}
		return Ejection{Replica: i, InRow: o.inRow}, false
	}
	return b.eject(i, b.now(), why), true
}

// Ejected reports whether replica i is ejected.
func (b *Balancer) Ejected(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return i >= 0 && i < len(b.reps) && b.reps[i].out.ejected
}

// slowStartShare is the share of new placements replica i may take at now while
// it warms up after a return from ejection: Envoy's slow start weight (the
// replica's weight x max(10 %, elapsed / window), every weight 1 otherwise)
// over the sum of the healthy replicas' weights; 1 and false when i is not
// warming (its window over). healthy counts the healthy replicas, i included.
func (o *outlierState) slowStartShare(now, window time.Duration, healthy int) (float64, bool) {
	if !o.warming {
		return 1, false
	}
	elapsed := now - o.warmSince
	if elapsed >= window {
		o.warming = false
		return 1, false
	}
	w := max(slowStartMinWeight, max(elapsed, time.Second).Seconds()/window.Seconds())
	return w / (w + float64(healthy-1)), true
}

// slowStart keeps each warming replica other than home out of this decision's
// view (b.view) when one more placement there would pass its slow-start share
// of the placements made since it returned, as long as another replica is
// healthy in the view (caller holds mu). Deterministic: a quota, no random draw,
// and nothing changes while no replica is warming.
func (b *Balancer) slowStart(now time.Duration, home int) {
	healthy := 0
	for i := range b.view {
		if b.view[i].Healthy {
			healthy++
		}
	}
	for i := range b.reps {
		o := &b.reps[i].out
		if !o.warming || i == home || !b.view[i].Healthy {
			continue
		}
		share, on := o.slowStartShare(now, b.outlier.SlowStart, healthy)
		if on && healthy > 1 && float64(o.taken+1) > share*float64(o.placed+1) {
			b.view[i].Healthy = false
			healthy--
		}
	}
}

// countPlacement records a placement on replica d for every warming replica's
// quota (caller holds mu).
func (b *Balancer) countPlacement(d int) {
	for i := range b.reps {
		if o := &b.reps[i].out; o.warming {
			o.placed++
			if i == d {
				o.taken++
			}
		}
	}
}
