package redisstate

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/lmwarden/warden/internal/testredis"
	"github.com/lmwarden/warden/router"
)

// BenchmarkStickyDecision compares, side by side on one loopback redis-server,
// a sticky decision (Balancer.Acquire + Release of a known session) with the
// in-memory table only, the same with the shared state (home read from the
// client-side cache), one Redis PING round trip and an uncached GET, each with
// rueidis. Each reports p50_ns and p99_ns over its iterations.
//
//	go test -run '^$' -bench StickyDecision -count 5 ./router/routerhttp/redisstate
func BenchmarkStickyDecision(b *testing.B) {
	srv := testredis.Start(b)
	const sessions = 1000
	keys := []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1"}
	mem, err := router.NewBalancer(router.BalancerConfig{Replicas: keys, Affinity: true, MaxNumSeqs: 256, Now: func() time.Duration { return 0 }})
	if err != nil {
		b.Fatal(err)
	}
	n := newNode(b, srv.URL(), keys, Options{})
	for s := range sessions {
		for _, bal := range []*router.Balancer{mem, n.b} {
			d, err := bal.Acquire(router.Facts{SessionKey: fmt.Sprint("s", s), PromptTokens: 1000})
			if err != nil {
				b.Fatal(err)
			}
			bal.Release(d.Replica)
		}
	}
	c := rawClient(b, srv.Addr)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("bench:k").Value("http://a:1").Build()).Error(); err != nil {
		b.Fatal(err)
	}
	timed := func(b *testing.B, f func(i int)) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			f(i)
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50_ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99_ns")
	}
	sticky := func(bal *router.Balancer) func(int) {
		return func(i int) {
			d, err := bal.Acquire(router.Facts{SessionKey: fmt.Sprint("s", i%sessions), PromptTokens: 1000})
			if err != nil || d.Reason != router.ReasonSticky {
				b.Fatalf("%v %v", d, err)
			}
			bal.Release(d.Replica)
		}
	}
	b.Run("sticky-memory", func(b *testing.B) { timed(b, sticky(mem)) })
	b.Run("sticky-redis", func(b *testing.B) { timed(b, sticky(n.b)) })
	b.Run("ping", func(b *testing.B) {
		timed(b, func(int) {
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("get-uncached", func(b *testing.B) {
		timed(b, func(int) {
			if _, err := c.Do(ctx, c.B().Get().Key("bench:k").Build()).ToString(); err != nil && !rueidis.IsRedisNil(err) {
				b.Fatal(err)
			}
		})
	})
}
