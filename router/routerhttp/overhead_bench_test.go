package routerhttp

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/lmwarden/warden/internal/wire"
)

// Shape of BenchmarkProxyOverhead (docs/router.md section 10): overheadStreams
// concurrent streamed POST /v1/chat/completions, each answered by a loopback stub
// with overheadEvents OpenAI chat-chunk SSE events, then "data: [DONE]".
//
// saturated: the stub writes and flushes the events one by one with no pause and
// all streams of a round start at once; overheadPairs direct/routed round pairs
// run per iteration, plus overheadSerial one-stream-at-a-time requests per side
// after each round.
//
// paced: the stub sends the response headers at once, then one event per
// pacedInterval (the first one after one interval), the way vLLM streams one token
// per decode step; starts are staggered and pacedStreamsPerSlot streams per slot
// are measured per iteration.
const (
	overheadStreams = 64
	overheadEvents  = 256
	overheadPairs   = 8
	overheadSerial  = 16 // single-stream requests per side per pair (contention-free TTFB)

	// pacedInterval is the time between two events of a paced stream: one vLLM
	// decode step of a small model. docs/simulator.md gives the a4000-qwen3-4b
	// profile 25.5 ms per step at short context and 29.5-41.9 ms at 10k tokens;
	// 20 ms is a little faster than the fastest of these, so the router relays
	// events at least as often as it would in front of that model.
	pacedInterval = 20 * time.Millisecond
	// pacedStreamsPerSlot streams are measured per slot and iteration, after one
	// unmeasured stream that staggers the slot's start.
	pacedStreamsPerSlot = 4
)

// overheadChunk is one OpenAI chat.completion.chunk as vLLM streams it (one token
// of content per event).
const overheadChunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1760000000,` +
	`"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}` + "\n\n"

const overheadDone = "data: [DONE]\n\n"

// headerBenchStream names a benchmark stream, so the stub can tell the client how
// long it took to write the stream's first event (overheadStub.upstreamWait).
const headerBenchStream = "X-Bench-Stream"

// overheadStub is the upstream. It drains the request body and, on
// /v1/chat/completions, streams overheadEvents chunks, flushing after each, then
// [DONE]. With interval 0 the chunks are written flat out; otherwise the headers
// are flushed at once and chunk k (k = 0, 1, ...) is written (k+1) x interval after
// the handler started, so the first chunk comes one interval late (the step that
// yields the first token) and a late write does not delay the ones after it. A
// client that goes away ends the stream. Other paths (/health, /metrics) answer 200
// with an empty body (the router's probes do not run here: Run is not called).
type overheadStub struct {
	interval time.Duration
	waits    sync.Map // X-Bench-Stream value -> time.Duration, handler start -> first chunk written
}

