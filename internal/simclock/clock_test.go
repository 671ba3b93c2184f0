package simclock

import (
	"context"
	"testing"
	"time"
)

// Wall and Now are inverse mappings at the clock's speed.
func TestScaledMapsSimulatedToWall(t *testing.T) {
	origin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Scaled{Origin: origin, Speed: 4}
	if got := c.Wall(8 * time.Second); !got.Equal(origin.Add(2 * time.Second)) {
		t.Errorf("Wall(8s) = %v, want origin+2s", got)
	}
	if got := c.WallDuration(10 * time.Second); got != 2500*time.Millisecond {
		t.Errorf("WallDuration(10s) = %v, want 2.5s", got)
	}
	zero := &Scaled{Origin: origin}
	if got := zero.WallDuration(3 * time.Second); got != 3*time.Second {
		t.Errorf("speed 0 must mean 1: WallDuration(3s) = %v", got)
	}
}

// SleepUntil returns at once for a past instant and with ctx.Err() when cancelled.
func TestSleepUntilPastAndCancel(t *testing.T) {
	c := NewScaled(1000)
	if err := c.SleepUntil(context.Background(), 0); err != nil {
		t.Fatalf("past instant: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.SleepUntil(ctx, time.Hour*1000); err != context.Canceled {
		t.Fatalf("cancelled: got %v, want context.Canceled", err)
	}
}
