package redisstate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The lazy timeout ends at its deadline whether Done was asked before it
// (the timer closes the channel), after it (closed at once) or never (Err
// says so); cancel ends it early with context.Canceled; a context derived
// from it (as rueidis derives one on a cache miss) ends with it.
func TestLazyTimeout(t *testing.T) {
	t.Run("done before the deadline", func(t *testing.T) {
		c := newLazyTimeout(30 * time.Millisecond)
		defer c.cancel()
		start := time.Now()
		select {
		case <-c.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("Done not closed 2 s after a 30 ms deadline")
		}
		if waited := time.Since(start); waited < 25*time.Millisecond {
			t.Fatalf("Done closed after %v, before the 30 ms deadline", waited)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", c.Err())
		}
	})
	t.Run("deadline passed without Done", func(t *testing.T) {
		c := newLazyTimeout(time.Millisecond)
		defer c.cancel()
		if c.Err() != nil {
			t.Fatalf("Err = %v before the deadline", c.Err())
		}
		time.Sleep(5 * time.Millisecond)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done asked after the deadline is not closed")
		}
		if d, ok := c.Deadline(); !ok || d.IsZero() {
			t.Fatalf("Deadline = %v, %v", d, ok)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		c := newLazyTimeout(time.Hour)
		done := c.Done()
		c.cancel()
		select {
		case <-done:
		default:
			t.Fatal("Done not closed by cancel")
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err = %v, want Canceled", c.Err())
		}
		c.cancel() // twice is fine
	})
	t.Run("derived context", func(t *testing.T) {
		c := newLazyTimeout(20 * time.Millisecond)
		defer c.cancel()
		child, stop := context.WithCancel(c)
		defer stop()
		select {
		case <-child.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("derived context not ended 2 s after its parent's 20 ms deadline")
		}
		if !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Fatalf("derived Err = %v, want DeadlineExceeded", child.Err())
		}
	})
}