func (st *overheadStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	io.Copy(io.Discard, r.Body)
	if r.URL.Path != "/v1/chat/completions" {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f := w.(http.Flusher)
	var timer *time.Timer
	if st.interval > 0 {
		f.Flush() // headers now, as vLLM's StreamingResponse sends them
		timer = time.NewTimer(time.Until(start.Add(st.interval)))
		defer timer.Stop()
	}
	for k := range overheadEvents {
		if timer != nil {
			select {
			case <-r.Context().Done():
				return
			case <-timer.C:
			}
			timer.Reset(time.Until(start.Add(time.Duration(k+2) * st.interval)))
		}
		if k == 0 {
			if id := r.Header.Get(headerBenchStream); id != "" {
				st.waits.Store(id, time.Since(start))
			}
		}
		io.WriteString(w, overheadChunk)
		f.Flush()
	}
	io.WriteString(w, overheadDone)
	f.Flush()
}

// upstreamWait returns and forgets how long the stub took from starting stream id
// to writing its first chunk.
func (st *overheadStub) upstreamWait(id string) (time.Duration, error) {
	v, ok := st.waits.LoadAndDelete(id)
	if !ok {
		return 0, fmt.Errorf("reading stub timing: stream %q not seen", id)
	}
	return v.(time.Duration), nil
}

// overheadStream is what one stream measured.
type overheadStream struct {
	ttfb   time.Duration // request sent -> first body byte read
	hop    time.Duration // ttfb minus the stub's own wait for the first chunk (paced only)
	events int           // chunks read, [DONE] excluded
	active time.Duration // request sent -> last byte read
	end    time.Time     // when the last byte was read
}

// readOverheadStream sends one streamed chat completion to base (a
// "http://127.0.0.1:port" URL) with X-Session-ID session and reads it to EOF; id,
// when not "", goes in X-Bench-Stream. It fails if the request fails, the status
// is not 200 or the stream does not carry exactly overheadEvents chunks and then
// [DONE].
func readOverheadStream(client *http.Client, base string, body []byte, session, id string) (overheadStream, error) {
	var s overheadStream
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return s, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderSessionID, session)
	if id != "" {
		req.Header.Set(headerBenchStream, id)
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return s, fmt.Errorf("sending request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("reading response: status %d", resp.StatusCode)
	}
	buf := make([]byte, 32<<10)
	got := make([]byte, 0, overheadEvents*len(overheadChunk)+len(overheadDone))
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && len(got) == 0 {
			s.ttfb = time.Since(sent)
		}
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, fmt.Errorf("reading stream: %w", err)
		}
	}
	s.end = time.Now()
	s.active = s.end.Sub(sent)
	s.events = bytes.Count(got, []byte("chat.completion.chunk"))
	if s.events != overheadEvents || !bytes.HasSuffix(got, []byte(overheadDone)) {
		return s, fmt.Errorf("reading stream: %d chunks of %d, [DONE] last %v",
			s.events, overheadEvents, bytes.HasSuffix(got, []byte(overheadDone)))
	}
	return s, nil
}

// overheadRound is what one saturated round of concurrent streams measured.
type overheadRound struct {
	ttfb   []time.Duration // per stream
	events int             // events read across all streams, [DONE] excluded
	wall   time.Duration   // first request sent -> last stream finished
}

