package router

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

func TestSessionTableLiveCounts(t *testing.T) {
	clk := &simclock.Manual{}
	tab := NewSessionTable(clk.Now, time.Hour, 100, 5*time.Minute)
	tab.SetLiveWindow(30 * time.Second)
	tab.grow(2)
	tab.Set("a", 0)
	tab.SetTokens("a", 10_000)
	tab.Set("b", 0)
	tab.SetTokens("b", 5_000)
	tab.Set("c", 1)
	tab.SetTokens("c", 7_000)
	tab.SetTokens("unknown", 99) // no-op
	check := func(step string, live0, live1 int, tok0, tok1 int64) {
		t.Helper()
		tab.expire(clk.Now())
		if tab.Live(0) != live0 || tab.Live(1) != live1 || tab.LiveTokens(0) != tok0 || tab.LiveTokens(1) != tok1 {
			t.Fatalf("%s: live %d/%d tokens %d/%d, want %d/%d %d/%d", step,
				tab.Live(0), tab.Live(1), tab.LiveTokens(0), tab.LiveTokens(1), live0, live1, tok0, tok1)
		}
	}
	check("start", 2, 1, 15_000, 7_000)
	tab.SetTokens("a", 12_000) // the conversation grew
	check("grown", 2, 1, 17_000, 7_000)
	clk.Advance(20 * time.Second)
	tab.Lookup("b") // b sends again
	clk.Advance(15 * time.Second)
	check("a and c idle 35 s", 1, 0, 5_000, 0)
	tab.Lookup("a") // a comes back: live again with its last size
	check("a back", 2, 0, 17_000, 0)
	tab.Set("a", 1) // a moves to replica 1
	check("a moved", 1, 1, 5_000, 12_000)
	if tab.Homed(0) != 1 || tab.Homed(1) != 2 {
		t.Fatalf("homed %d/%d", tab.Homed(0), tab.Homed(1))
	}
	tab.Reset()
	check("reset", 0, 0, 0, 0)
}

// TestSessionTableAdaptiveLiveWindow: the window follows the gaps between a
// session's requests: LiveGapFactor x their 90th percentile, clamped.
func TestSessionTableAdaptiveLiveWindow(t *testing.T) {
	tests := []struct {
		name string
		gap  time.Duration
		want time.Duration
	}{
		{"10 s turns", 10 * time.Second, 20 * time.Second},
		{"fast turns hit the floor", time.Second, MinLiveWindow},
		{"slow turns hit the ceiling", 10 * time.Minute, DefaultActiveWindow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &simclock.Manual{}
			tab := NewSessionTable(clk.Now, 24*time.Hour, 1000, time.Hour)
			tab.grow(1)
			if tab.LiveWindow() != DefaultLiveWindow {
				t.Fatalf("initial window %v", tab.LiveWindow())
			}
			for i := range 8 {
				tab.Set(fmt.Sprint(i), 0)
			}
			for range 4 { // 8 sessions x 4 gaps = 32 gaps
				clk.Advance(tc.gap)
				for i := range 8 {
					tab.Lookup(fmt.Sprint(i))
				}
			}
			if got := tab.LiveWindow(); got != tc.want {
				t.Fatalf("window %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSessionTableLiveMatchesModel drives the table with random operations and
// checks the live counts and tokens against a naive model, with a fixed window
// and with windows that change (grow and shrink) between operations.
func TestSessionTableLiveMatchesModel(t *testing.T) {
	type ent struct {
		home     int
		last     time.Duration
		tokens   int64
		tokensAt time.Duration
		// probation: created and not looked up since; born orders creations.
		probation bool
		born      int
	}
	const (
		reps = 3
		maxN = 40
		ttl  = 10 * time.Minute
	)
	for _, adapt := range []bool{false, true} {
		t.Run(fmt.Sprint("changing window ", adapt), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			clk := &simclock.Manual{}
			tab := NewSessionTable(clk.Now, ttl, maxN, time.Minute)
			win := 30 * time.Second
			tab.SetLiveWindow(win)
			tab.grow(reps)
			model := map[string]*ent{}
			for step := range 5000 {
				clk.Advance(time.Duration(rng.IntN(4000)) * time.Millisecond)
				if adapt && step%50 == 0 {
					win = time.Duration(5+rng.IntN(60)) * time.Second
					tab.SetLiveWindow(win)
				}
				now := clk.Now()
				for k, e := range model {
					if now-e.last > ttl {
						delete(model, k)
					}
				}
				key := fmt.Sprint("k", rng.IntN(60))
				switch rng.IntN(3) {
				case 0:
					if _, ok := model[key]; !ok && len(model) >= maxN {
						// Eviction: the oldest session on probation, else the
						// least recently used.
						var oldK string
						oldB, oldT := -1, time.Duration(-1)
						for k, e := range model {
							if e.probation && (oldB < 0 || e.born < oldB) {
								oldK, oldB = k, e.born
							}
						}
						for k, e := range model {
							if oldB < 0 && (oldT < 0 || e.last < oldT) {
								oldK, oldT = k, e.last
							}
						}
						delete(model, oldK)
					}
					h := rng.IntN(reps)
					tab.Set(key, h)
					e := model[key]
					if e == nil {
						e = &ent{probation: true, born: step}
						model[key] = e
					}
					e.home, e.last = h, now
				case 1:
					_, ok := tab.Lookup(key)
					if e := model[key]; e != nil {
						if !ok {
							t.Fatalf("step %d: %s missing", step, key)
						}
						e.last, e.probation = now, false
					}
				case 2:
					tok := 1 + rng.IntN(50_000)
					tab.SetTokens(key, tok)
					// A side request (under half of an estimate set within the
					// window) leaves the estimate alone.
					if e := model[key]; e != nil && !(e.tokens > 0 && int64(tok)*2 < e.tokens && now-e.tokensAt <= win) {
						e.tokens, e.tokensAt = int64(tok), now
					}
				}
				tab.expire(now)
				var live [reps]int
				var toks [reps]int64
				for _, e := range model {
					if now-e.last <= win {
						live[e.home]++
						toks[e.home] += e.tokens
					}
				}
				for i := range reps {
					if tab.Live(i) != live[i] || tab.LiveTokens(i) != toks[i] {
						t.Fatalf("step %d replica %d: live %d tokens %d, model %d %d", step, i, tab.Live(i), tab.LiveTokens(i), live[i], toks[i])
					}
				}
			}
		})
	}
}
