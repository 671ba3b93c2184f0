package routerhttp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// BenchmarkSlowBodies (docs/router.md, "Slow request bodies"): 1,000 clients send their bodies at 1
// byte a second to one router (A) while a second, identical router (B) in the
// same process gets none; a normal client alternates requests between A and B
// (a recorded 52 KB Claude Code body each), so both TTFB figures come from the
// same instants. Reported: the process's resident memory growth from before the
// slow clients connected to its peak while they were held (client and router
// sides together: an upper bound for the router's), the body memory the
// router had reserved for them, and TTFB (request sent -> first body byte)
// p50/p90/p99 with and without them. Run with -benchtime 1x (one run takes
// about 25 s).
func BenchmarkSlowBodies(b *testing.B) {
	const (
		slowClients = 1000
		hold        = 8 * time.Second // measuring time while they are all held
		memCap      = DefaultBodyMemoryBytes
	)
	event := `data: {"choices":[{"delta":{"content":"token"}}]}` + "\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, event)
	}))
	defer up.Close()
	newRouter := func() (*Router, *httptest.Server) {
		cfg, err := ConfigForURLs([]string{up.URL}, true)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.HealthInterval, cfg.ScrapeInterval = -1, -1
		cfg.BodyReadTimeout = 5 * time.Minute // longer than the run: every slow client stays held
		cfg.BodyMemoryBytes = memCap
		rt, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return rt, httptest.NewServer(rt.Handler())
	}
	rtA, srvA := newRouter()
	defer srvA.Close()
	_, srvB := newRouter()
	defer srvB.Close()
	cc := loadFixture(b, "claude-code-2.1.328-turn2.json")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	ttfb := func(base string) time.Duration {
		req, _ := http.NewRequest("POST", base+"/v1/messages?beta=true", bytes.NewReader(cc.Body))
		req.Header.Set(wire.HeaderClaudeSession, cc.Headers[wire.HeaderClaudeSession])
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			b.Fatalf("%s: status %d: %s", base, resp.StatusCode, body)
		}
		var one [1]byte
		if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		io.Copy(io.Discard, resp.Body)
		return d
	}
	for b.Loop() {
		for range 50 { // warm both routers and the connections
			ttfb(srvA.URL)
			ttfb(srvB.URL)
		}
		runtime.GC()
		rss0 := residentBytes(b)
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var connected atomic.Int64
		for range slowClients {
			wg.Go(func() {
				conn, err := net.Dial("tcp", srvA.Listener.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer conn.Close()
				// A Claude Code request that claims 1 MB and trickles it.
				fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 1<<20)
				connected.Add(1)
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := conn.Write([]byte{' '}); err != nil {
							return
						}
					}
				}
			})
		}
		for connected.Load() < slowClients {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // every body is being read

		var with, without []time.Duration
		peak := residentBytes(b)
		var held int64
		for end := time.Now().Add(hold); time.Now().Before(end); {
			with = append(with, ttfb(srvA.URL))
			without = append(without, ttfb(srvB.URL))
			if len(with)%20 == 0 {
				peak = max(peak, residentBytes(b))
				held = max(held, rtA.proxy.bodyMem.used.Load())
			}
		}
		peak = max(peak, residentBytes(b))
		held = max(held, rtA.proxy.bodyMem.used.Load())
		runtime.ReadMemStats(&ms1)
		close(stop)
		wg.Wait()

		growth := float64(peak-rss0) / (1 << 20)
		b.ReportMetric(growth, "rss_growth_MiB")
		b.ReportMetric(float64(memCap+64<<20)/(1<<20), "rss_bound_MiB")
		b.ReportMetric(float64(held)/(1<<20), "body_mem_held_MiB")
		// Where the growth is: goroutine stacks (both sides of 1,000
		// connections) and the heap (buffers, connections, the normal traffic's
		// garbage), at the end of the hold.
		b.ReportMetric(float64(int64(ms1.StackInuse)-int64(ms0.StackInuse))/(1<<20), "stack_growth_MiB")
		b.ReportMetric(float64(int64(ms1.HeapInuse)-int64(ms0.HeapInuse))/(1<<20), "heap_inuse_growth_MiB")
		for _, q := range []float64{0.5, 0.9, 0.99} {
			p := strconv.Itoa(int(q * 100))
			b.ReportMetric(quantileMs(with, q), "ttfb_with_p"+p+"_ms")
			b.ReportMetric(quantileMs(without, q), "ttfb_without_p"+p+"_ms")
		}
		b.ReportMetric(float64(len(with)), "samples_per_side")
		if limit := float64(memCap+64<<20) / (1 << 20); growth > limit {
			b.Errorf("resident memory grew %.1f MiB with %d slow clients, over the body memory cap + 64 MiB (%.0f MiB)", growth, slowClients, limit)
		}
	}
}

// residentBytes is the process's resident set size (VmRSS in /proc/self/status).
func residentBytes(b *testing.B) int64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("VmRSS not found")
	return 0
}

// quantileMs is the q-quantile of ds in milliseconds (nearest rank).
func quantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, int(q*float64(len(s))))
	return float64(s[i]) / float64(time.Millisecond)
}
