// Package simclock maps wall-clock time to simulated time.
//
// Every time the simulator and the harness report is in simulated seconds. In the
// HTTP world the simulated clock is the wall clock scaled by a speed factor (speed 6
// runs six simulated seconds per wall second); against a real vLLM server the speed
// is 1. The virtual-time world has its own discrete-event clock and does not use
// this package.
package simclock

import (
	"context"
	"sync/atomic"
	"time"
)

// Clock gives simulated time as a duration since an origin.
type Clock interface {
	// Now returns simulated time elapsed since the clock's origin.
	Now() time.Duration
	// SleepUntil blocks until simulated time t or until ctx is done, returning
	// ctx.Err() in the latter case.
	SleepUntil(ctx context.Context, t time.Duration) error
}

// Scaled is a Clock that runs Speed simulated seconds per wall second, starting
// at Origin. The zero Speed means 1.
type Scaled struct {
	Origin time.Time
	Speed  float64
}

// NewScaled returns a Scaled clock whose origin is now.
func NewScaled(speed float64) *Scaled {
	if speed <= 0 {
		speed = 1
	}
	return &Scaled{Origin: time.Now(), Speed: speed}
}

func (c *Scaled) speed() float64 {
	if c.Speed <= 0 {
		return 1
	}
	return c.Speed
}

// Now returns simulated time since Origin.
func (c *Scaled) Now() time.Duration {
	return time.Duration(float64(time.Since(c.Origin)) * c.speed())
}

// Wall converts a simulated instant to the wall-clock instant it corresponds to.
func (c *Scaled) Wall(t time.Duration) time.Time {
	return c.Origin.Add(time.Duration(float64(t) / c.speed()))
}

// WallDuration converts a simulated span to wall time.
func (c *Scaled) WallDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.speed())
}

// SleepUntil blocks until simulated time t (or ctx is done).
func (c *Scaled) SleepUntil(ctx context.Context, t time.Duration) error {
	d := time.Until(c.Wall(t))
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

var _ Clock = (*Scaled)(nil)

// Manual is a Clock that moves only when Advance is called; tests step it instead
// of sleeping. Safe for concurrent use. The zero value starts at 0.
type Manual struct{ t atomic.Int64 }

// Now returns the time set so far.
func (c *Manual) Now() time.Duration { return time.Duration(c.t.Load()) }

// Advance moves the clock forward by d.
func (c *Manual) Advance(d time.Duration) { c.t.Add(int64(d)) }

// SleepUntil returns at once when t has passed, else when ctx ends: a Manual clock
// does not wake sleepers when advanced.
func (c *Manual) SleepUntil(ctx context.Context, t time.Duration) error {
	if c.Now() >= t {
		return ctx.Err()
	}
	<-ctx.Done()
	return ctx.Err()
}
