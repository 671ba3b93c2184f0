//go:build unix

package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/internal/simclock"
)

// Capacity benchmark parameters (issue "harness capacity").
const (
	capacitySessions = 1000             // concurrent sessions of the single stage
	capacityStage    = 15 * time.Second // stage length (speed 1: wall = simulated)
	capacityTokens   = 16               // content events the stub streams per turn
	capacityTurns    = 4                // turns per session
	// capacitySteady excludes the first seconds (1,000 connections being dialled at
	// once) from the steady-state figures.
	capacitySteady = 2 * time.Second
)

// capacityStub is an OpenAI-chat streaming server that answers at once. Per turn it
// stamps the wall instant its handler starts and the instant right before it writes
// and flushes the first content event, keyed by session key and turn index, so the
// harness's own first-token instant can be compared with it. It also counts open
// connections and requests in flight.
type capacityStub struct {
	stamps sync.Map // "key/turn" -> capacityStamp

	conns, connsPeak       atomic.Int64
	inFlight, inFlightPeak atomic.Int64
}

type capacityStamp struct {
	entered, first time.Time
}

func raisePeak(cur, peak *atomic.Int64, delta int64) {
	n := cur.Add(delta)
	for {
		p := peak.Load()
		if n <= p || peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (s *capacityStub) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		raisePeak(&s.conns, &s.connsPeak, 1)
	case http.StateClosed, http.StateHijacked:
		s.conns.Add(-1)
	}
}

func (s *capacityStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	entered := time.Now()
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	raisePeak(&s.inFlight, &s.inFlightPeak, 1)
	defer s.inFlight.Add(-1)
	var body struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	users := 0
	for _, m := range body.Messages {
		if m.Role == "user" {
			users++
		}
	}
	key := r.Header.Get("X-Claude-Code-Session-Id") + "/" + strconv.Itoa(users-1)

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	// vLLM's shape: headers with the role-only chunk, then one content event per
	// token, each flushed, then finish, usage and [DONE].
	w.Write([]byte(sseOpenAI(roleChunk)))
	fl.Flush()
	first := time.Now()
	w.Write([]byte(sseOpenAI(content("tok"))))
	fl.Flush()
	s.stamps.Store(key, capacityStamp{entered: entered, first: first})
	for range capacityTokens - 1 {
		w.Write([]byte(sseOpenAI(content(" tok"))))
		fl.Flush()
	}
	w.Write([]byte(sseOpenAI(finishChunk,
		fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, 50, capacityTokens),
		"[DONE]")))
	fl.Flush()
}

// raiseOpenFiles lifts the soft open-file limit to the hard one when it is below
// what 1,000 client connections plus their server ends need.
func raiseOpenFiles(b *testing.B, need uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Logf("reading open-file limit: %v", err)
		return
	}
	if lim.Cur >= need {
		return
	}
	lim.Cur = min(max(need, lim.Cur), lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Logf("raising open-file limit to %d: %v", lim.Cur, err)
	}
	if lim.Cur < need {
		b.Logf("open-file limit %d is below the %d needed", lim.Cur, need)
	}
}

// staggerClient delays the first turn of each of the stage's initial sessions by
// Session.ID * Step past its intended instant, so 1,000 sessions that a stage
// starts at one instant do not stay in lock-step against a server that answers at
// once (a real server's varying service times break the lock-step by themselves).
// Later turns and replacement sessions pass through unchanged.
type staggerClient struct {
	Inner   Client
	Step    time.Duration // simulated
	Initial int64         // sessions with ID < Initial are staggered
}

func (c staggerClient) Do(ctx context.Context, tr TurnRequest, clock simclock.Clock) (Result, string) {
	if tr.Turn == 0 && tr.Session != nil && tr.Session.ID < c.Initial {
		if err := clock.SleepUntil(ctx, tr.Intended+time.Duration(tr.Session.ID)*c.Step); err != nil {
			r := tr.NewResult()
			now := clock.Now()
			r.Sent, r.Done, r.Err = now, now, err.Error()
			return r, ""
		}
	}
	return c.Inner.Do(ctx, tr, clock)
}

