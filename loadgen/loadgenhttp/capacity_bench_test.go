//go:build unix

package loadgenhttp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/loadgen"
)

// Capacity benchmark parameters (the harness's capacity).
const (
	capacitySessions = 1000             // concurrent sessions of the single stage
	capacityStage    = 15 * time.Second // stage length (speed 1: wall = simulated)
	capacityTokens   = 16               // content events the stub streams per turn
	capacityTurns    = 4                // turns per session
	// capacityPace is the gap between two content events of one stream in the paced
	// conditions: the single-sequence decode step of the simulator's default
	// profile, a4000-qwen3-4b (sim/profile.go: 3 ms step overhead + 8.04e9 B of
	// weights / (448e9 B/s x 0.8) = 25.4 ms, ~39 tokens/s). A batch makes a real
	// step longer, so this is the fastest per-stream pace the reference server
	// shows, and the heaviest event rate per open stream.
	capacityPace = 25 * time.Millisecond
	// capacitySteady excludes the first seconds (1,000 connections being dialled,
	// the staggered starts) from the steady-state figures.
	capacitySteady = 2 * time.Second
	// capacityStubEnv names the environment variable that turns the test binary
	// into the out-of-process stub (TestCapacityStubProcess); its value is the
	// stub's configuration, "tokens=16,pace=25ms".
	capacityStubEnv = "LOADGEN_CAPACITY_STUB"
)

// capacityStub is an OpenAI-chat streaming server that answers at once: no prefill
// delay. Per request it writes vLLM's shape, each event flushed on its own: the
// role-only chunk (with the headers), then at once the first content event, then
// Tokens-1 more content events Pace apart (back to back when Pace is 0), then
// finish + usage + [DONE] in one write. It stamps the wall instant its handler
// starts, the instant right before it writes the first content event and the
// instant that write and its flush returned, keyed by
// session key and turn index (the n-th request of a session is its turn n: a
// session's turns are sequential and never retried). Events are rendered once.
type capacityStub struct {
	Tokens int
	Pace   time.Duration

	role, first, next, tail []byte

	mu     sync.Mutex
	turns  map[string]int
	stamps []capacityStamp

	conns, connsPeak       atomic.Int64
	inFlight, inFlightPeak atomic.Int64
}

// capacityStamp is the stub's record of one turn; instants are wall clock (Unix
// nanoseconds), comparable across processes on one machine.
type capacityStamp struct {
	Key     string `json:"key"`
	Turn    int    `json:"turn"`
	Entered int64  `json:"entered_ns"` // handler start
	First   int64  `json:"first_ns"`   // right before writing the first content event
	Flushed int64  `json:"flushed_ns"` // right after that event's write and flush returned
}

// capacityReport is what the stub hands back after a run (GET /stamps).
type capacityReport struct {
	Stamps       []capacityStamp `json:"stamps"`
	ConnsPeak    int64           `json:"conns_peak"`
	InFlightPeak int64           `json:"in_flight_peak"`
}

func newCapacityStub(tokens int, pace time.Duration) *capacityStub {
	return &capacityStub{
		Tokens: tokens,
		Pace:   pace,
		role:   []byte(sseOpenAI(roleChunk)),
		first:  []byte(sseOpenAI(content("tok"))),
		next:   []byte(sseOpenAI(content(" tok"))),
		tail: []byte(sseOpenAI(finishChunk,
			fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, 50, tokens),
			"[DONE]")),
		turns: map[string]int{},
	}
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

func (s *capacityStub) report() capacityReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return capacityReport{Stamps: s.stamps, ConnsPeak: s.connsPeak.Load(), InFlightPeak: s.inFlightPeak.Load()}
}

