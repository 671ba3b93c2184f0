package redisstate

import (
	"context"
	"sync"
	"time"
)

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