// activeSessions reconstructs, from the turn records, how many sessions the closed
// loop kept running at each instant of [from, to) (step apart): a session counts
// from the start of the gap before its first turn (its first turn's Intended minus
// think, not before the stage start: the Loop creates a replacement when its
// predecessor ends) to the Done of its last turn (or to the end, when its last turn
// was not recorded). It returns the mean and the minimum over the samples.
func activeSessions(results []Result, think, stageStart, from, to, step time.Duration) (mean float64, least int) {
	type span struct{ start, end time.Duration }
	spans := map[int64]*span{}
	for _, r := range results {
		sp := spans[r.Session]
		if sp == nil {
			sp = &span{start: -1, end: to}
			spans[r.Session] = sp
		}
		if r.Turn == 0 {
			sp.start = max(r.Intended-think, stageStart)
		}
		if r.LastTurn || !r.OK() {
			sp.end = r.Done
		}
	}
	n, sum := 0, 0
	least = -1
	for t := from; t < to; t += step {
		k := 0
		for _, sp := range spans {
			if sp.start >= 0 && sp.start <= t && t < sp.end {
				k++
			}
		}
		sum += k
		n++
		if least < 0 || k < least {
			least = k
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(sum) / float64(n), least
}

// BenchmarkCapacity drives 1,000 concurrent closed-loop sessions through the real
// harness path (Run: Loop, one goroutine per turn, OpenAIClient, go-sse parsing)
// against a loopback stub that answers at once (16 content events per turn, each
// flushed), and compares every turn's client-side first-token instant
// (Result.FirstToken on a speed-1 simclock.Scaled, converted to wall time with
// Clock.Wall) with the server's stamp taken right before it wrote the first content
// event. The difference is the harness's own TTFB measurement overhead (write
// syscall, loopback, netpoller wake-up, goroutine scheduling, SSE framing), plus
// whatever CPU contention the 1,000 sessions and the stub (same process, same
// cores) cause.
//
// Sub-benchmarks:
//   - think=0s: every session sends its next turn as soon as the previous ends; the
//     cores saturate (the harness's maximum turn rate on this machine);
//   - think=1s: about one turn per session per second (~1,000 turns/s), all 1,000
//     sessions starting at the stage start and so staying in lock-step (bursts of
//     ~1,000 requests at once, the worst case for the run queue);
//   - think=1s-staggered: the same with the initial sessions' first turns spread
//     1 ms apart (staggerClient), i.e. a uniform ~1,000 turns/s.
//
// Metrics (b.N runs pooled; counts per run):
//
//	turns, turns/s, failed  completed turns in the stage, per stage second, failed turns
//	sessions-mean/-min   sessions the closed loop kept running (activeSessions),
//	                     sampled every 10 ms from 2 s to 2 s before the stage end
//	conns-peak           peak open connections at the stub
//	inflight-peak        peak requests inside the stub's handler at once
//	ovh-p50/p99/max-ms   client FirstToken - server first-content stamp, all turns
//	ovh-steady-p99-ms    the same, turns sent after the first 2 s
//	send-p99-ms          server handler entry - client Sent (request path, context)
//	ttfb-p99-ms          client TTFB (FirstToken - Sent)
//
// Timings are reported, never asserted. Run with
// go test -run '^$' -bench Capacity -benchtime 1x ./loadgen/
func BenchmarkCapacity(b *testing.B) {
	raiseOpenFiles(b, 4*capacitySessions+256)
	for _, c := range []struct {
		name    string
		think   time.Duration
		stagger time.Duration
	}{
		{"think=0s", 0, 0},
		{"think=1s", time.Second, 0},
		{"think=1s-staggered", time.Second, time.Millisecond},
	} {
		b.Run(c.name, func(b *testing.B) { benchCapacity(b, c.think, c.stagger) })
	}
}

func benchCapacity(b *testing.B, think, stagger time.Duration) {
	newHist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute), 3) }
	ovh, ovhSteady, send, ttfb := newHist(), newHist(), newHist(), newHist()
	var turnsDone, failed, unmatched, negative int64
	var sessSum float64
	sessMin := -1
	var connsPeak, inFlightPeak int64

	for b.Loop() {
		stub := &capacityStub{}
		srv := httptest.NewUnstartedServer(stub)
		srv.Config.ConnState = stub.connState
		srv.Start()

		sc := (&Scenario{
			Name:               "capacity",
			Seed:               7,
			Model:              "stub-model",
			SystemPromptTokens: 20,
			FirstTurnTokens:    30,
			TurnTokens:         20,
			Turns:              capacityTurns,
			MaxOutputTokens:    capacityTokens,
			ThinkTime:          think,
			Stages:             []int{capacitySessions},
			StageDuration:      capacityStage,
			Variants:           []string{"on"},
			ResetCache:         new(bool),
			RequestTimeout:     time.Minute,
		}).WithDefaults()
		clock := simclock.NewScaled(1)
		tp := http.DefaultTransport.(*http.Transport).Clone()
		tp.MaxIdleConns, tp.MaxIdleConnsPerHost = 0, 2*capacitySessions+16
		hc := &http.Client{Transport: tp}
		var client Client = NewClient(sc, srv.URL, hc, nil)
		if stagger > 0 {
			client = staggerClient{Inner: client, Step: stagger, Initial: capacitySessions}
		}
		var results []Result
		m, err := Run(context.Background(), RunConfig{
			Scenario: sc,
			BaseURL:  srv.URL,
			Clock:    clock,
			HTTP:     hc,
			Client:   client,
			OnResult: func(r Result) { results = append(results, r) },
			RunID:    "capacity",
		})
		srv.Close()
		tp.CloseIdleConnections()
		if err != nil {
			b.Fatalf("run: %v", err)
		}
		w0 := m.Variants[0].Stages[0]
		for _, w := range m.Variants[0].Stages {
			failed += int64(w.Failed)
		}
		connsPeak = max(connsPeak, stub.connsPeak.Load())
		inFlightPeak = max(inFlightPeak, stub.inFlightPeak.Load())
		mean, least := activeSessions(results, think, w0.Start,
			w0.Start+capacitySteady, w0.End-capacitySteady, 10*time.Millisecond)
		sessSum += mean
		if sessMin < 0 || least < sessMin {
			sessMin = least
		}

		steadyFrom := w0.Start + capacitySteady
		for _, r := range results {
			if !r.OK() || r.FirstToken == 0 {
				continue
			}
			turnsDone++
			v, ok := stub.stamps.Load(r.SessionKey + "/" + strconv.Itoa(r.Turn))
			if !ok {
				unmatched++
				continue
			}
			st := v.(capacityStamp)
			d := clock.Wall(r.FirstToken).Sub(st.first)
			if d < 0 {
				negative++
				d = 0
			}
			_ = ovh.RecordValue(int64(d))
			if r.Sent >= steadyFrom {
				_ = ovhSteady.RecordValue(int64(d))
			}
			_ = send.RecordValue(max(int64(st.entered.Sub(clock.Wall(r.Sent))), 0))
			_ = ttfb.RecordValue(int64(r.TTFB()))
		}
	}

	runs := float64(b.N)
	ms := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e6 }
	b.ReportMetric(float64(turnsDone)/runs, "turns")
	b.ReportMetric(float64(turnsDone)/runs/capacityStage.Seconds(), "turns/s")
	b.ReportMetric(float64(failed)/runs, "failed")
	b.ReportMetric(sessSum/runs, "sessions-mean")
	b.ReportMetric(float64(sessMin), "sessions-min")
	b.ReportMetric(float64(connsPeak), "conns-peak")
	b.ReportMetric(float64(inFlightPeak), "inflight-peak")
	b.ReportMetric(ms(ovh, 50), "ovh-p50-ms")
	b.ReportMetric(ms(ovh, 99), "ovh-p99-ms")
	b.ReportMetric(float64(ovh.Max())/1e6, "ovh-max-ms")
	b.ReportMetric(ms(ovhSteady, 99), "ovh-steady-p99-ms")
	b.ReportMetric(ms(send, 99), "send-p99-ms")
	b.ReportMetric(ms(ttfb, 99), "ttfb-p99-ms")
	if unmatched > 0 || negative > 0 {
		b.Logf("%d turns without a server stamp, %d with the client instant before the stamp", unmatched, negative)
	}
}