func (s *capacityStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	entered := time.Now()
	switch r.URL.Path {
	case "/stamps":
		json.NewEncoder(w).Encode(s.report())
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	raisePeak(&s.inFlight, &s.inFlightPeak, 1)
	defer s.inFlight.Add(-1)
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("X-Claude-Code-Session-Id")
	s.mu.Lock()
	turn := s.turns[key]
	s.turns[key]++
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	w.Write(s.role)
	fl.Flush()
	first := time.Now()
	w.Write(s.first)
	fl.Flush()
	flushed := time.Now()
	s.mu.Lock()
	s.stamps = append(s.stamps, capacityStamp{Key: key, Turn: turn, Entered: entered.UnixNano(), First: first.UnixNano(), Flushed: flushed.UnixNano()})
	s.mu.Unlock()
	var tick *time.Timer
	if s.Pace > 0 {
		tick = time.NewTimer(s.Pace)
		defer tick.Stop()
	}
	for k := 1; k < s.Tokens; k++ {
		if tick != nil {
			// Absolute schedule: token k at first + k x Pace, whatever the
			// writes cost.
			tick.Reset(time.Until(first.Add(time.Duration(k) * s.Pace)))
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
		w.Write(s.next)
		fl.Flush()
	}
	w.Write(s.tail)
	fl.Flush()
}

// parseStubConfig reads "tokens=16,pace=25ms".
func parseStubConfig(cfg string) (tokens int, pace time.Duration, err error) {
	for _, kv := range strings.Split(cfg, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "tokens":
			tokens, err = strconv.Atoi(v)
		case "pace":
			pace, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("parsing stub config %q: %w", cfg, err)
		}
	}
	return tokens, pace, nil
}

// TestCapacityStubProcess is not a test: it is the out-of-process stub of
// BenchmarkCapacity (the test binary re-executed with capacityStubEnv set, the
// usual helper-process pattern). It serves on a loopback port, prints
// "listening <url>" on stdout, and exits when its stdin closes.
func TestCapacityStubProcess(t *testing.T) {
	cfg, ok := os.LookupEnv(capacityStubEnv)
	if !ok {
		t.Skip("helper process of BenchmarkCapacity")
	}
	tokens, pace, err := parseStubConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stub := newCapacityStub(tokens, pace)
	srv := httptest.NewUnstartedServer(stub)
	srv.Config.ConnState = stub.connState
	srv.Start()
	defer srv.Close()
	fmt.Printf("listening %s\n", srv.URL)
	io.Copy(io.Discard, os.Stdin)
}

// stubHandle is a running stub, in this process or another.
type stubHandle struct {
	URL   string
	stop  func() (capacityReport, error)
	child *exec.Cmd // nil in process
}

func startStubInProcess(tokens int, pace time.Duration) *stubHandle {
	stub := newCapacityStub(tokens, pace)
	srv := httptest.NewUnstartedServer(stub)
	srv.Config.ConnState = stub.connState
	srv.Start()
	return &stubHandle{URL: srv.URL, stop: func() (capacityReport, error) {
		srv.Close()
		return stub.report(), nil
	}}
}

func startStubProcess(tokens int, pace time.Duration) (*stubHandle, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCapacityStubProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=tokens=%d,pace=%s", capacityStubEnv, tokens, pace))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("starting stub process: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting stub process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting stub process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		stdin.Close()
		cmd.Wait()
		return nil, fmt.Errorf("starting stub process: first line %q: %v", line, err)
	}
	go io.Copy(io.Discard, stdout) // the helper's test output
	h := &stubHandle{URL: url, child: cmd}
	h.stop = func() (capacityReport, error) {
		var rep capacityReport
		resp, err := http.Get(url + "/stamps")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&rep)
			resp.Body.Close()
		}
		stdin.Close()
		if werr := cmd.Wait(); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			return rep, fmt.Errorf("stopping stub process: %w", err)
		}
		return rep, nil
	}
	return h, nil
}

// raiseOpenFiles lifts the soft open-file limit to the hard one when it is below
// what 1,000 client connections plus their server ends need (a child process
// inherits it).
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
// Session.ID * Step past its intended instant (capacityCase.staggerStep). Later
// turns and replacement sessions pass through unchanged.
type staggerClient struct {
	Inner   Client
	Step    time.Duration // simulated
	Initial int64         // sessions with ID < Initial are staggered
}

