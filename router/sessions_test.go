package router

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

func TestSessionTableTTL(t *testing.T) {
	clk := &simclock.Manual{}
	tab := NewSessionTable(clk.Now, time.Hour, 10, time.Minute)
	tab.grow(2)
	tab.Set("a", 1)
	clk.Advance(59 * time.Minute)
	if h, ok := tab.Lookup("a"); !ok || h != 1 {
		t.Fatalf("lookup a = %d %v", h, ok)
	}
	clk.Advance(time.Hour) // idle exactly 1 h since the lookup: still there
	if _, ok := tab.Lookup("a"); !ok {
		t.Fatal("a expired at exactly the TTL")
	}
	clk.Advance(time.Hour + time.Nanosecond)
	if _, ok := tab.Lookup("a"); ok {
		t.Fatal("a still present after the TTL")
	}
	if tab.Len() != 0 || tab.Homed(1) != 0 || tab.Active(1) != 0 {
		t.Fatalf("len %d homed %d active %d", tab.Len(), tab.Homed(1), tab.Active(1))
	}
}

func TestSessionTableLRUBound(t *testing.T) {
	clk := &simclock.Manual{}
	tab := NewSessionTable(clk.Now, time.Hour, 3, time.Minute)
	for i, k := range []string{"a", "b", "c"} {
		tab.Set(k, i)
		clk.Advance(time.Second)
	}
	tab.Lookup("a") // a is now the most recent; b the least
	tab.Set("d", 0)
	if _, ok := tab.Lookup("b"); ok {
		t.Fatal("b should have been evicted")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := tab.Lookup(k); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	if tab.Len() != 3 || tab.Homed(0) != 2 || tab.Homed(1) != 0 || tab.Homed(2) != 1 {
		t.Fatalf("len %d homed %d %d %d", tab.Len(), tab.Homed(0), tab.Homed(1), tab.Homed(2))
	}
}

// TestSessionTableMatchesModel drives the table with random operations and checks
// every count against a naive map-based model.
func TestSessionTableMatchesModel(t *testing.T) {
	type ent struct {
		home int
		last time.Duration
	}
	const (
		reps   = 4
		maxN   = 50
		ttl    = 10 * time.Minute
		window = time.Minute
	)
	rng := rand.New(rand.NewPCG(3, 4))
	clk := &simclock.Manual{}
	tab := NewSessionTable(clk.Now, ttl, maxN, window)
	tab.grow(reps)
	model := map[string]*ent{}
	expireModel := func() {
		now := clk.Now()
		for k, e := range model {
			if now-e.last > ttl {
				delete(model, k)
			}
		}
	}
	evictLRU := func() {
		var oldK string
		var old *ent
		for k, e := range model {
			if old == nil || e.last < old.last {
				oldK, old = k, e
			}
		}
		delete(model, oldK)
	}
	for step := range 20000 {
		clk.Advance(time.Duration(rng.IntN(int(20 * time.Second))))
		k := fmt.Sprintf("k%d", rng.IntN(120))
		expireModel()
		switch rng.IntN(3) {
		case 0, 1:
			h, ok := tab.Lookup(k)
			e, mok := model[k]
			if ok != mok || (ok && h != e.home) {
				t.Fatalf("step %d lookup %s: table %d %v, model %+v %v", step, k, h, ok, e, mok)
			}
			if mok {
				e.last = clk.Now()
			}
		case 2:
			home := rng.IntN(reps)
			tab.Set(k, home)
			if e, ok := model[k]; ok {
				e.home, e.last = home, clk.Now()
			} else {
				if len(model) >= maxN {
					evictLRU()
				}
				model[k] = &ent{home, clk.Now()}
			}
		}
		var homed, active [reps]int
		for _, e := range model {
			homed[e.home]++
			if clk.Now()-e.last <= window {
				active[e.home]++
			}
		}
		if tab.Len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, tab.Len(), len(model))
		}
		for i := range reps {
			if tab.Homed(i) != homed[i] || tab.Active(i) != active[i] {
				t.Fatalf("step %d replica %d: homed %d/%d active %d/%d", step, i, tab.Homed(i), homed[i], tab.Active(i), active[i])
			}
		}
	}
}

func TestSessionTableReset(t *testing.T) {
	clk := &simclock.Manual{}
	tab := NewSessionTable(clk.Now, 0, 0, 0)
	tab.Set("a", 2)
	tab.Reset()
	if _, ok := tab.Lookup("a"); ok || tab.Len() != 0 || tab.Homed(2) != 0 {
		t.Fatal("reset kept state")
	}
	tab.Set("b", 0)
	if h, ok := tab.Lookup("b"); !ok || h != 0 {
		t.Fatal("table unusable after reset")
	}
}

func sessionKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%08x-5a20-47b6-aadb-%012x", i, i*7919)
	}
	return keys
}

// BenchmarkAcquireSticky: the sticky path with 100,000 live sessions on 8 replicas
// (each request released right away, so every decision is sticky).
func BenchmarkAcquireSticky(b *testing.B) {
	bal, clk := newTestBalancer(b, 8, true, nil)
	keys := sessionKeys(100_000)
	for _, k := range keys {
		d := mustAcquire(b, bal, k)
		bal.Release(d.Replica)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d, _ := bal.Acquire(Facts{SessionKey: keys[i%len(keys)]})
		bal.Release(d.Replica)
		i++
		if i%1024 == 0 {
			clk.Advance(time.Millisecond)
		}
	}
}

// BenchmarkAcquireStickyParallel: the same under contention from all CPUs.
func BenchmarkAcquireStickyParallel(b *testing.B) {
	bal, _ := newTestBalancer(b, 8, true, nil)
	keys := sessionKeys(100_000)
	for _, k := range keys {
		d := mustAcquire(b, bal, k)
		bal.Release(d.Replica)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			d, _ := bal.Acquire(Facts{SessionKey: keys[i%len(keys)]})
			bal.Release(d.Replica)
			i++
		}
	})
}

// BenchmarkAcquirePlaced: every decision places a new session (table grows up to
// its bound, then evicts).
func BenchmarkAcquirePlaced(b *testing.B) {
	bal, _ := newTestBalancer(b, 8, true, func(c *BalancerConfig) { c.MaxSessions = 100_000 })
	keys := sessionKeys(200_000)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d, _ := bal.Acquire(Facts{SessionKey: keys[i%len(keys)]})
		bal.Release(d.Replica)
		i++
	}
}

// BenchmarkAcquireShortestQueue: affinity off, snapshot refreshed every 100 ms.
func BenchmarkAcquireShortestQueue(b *testing.B) {
	bal, clk := newTestBalancer(b, 8, false, nil)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d, _ := bal.Acquire(Facts{SessionKey: "k"})
		bal.Release(d.Replica)
		i++
		if i%64 == 0 {
			clk.Advance(10 * time.Millisecond)
		}
	}
}

// BenchmarkSessionTable1M reports the heap held by a table of 1,000,000 sessions
// (metric heap-B/session) and the cost of a lookup at that size.
func BenchmarkSessionTable1M(b *testing.B) {
	const n = 1_000_000
	keys := sessionKeys(n)
	clk := &simclock.Manual{}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tab := NewSessionTable(clk.Now, 0, n, 0)
	tab.grow(8)
	for i, k := range keys {
		tab.Set(k, i%8)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heapPer := float64(after.HeapAlloc-before.HeapAlloc) / n
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		tab.Lookup(keys[i%n])
		i += 7
	}
	runtime.KeepAlive(tab)
	b.ReportMetric(heapPer, "heap-B/session")
}