// runOverheadRound starts streams streams at once against base and reads each to
// EOF. Stream i carries X-Session-ID "bench-<i>", so routed rounds after the first
// take the sticky path. It returns the first stream's error, if any.
func runOverheadRound(client *http.Client, base string, body []byte, streams int) (overheadRound, error) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		res   = make([]overheadStream, streams)
		errs  = make([]error, streams)
	)
	for i := range streams {
		wg.Go(func() {
			<-start
			res[i], errs[i] = readOverheadStream(client, base, body, "bench-"+strconv.Itoa(i), "")
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	var r overheadRound
	var last time.Time
	for i := range streams {
		if errs[i] != nil {
			return r, errs[i]
		}
		r.ttfb = append(r.ttfb, res[i].ttfb)
		r.events += res[i].events
		if res[i].end.After(last) {
			last = res[i].end
		}
	}
	r.wall = last.Sub(t0)
	return r, nil
}

// runPacedRound runs 2 x overheadStreams slots at once: even slots stream from
// bases[0], odd slots from bases[1], so both sides run side by side with
// overheadStreams streams each in progress. Slot i starts i/(2 x overheadStreams)
// of a stream's length late (its first stream is not measured: it staggers the
// starts and opens the slot's connections), then runs pacedStreamsPerSlot measured
// streams back to back. Every measured stream starts while all slots are busy (a
// slot starts its first stream less than one stream length after any other, and
// each slot runs 1 + pacedStreamsPerSlot streams). Slot i's session is
// "paced-<i>"; each stream's hop is its TTFB minus the stub's upstreamWait. It
// returns the measured streams of each side and the first error.
func runPacedRound(client *http.Client, stub *overheadStub, bases [2]string, body []byte) ([2][]overheadStream, error) {
	slots := 2 * overheadStreams
	streamLen := overheadEvents * pacedInterval
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		out  [2][]overheadStream
		errs = make([]error, slots)
	)
	t0 := time.Now()
	for i := range slots {
		wg.Go(func() {
			time.Sleep(time.Until(t0.Add(streamLen * time.Duration(i) / time.Duration(slots))))
			for k := range 1 + pacedStreamsPerSlot {
				id := strconv.Itoa(i) + "/" + strconv.Itoa(k)
				s, err := readOverheadStream(client, bases[i%2], body, "paced-"+strconv.Itoa(i), id)
				if err != nil {
					errs[i] = err
					return
				}
				wait, err := stub.upstreamWait(id)
				if err != nil {
					errs[i] = err
					return
				}
				s.hop = s.ttfb - wait
				if k > 0 {
					mu.Lock()
					out[i%2] = append(out[i%2], s)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// overheadSide accumulates one side (direct or routed) over all rounds.
type overheadSide struct {
	hist   *hdrhistogram.Histogram // TTFB, nanoseconds
	hops   *hdrhistogram.Histogram // paced: TTFB minus the stub's wait, nanoseconds
	events int
	wall   time.Duration // saturated: summed round wall times; paced: summed stream active times
}

func newOverheadSide() *overheadSide {
	// 1 ns .. 60 s at 3 significant digits.
	return &overheadSide{
		hist: hdrhistogram.New(1, int64(60*time.Second), 3),
		hops: hdrhistogram.New(1, int64(60*time.Second), 3),
	}
}

func (s *overheadSide) recordTTFB(d time.Duration) error {
	if err := s.hist.RecordValue(int64(d)); err != nil {
		return fmt.Errorf("recording ttfb %v: %w", d, err)
	}
	return nil
}

func (s *overheadSide) addPaced(st overheadStream) error {
	if err := s.recordTTFB(st.ttfb); err != nil {
		return err
	}
	if err := s.hops.RecordValue(int64(st.hop)); err != nil {
		return fmt.Errorf("recording hop %v: %w", st.hop, err)
	}
	s.events += st.events
	s.wall += st.active
	return nil
}

func (s *overheadSide) add(r overheadRound) error {
	for _, d := range r.ttfb {
		if err := s.recordTTFB(d); err != nil {
			return err
		}
	}
	s.events += r.events
	s.wall += r.wall
	return nil
}

// ms returns quantile q (0..100) of the TTFB histogram in milliseconds
// (hdrhistogram-go ValueAtQuantile).
func (s *overheadSide) ms(q float64) float64 {
	return float64(s.hist.ValueAtQuantile(q)) / 1e6
}

// hopMs is ms for the paced hop histogram.
func (s *overheadSide) hopMs(q float64) float64 {
	return float64(s.hops.ValueAtQuantile(q)) / 1e6
}

// eventsPerSec is events read over the summed wall time.
func (s *overheadSide) eventsPerSec() float64 {
	return float64(s.events) / s.wall.Seconds()
}

// schedLatencies reads the Go runtime's histogram of the time goroutines spent
// runnable before running (runtime/metrics "/sched/latencies:seconds",
// cumulative since the process started).
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// reportSchedLatency reports quantiles 50, 90 and 99 of the scheduling latencies
// recorded between before and after, in microseconds (the upper bound of the
// histogram bucket the quantile falls in). On this 2-core virtual machine a
// goroutine woken on an idle core waits tens to hundreds of microseconds, and
// every hop of a proxied request wakes goroutines, so these figures put the
// TTFB overheads in scale.
func reportSchedLatency(b *testing.B, prefix string, before, after *metrics.Float64Histogram) {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return
	}
	var total uint64
	for i := range after.Counts {
		total += after.Counts[i] - before.Counts[i]
	}
	if total == 0 {
		return
	}
	for _, q := range []float64{50, 90, 99} {
		var seen uint64
		for i := range after.Counts {
			seen += after.Counts[i] - before.Counts[i]
			if float64(seen) >= q/100*float64(total) {
				b.ReportMetric(after.Buckets[i+1]*1e6, fmt.Sprintf("%ssched_latency_p%.0f_us", prefix, q))
				break
			}
		}
	}
}

// overheadFixture is the benchmark's loopback setup: a stub upstream, a router in
// front of it (NewFromURLs, affinity on, one replica: the stub; logs discarded)
// and a client with enough keep-alive connections for every stream.
type overheadFixture struct {
	stub           *overheadStub
	direct, routed string // base URLs
	client         *http.Client
	body           []byte
}

func newOverheadFixture(b *testing.B, interval time.Duration) *overheadFixture {
	stub := &overheadStub{interval: interval}
	up := httptest.NewServer(stub)
	b.Cleanup(up.Close)
	rt, err := NewFromURLs([]string{"stub=" + up.URL}, true, 4*overheadStreams, nil)
	if err != nil {
		b.Fatal(err)
	}
	rt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	front := httptest.NewServer(rt.Handler())
	b.Cleanup(front.Close)
	tr := &http.Transport{
		MaxIdleConns:        8 * overheadStreams,
		MaxIdleConnsPerHost: 2 * overheadStreams,
		DisableCompression:  true,
	}
	b.Cleanup(tr.CloseIdleConnections)
	return &overheadFixture{stub: stub, direct: up.URL, routed: front.URL, client: &http.Client{Transport: tr}, body: []byte(chatBody("m"))}
}

// reportOverhead reports one condition's TTFB quantiles, their routed - direct
// differences and the throughput ratio, each metric name prefixed with prefix.
func reportOverhead(b *testing.B, prefix string, direct, routed *overheadSide) {
	b.ReportMetric(direct.ms(50), prefix+"direct_ttfb_p50_ms")
	b.ReportMetric(direct.ms(99), prefix+"direct_ttfb_p99_ms")
	b.ReportMetric(routed.ms(50), prefix+"routed_ttfb_p50_ms")
	b.ReportMetric(routed.ms(99), prefix+"routed_ttfb_p99_ms")
	b.ReportMetric(routed.ms(50)-direct.ms(50), prefix+"ttfb_p50_overhead_ms")
	b.ReportMetric(routed.ms(99)-direct.ms(99), prefix+"ttfb_p99_overhead_ms")
	b.ReportMetric(routed.eventsPerSec()/direct.eventsPerSec(), prefix+"throughput_ratio")
	b.ReportMetric(float64(direct.hist.TotalCount()), prefix+"ttfb_samples/side")
}

// BenchmarkProxyOverhead measures what the router adds to a streamed chat
// completion, side by side in one run: overheadStreams concurrent streams straight
// to a loopback stub (direct) and the same streams through the router to that stub
// (routed). Client, router and stub share the process and the machine's cores.
// TTFB is request sent -> first event byte read; overhead is routed minus direct
// of each quantile. The targets (overhead p50 < 0.3 ms, p99 < 2 ms,
// throughput ratio >= 0.70) are not asserted; docs/router.md section 10 ("Proxy
// overhead") records runs.
//
// saturated (1 to 3 s an iteration here): all streams of a round start at once and
// the stub writes flat out, so the two cores are saturated and TTFB is mostly CPU
// queueing. Each iteration runs overheadPairs pairs of rounds, alternating which
// side goes first. Reported with prefix sat_: TTFB quantiles and overheads,
// direct and routed events/s (events read over summed round wall time) and their
// ratio. serial_* come from overheadSerial one-stream-at-a-time requests per side
// after each round: the TTFB cost of the hop without other streams competing.
//
// Both conditions also report <prefix>sched_latency_p50/p90/p99_us, the Go
// scheduler's runnable-to-running latency over the condition (reportSchedLatency).
//
// paced (about 6 stream lengths, 31 s, an iteration): runPacedRound, overheadStreams
// direct and overheadStreams routed streams in progress at once, starts staggered,
// events paced at pacedInterval. Reported with prefix paced_: TTFB quantiles and
// overheads; the same for the hop, TTFB minus the stub's own time from starting
// the stream to writing its first chunk (the request's way to the stub plus the
// first chunk's way back: this leaves out the first step's pacedInterval and the
// lateness of the stub's timer, which both sides share but which widen the TTFB
// spread); and the throughput ratio of events over summed stream time (request
// sent -> last byte), which is 1 when the router keeps the upstream's pace.
func BenchmarkProxyOverhead(b *testing.B) {
	b.Run("saturated", benchOverheadSaturated)
	b.Run("paced", benchOverheadPaced)
}

func benchOverheadSaturated(b *testing.B) {
	f := newOverheadFixture(b, 0)
	// Warm up: open the keep-alive connections (client->stub, client->router,
	// router->stub) and place the sessions, so rounds measure steady state.
	for _, base := range []string{f.direct, f.routed} {
		if _, err := runOverheadRound(f.client, base, f.body, overheadStreams); err != nil {
			b.Fatal(err)
		}
	}
	direct, routed := newOverheadSide(), newOverheadSide()
	serialDirect, serialRouted := newOverheadSide(), newOverheadSide()
	round := 0
	sched0 := schedLatencies()
	for b.Loop() {
		for range overheadPairs {
			order := []struct {
				base         string
				side, serial *overheadSide
			}{{f.direct, direct, serialDirect}, {f.routed, routed, serialRouted}}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			round++
			for _, o := range order {
				r, err := runOverheadRound(f.client, o.base, f.body, overheadStreams)
				if err != nil {
					b.Fatal(err)
				}
				if err := o.side.add(r); err != nil {
					b.Fatal(err)
				}
				for range overheadSerial {
					r, err := runOverheadRound(f.client, o.base, f.body, 1)
					if err != nil {
						b.Fatal(err)
					}
					if err := o.serial.add(r); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	b.StopTimer()
	reportSchedLatency(b, "sat_", sched0, schedLatencies())
	reportOverhead(b, "sat_", direct, routed)
	b.ReportMetric(direct.eventsPerSec(), "sat_direct_events/s")
	b.ReportMetric(routed.eventsPerSec(), "sat_routed_events/s")
	// One stream at a time: the per-request cost without CPU contention.
	b.ReportMetric(serialRouted.ms(50)-serialDirect.ms(50), "serial_ttfb_p50_overhead_ms")
	b.ReportMetric(serialRouted.ms(99)-serialDirect.ms(99), "serial_ttfb_p99_overhead_ms")
	b.ReportMetric(serialDirect.ms(50), "serial_direct_ttfb_p50_ms")
	b.ReportMetric(serialRouted.ms(50), "serial_routed_ttfb_p50_ms")
}

func benchOverheadPaced(b *testing.B) {
	f := newOverheadFixture(b, pacedInterval)
	sides := [2]*overheadSide{newOverheadSide(), newOverheadSide()}
	sched0 := schedLatencies()
	for b.Loop() {
		out, err := runPacedRound(f.client, f.stub, [2]string{f.direct, f.routed}, f.body)
		if err != nil {
			b.Fatal(err)
		}
		for i, streams := range out {
			for _, s := range streams {
				if err := sides[i].addPaced(s); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	reportSchedLatency(b, "paced_", sched0, schedLatencies())
	direct, routed := sides[0], sides[1]
	reportOverhead(b, "paced_", direct, routed)
	b.ReportMetric(direct.hopMs(50), "paced_direct_hop_p50_ms")
	b.ReportMetric(direct.hopMs(99), "paced_direct_hop_p99_ms")
	b.ReportMetric(routed.hopMs(50)-direct.hopMs(50), "paced_hop_p50_overhead_ms")
	b.ReportMetric(routed.hopMs(99)-direct.hopMs(99), "paced_hop_p99_overhead_ms")
	b.ReportMetric(float64(pacedInterval)/1e6, "paced_interval_ms")
}