func (c staggerClient) Do(ctx context.Context, tr loadgen.TurnRequest, clock simclock.Clock) (loadgen.Result, string) {
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
func activeSessions(results []loadgen.Result, think, stageStart, from, to, step time.Duration) (mean float64, least int) {
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

// runtimeSnapshot is what the harness's own Go runtime reports (runtime/metrics).
type runtimeSnapshot struct {
	sched  *metrics.Float64Histogram // /sched/latencies:seconds
	pauses *metrics.Float64Histogram // /sched/pauses/total/gc:seconds
	gcs    uint64                    // /gc/cycles/total:gc-cycles
	cpu    time.Duration             // user + system CPU of this process
}

func readRuntime() runtimeSnapshot {
	s := []metrics.Sample{
		{Name: "/sched/latencies:seconds"},
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return runtimeSnapshot{
		sched:  s[0].Value.Float64Histogram(),
		pauses: s[1].Value.Float64Histogram(),
		gcs:    s[2].Value.Uint64(),
		cpu:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}
}

// histQuantile returns the upper bound of the bucket holding quantile q (0..1) of
// the counts added between before and after (same buckets), in seconds.
func histQuantile(before, after *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for i := range after.Counts {
		total += after.Counts[i] - before.Counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	var seen uint64
	for i := range after.Counts {
		seen += after.Counts[i] - before.Counts[i]
		if seen > rank || (q == 1 && seen == total) {
			return after.Buckets[i+1]
		}
	}
	return after.Buckets[len(after.Buckets)-1]
}

// loadAverage returns the first three fields of /proc/loadavg ("?" elsewhere).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// staggerStep returns the gap between the initial sessions' first turns: one
// session cycle (think + the stream's (tokens-1) x pace) divided by the sessions,
// so their turns are spread evenly over the cycle from the start (1 ms for 1 s of
// think and an unpaced stream). Without it, 1,000 sessions that a stage starts at
// one instant stay in lock-step against a stub whose every turn takes the same
// time (a real server's varying service times break the lock-step by
// themselves). 0 when the case is lock-step.
func (c capacityCase) staggerStep() time.Duration {
	if !c.spread {
		return 0
	}
	return (c.think + time.Duration(capacityTokens-1)*c.pace) / capacitySessions
}

// capacityCase is one condition of BenchmarkCapacity.
type capacityCase struct {
	name        string
	think       time.Duration
	pace        time.Duration // 0: content events back to back
	spread      bool          // spread the initial sessions' first turns over one cycle; false: lock-step
	stubProcess bool          // stub in its own process (default: in the harness's)
	gcPercent   int           // debug.SetGCPercent for the case; 0 = leave as is (GOGC)
}

// BenchmarkCapacity drives 1,000 concurrent closed-loop sessions through the real
// harness path (Run: Loop, one goroutine per turn, OpenAIClient, go-sse parsing)
// against a loopback stub that answers at once (capacityStub: no prefill delay; 16
// content events per turn, each flushed), and compares every turn's client-side
// first-token instant (Result.FirstToken on a speed-1 simclock.Scaled, converted to
// wall time with Clock.Wall) with the stub's wall-clock stamp taken right before it
// wrote the first content event. The difference is the harness's own TTFB
// measurement overhead: write syscall, loopback, netpoller wake-up, goroutine
// scheduling up to the Read that returns the event's bytes (where the client
// stamps), plus the CPU contention of everything else on the 2 cores.
// BenchmarkLoopbackFloor measures the same rhythm without the harness, for
// comparison.
//
// The stub runs inside the benchmark's process (sharing its Go scheduler, GC and
// cores) unless the case says stub-process: then it is the test binary re-executed
// as TestCapacityStubProcess, and the two processes' stamps are compared on the
// wall clock (CLOCK_REALTIME, which both read; a clock step during the run would
// show as unmatched or negative values, which are counted and logged). With two
// processes on 2 vCPUs the kernel's scheduling between them adds its own waits, so
// neither placement is the harness alone; both are reported.
//
// Conditions (sub-benchmarks); all keep 1,000 sessions of 4 turns for 15 s, and
// all but flat-out spread the initial sessions' first turns evenly over one
// session cycle (capacityCase.staggerStep), so the load is even from the start:
//   - paced: think time 0 and the stub pacing content events capacityPace (25 ms,
//     the simulator's single-sequence decode step) apart, so every session has a
//     stream open nearly all the time: ~1,000 concurrent streams, ~2,400 turns/s,
//     ~40,000 content events/s. This is the sentence taken literally:
//     1,000 sessions streaming at once.
//   - paced-think=1s, paced-think=10s: the same with 1 s (~710 turns/s, ~290
//     streams open, ~11,300 events/s) or 10 s (~96 turns/s, ~40 streams open,
//     ~1,500 events/s) of think time between a turn's end and the next send.
//   - paced-think=1s-gogc=400, paced-think=10s-gogc=400: the same with the Go
//     GC's target raised from 100% to 400% (debug.SetGCPercent, as GOGC=400 would):
//     a quarter of the GC cycles, whose mark phases (~15 ms each here, 1-2% of the
//     time at GOGC 100) are where most of the tail comes from.
//   - paced-think=1s-stub-process: paced-think=1s with the stub in its own process.
//   - unpaced-think=1s: the stub's content events back to back, 1 s think: the
//     condition the first version of this benchmark reported ("think=1s-staggered"),
//     kept for comparison (~1,000 turns/s, a few streams open at once).
//   - flat-out: think 0, events back to back, lock-step start: the harness's
//     maximum turn rate with both cores saturated; its overhead is run-queue
//     waiting, a capacity figure, not a latency.
//
// Metrics (b.N runs pooled; counts per run):
//
//	turns, turns/s, failed  completed turns in the stage, per stage second, failed turns
//	sessions-mean/-min   sessions the closed loop kept running (activeSessions),
//	                     sampled every 10 ms from 2 s to 2 s before the stage end
//	conns-peak           peak open connections at the stub
//	streams-peak         peak requests inside the stub's handler at once
//	ovh-p50/p99/max-ms   client FirstToken - stub first-content stamp, all turns
//	ovh-steady-p99-ms    the same, turns sent after the first 2 s
//	send-p99-ms          stub handler entry - client Sent (request path)
//	ttfb-p99-ms          client TTFB (FirstToken - Sent)
//	stub-write-p99-ms    the stub's first-content write and flush, from its stamp
//	                     to their return (the server's share of the overhead)
//	sched-p99-ms         the harness runtime's goroutine scheduling latency p99
//	                     (runtime/metrics /sched/latencies, bucket upper bound)
//	gc/s, gc-pause-max-ms  GC cycles per second and longest GC stop-the-world
//	cpu-harness-%, cpu-stub-%  CPU time over the run's wall time (100 = one core;
//	                     an in-process stub is counted in the harness)
//
// Timings are reported, never asserted. Run with (figures in scenarios/README.md)
// go test -run '^$' -bench 'Capacity$|LoopbackFloor' -benchtime 1x ./loadgen/
func BenchmarkCapacity(b *testing.B) {
	raiseOpenFiles(b, 4*capacitySessions+256)
	for _, c := range []capacityCase{
		{name: "paced", pace: capacityPace, spread: true},
		{name: "paced-think=1s", think: time.Second, pace: capacityPace, spread: true},
		{name: "paced-think=10s", think: 10 * time.Second, pace: capacityPace, spread: true},
		{name: "paced-think=1s-gogc=400", think: time.Second, pace: capacityPace, spread: true, gcPercent: 400},
		{name: "paced-think=10s-gogc=400", think: 10 * time.Second, pace: capacityPace, spread: true, gcPercent: 400},
		{name: "paced-think=1s-stub-process", think: time.Second, pace: capacityPace, spread: true, stubProcess: true},
		{name: "unpaced-think=1s", think: time.Second, spread: true},
		{name: "flat-out"},
	} {
		b.Run(c.name, func(b *testing.B) { benchCapacity(b, c) })
	}
}

func benchCapacity(b *testing.B, c capacityCase) {
	if c.gcPercent != 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(c.gcPercent))
	}
	newHist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute), 3) }
	ovh, ovhSteady, send, ttfb, flush := newHist(), newHist(), newHist(), newHist(), newHist()
	var turnsDone, failed, unmatched, negative int64
	var sessSum, schedP99, gcPauseMax, cpuHarness, cpuStub, wall float64
	var gcs uint64
	sessMin := -1
	var connsPeak, streamsPeak int64

	for b.Loop() {
		var stub *stubHandle
		if c.stubProcess {
			var err error
			if stub, err = startStubProcess(capacityTokens, c.pace); err != nil {
				b.Fatal(err)
			}
		} else {
			stub = startStubInProcess(capacityTokens, c.pace)
		}

		sc := (&loadgen.Scenario{
			Name:               "capacity",
			Seed:               7,
			Model:              "stub-model",
			SystemPromptTokens: 20,
			FirstTurnTokens:    30,
			TurnTokens:         20,
			Turns:              capacityTurns,
			MaxOutputTokens:    capacityTokens,
			ThinkTime:          c.think,
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
		var client Client = NewClient(sc, stub.URL, hc, nil)
		if step := c.staggerStep(); step > 0 {
			client = staggerClient{Inner: client, Step: step, Initial: capacitySessions}
		}
		var results []loadgen.Result
		load0 := loadAverage()
		rt0, t0 := readRuntime(), time.Now()
		m, err := Run(context.Background(), RunConfig{
			Scenario: sc,
			BaseURL:  stub.URL,
			Clock:    clock,
			HTTP:     hc,
			Client:   client,
			OnResult: func(r loadgen.Result) { results = append(results, r) },
			RunID:    "capacity",
		})
		rt1, el := readRuntime(), time.Since(t0)
		b.Logf("load average before %s, after %s", load0, loadAverage())
		tp.CloseIdleConnections()
		rep, stopErr := stub.stop()
		if err != nil {
			b.Fatalf("run: %v", err)
		}
		if stopErr != nil {
			b.Fatal(stopErr)
		}
		wall += el.Seconds()
		cpuHarness += (rt1.cpu - rt0.cpu).Seconds()
		if stub.child != nil {
			if ps := stub.child.ProcessState; ps != nil {
				cpuStub += (ps.UserTime() + ps.SystemTime()).Seconds()
			}
		}
		schedP99 = max(schedP99, histQuantile(rt0.sched, rt1.sched, 0.99))
		gcPauseMax = max(gcPauseMax, histQuantile(rt0.pauses, rt1.pauses, 1))
		gcs += rt1.gcs - rt0.gcs

		w0 := m.Variants[0].Stages[0]
		for _, w := range m.Variants[0].Stages {
			failed += int64(w.Failed)
		}
		connsPeak = max(connsPeak, rep.ConnsPeak)
		streamsPeak = max(streamsPeak, rep.InFlightPeak)
		mean, least := activeSessions(results, c.think, w0.Start,
			w0.Start+capacitySteady, w0.End-capacitySteady, 10*time.Millisecond)
		sessSum += mean
		if sessMin < 0 || least < sessMin {
			sessMin = least
		}

		type turnID struct {
			key  string
			turn int
		}
		stamps := make(map[turnID]capacityStamp, len(rep.Stamps))
		for _, st := range rep.Stamps {
			stamps[turnID{st.Key, st.Turn}] = st
		}
		steadyFrom := w0.Start + capacitySteady
		for _, r := range results {
			if !r.OK() || r.FirstToken == 0 {
				continue
			}
			turnsDone++
			st, ok := stamps[turnID{r.SessionKey, r.Turn}]
			if !ok {
				unmatched++
				continue
			}
			d := time.Duration(clock.Wall(r.FirstToken).UnixNano() - st.First)
			if d < 0 {
				negative++
				d = 0
			}
			_ = ovh.RecordValue(int64(d))
			if r.Sent >= steadyFrom {
				_ = ovhSteady.RecordValue(int64(d))
			}
			_ = send.RecordValue(max(st.Entered-clock.Wall(r.Sent).UnixNano(), 0))
			_ = ttfb.RecordValue(int64(r.TTFB()))
			_ = flush.RecordValue(max(st.Flushed-st.First, 0))
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
	b.ReportMetric(float64(streamsPeak), "streams-peak")
	b.ReportMetric(ms(ovh, 50), "ovh-p50-ms")
	b.ReportMetric(ms(ovh, 99), "ovh-p99-ms")
	b.ReportMetric(float64(ovh.Max())/1e6, "ovh-max-ms")
	b.ReportMetric(ms(ovhSteady, 99), "ovh-steady-p99-ms")
	b.ReportMetric(ms(send, 99), "send-p99-ms")
	b.ReportMetric(ms(ttfb, 99), "ttfb-p99-ms")
	b.ReportMetric(ms(flush, 99), "stub-write-p99-ms")
	b.ReportMetric(schedP99*1e3, "sched-p99-ms")
	b.ReportMetric(float64(gcs)/wall, "gc/s")
	b.ReportMetric(gcPauseMax*1e3, "gc-pause-max-ms")
	b.ReportMetric(100*cpuHarness/wall, "cpu-harness-%")
	b.ReportMetric(100*cpuStub/wall, "cpu-stub-%")
	if unmatched > 0 || negative > 0 {
		b.Logf("%d turns without a stub stamp, %d with the client instant before the stamp", unmatched, negative)
	}
}

// floorFrame is one message of BenchmarkLoopbackFloor: the server's wall-clock
// stamp (Unix nanoseconds, little-endian) taken right before the write.
const floorFrame = 8

// BenchmarkLoopbackFloor is BenchmarkCapacity's control: the same rhythm over the
// same loopback on the same cores, without HTTP, SSE, JSON, the Loop or the
// runner. 1,000 client goroutines each hold one TCP connection and repeat: send
// one byte (the request), read capacityTokens 8-byte frames that the server writes
// at once and then capacityPace apart (each frame the server's wall-clock stamp
// taken right before its write), then wait the think time (first sends spread as
// in BenchmarkCapacity). The first frame's delay (client instant after the Read
// that completed it - server stamp) is what the TTFB overhead is in
// BenchmarkCapacity; its tail here is what this machine, its kernel and the Go
// runtime give any program at that rate. Metrics as BenchmarkCapacity's ovh-*,
// turns/s, sched-p99-ms and cpu-%.
func BenchmarkLoopbackFloor(b *testing.B) {
	raiseOpenFiles(b, 4*capacitySessions+256)
	for _, think := range []time.Duration{0, time.Second, 10 * time.Second} {
		name := "paced"
		if think > 0 {
			name = fmt.Sprintf("paced-think=%s", think)
		}
		b.Run(name, func(b *testing.B) {
			benchFloor(b, capacityCase{think: think, pace: capacityPace, spread: true})
		})
	}
}

func floorServe(c net.Conn) {
	defer c.Close()
	req := make([]byte, 1)
	frame := make([]byte, floorFrame)
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		first := time.Now()
		for k := range capacityTokens {
			if k > 0 {
				tick.Reset(time.Until(first.Add(time.Duration(k) * capacityPace)))
				<-tick.C
			}
			now := time.Now().UnixNano()
			for i := range floorFrame {
				frame[i] = byte(now >> (8 * i))
			}
			if _, err := c.Write(frame); err != nil {
				return
			}
		}
	}
}

func benchFloor(b *testing.B, c capacityCase) {
	newHist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute), 3) }
	first, steady := newHist(), newHist()
	var turns int64
	var schedP99, cpu, wall float64
	for b.Loop() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		var served sync.WaitGroup
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				served.Go(func() { floorServe(c) })
			}
		}()
		rt0, t0 := readRuntime(), time.Now()
		load0 := loadAverage()
		end, steadyFrom := t0.Add(capacityStage), t0.Add(capacitySteady)
		type sample struct {
			d      time.Duration
			steady bool
		}
		perClient := make([][]sample, capacitySessions)
		var clients sync.WaitGroup
		for i := range capacitySessions {
			clients.Go(func() {
				time.Sleep(time.Until(t0.Add(time.Duration(i) * c.staggerStep())))
				conn, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer conn.Close()
				frame := make([]byte, floorFrame)
				for time.Now().Before(end) {
					sent := time.Now()
					if _, err := conn.Write([]byte{1}); err != nil {
						b.Error(err)
						return
					}
					for k := range capacityTokens {
						if _, err := io.ReadFull(conn, frame); err != nil {
							b.Error(err)
							return
						}
						if k == 0 {
							now := time.Now().UnixNano()
							var st int64
							for j := range floorFrame {
								st |= int64(frame[j]) << (8 * j)
							}
							perClient[i] = append(perClient[i], sample{time.Duration(max(now-st, 0)), !sent.Before(steadyFrom)})
						}
					}
					time.Sleep(c.think)
				}
			})
		}
		clients.Wait()
		rt1, el := readRuntime(), time.Since(t0)
		b.Logf("load average before %s, after %s", load0, loadAverage())
		ln.Close()
		served.Wait()
		wall += el.Seconds()
		cpu += (rt1.cpu - rt0.cpu).Seconds()
		schedP99 = max(schedP99, histQuantile(rt0.sched, rt1.sched, 0.99))
		for _, ss := range perClient {
			for _, s := range ss {
				turns++
				_ = first.RecordValue(int64(s.d))
				if s.steady {
					_ = steady.RecordValue(int64(s.d))
				}
			}
		}
	}
	runs := float64(b.N)
	ms := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e6 }
	b.ReportMetric(float64(turns)/runs/capacityStage.Seconds(), "turns/s")
	b.ReportMetric(ms(first, 50), "ovh-p50-ms")
	b.ReportMetric(ms(first, 99), "ovh-p99-ms")
	b.ReportMetric(float64(first.Max())/1e6, "ovh-max-ms")
	b.ReportMetric(ms(steady, 99), "ovh-steady-p99-ms")
	b.ReportMetric(schedP99*1e3, "sched-p99-ms")
	b.ReportMetric(100*cpu/wall, "cpu-%")
}
