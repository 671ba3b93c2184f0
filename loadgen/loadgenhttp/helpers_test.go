package loadgenhttp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// stepClock is a fake simulated clock: every Now() advances it by step, so the
// order of the instants recorded is the order of the calls, with no wall time.
type stepClock struct {
	mu   sync.Mutex
	t    time.Duration
	step time.Duration
}

func newStepClock() *stepClock { return &stepClock{t: time.Second, step: time.Millisecond} }

func (c *stepClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t += c.step
	return c.t
}

func (c *stepClock) SleepUntil(ctx context.Context, t time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t > c.t {
		c.t = t
	}
	return ctx.Err()
}

func readFixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sseOpenAI renders OpenAI-style events ("data: x\n\n" each).
func sseOpenAI(datas ...string) string {
	var sb strings.Builder
	for _, d := range datas {
		sb.WriteString("data: " + d + "\n\n")
	}
	return sb.String()
}

// sseNamed renders named events: pairs of (event, data).
func sseNamed(pairs ...string) string {
	var sb strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		sb.WriteString("event: " + pairs[i] + "\ndata: " + pairs[i+1] + "\n\n")
	}
	return sb.String()
}
