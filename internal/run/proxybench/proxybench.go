// Package proxybench measures warden's proxy path side by side with nginx and
// HAProxy (docs/router.md section 10, "Side by side with nginx and HAProxy"): a
// paced SSE stub upstream on several loopback ports (the
// replicas), each proxy as its own process with an equivalent config (keyed on
// the session header, keep-alive upstream connections, no buffering), and
// phases of C concurrent paced streams sent direct and through each proxy in
// turn, in interleaved rounds. It reports the TTFB each proxy adds over direct
// (p50/p90/p99, per round and pooled) and each proxy process's CPU seconds per
// 1,000 streams (utime+stime from /proc/PID/stat). A dev tool: `make
// proxy-bench` (docs/router.md, "Side by side with nginx and HAProxy").
package proxybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/internal/wire"
)

// Options are the benchmark's knobs; zero fields take the defaults below.
type Options struct {
	Out      string        // results directory (created)
	Exe      string        // the warden binary (default: this executable)
	Levels   []int         // concurrent streams per phase (default 32, 256)
	Rounds   int           // interleaved rounds (default 5)
	PerSlot  int           // measured streams per slot and phase, after one unmeasured (default 4)
	Events   int           // events per stream (default 64)
	Interval time.Duration // between two events (default 20 ms: one decode step of a small model)
	Replicas int           // stub upstream ports (default 4)
	// Peers are the proxies to run besides direct: warden, nginx, haproxy
	// (default all three). A peer whose binary is missing is skipped with a
	// message.
	Peers []string
	// Profile, when set, runs warden under `warden proxybench profile-route`,
	// which writes cpu.pprof and allocs.pprof into this directory.
	Profile string
	// Baseline, when set, is another warden binary run as a further target
	// (warden-base), e.g. the code before a change, side by side in one run.
	Baseline string
	Log      io.Writer // progress lines (default os.Stderr)
	// Idle is how long the proxies' CPU is measured with no traffic before the
	// rounds (default 10 s; negative: not measured).
	Idle time.Duration
}

func (o *Options) defaults() error {
	if o.Out == "" {
		return errors.New("proxybench: no results directory (--out)")
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("proxybench: locating the warden binary: %w", err)
		}
		o.Exe = exe
	}
	if len(o.Levels) == 0 {
		o.Levels = []int{32, 256}
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.PerSlot == 0 {
		o.PerSlot = 4
	}
	if o.Events == 0 {
		o.Events = 64
	}
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
	}
	if o.Replicas == 0 {
		o.Replicas = 4
	}
	if len(o.Peers) == 0 {
		o.Peers = []string{Warden, Nginx, HAProxy}
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Idle == 0 {
		o.Idle = 10 * time.Second
	}
	for _, l := range o.Levels {
		if l < 1 {
			return fmt.Errorf("proxybench: concurrency %d: want at least 1", l)
		}
	}
	if o.Rounds < 1 || o.PerSlot < 1 || o.Events < 1 || o.Interval <= 0 || o.Replicas < 1 {
		return fmt.Errorf("proxybench: rounds %d, per-slot %d, events %d, interval %s, replicas %d: each must be positive",
			o.Rounds, o.PerSlot, o.Events, o.Interval, o.Replicas)
	}
	for _, p := range o.Peers {
		if p != Warden && p != Nginx && p != HAProxy {
			return fmt.Errorf("proxybench: unknown peer %q (want %s, %s or %s)", p, Warden, Nginx, HAProxy)
		}
	}
	return nil
}

func numCPU() int { return runtime.NumCPU() }

// measureIdle sets each target's idle CPU seconds per minute over window.
func measureIdle(ctx context.Context, targets []*target, window time.Duration) error {
	before := make([]float64, len(targets))
	for i, t := range targets {
		u, s, err := cpuSeconds(t.pids)
		if err != nil {
			return err
		}
		before[i] = u + s
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	for i, t := range targets {
		u, s, err := cpuSeconds(t.pids)
		if err != nil {
			return err
		}
		t.idlePerMin = (u + s - before[i]) / window.Minutes()
	}
	return nil
}

// phaseResult is what one phase (one target, one concurrency, one round)
// measured.
type phaseResult struct {
	target         string
	level, round   int
	ttfb, hop      *hdrhistogram.Histogram // microseconds, measured streams only
	streams        int                     // streams completed (measured and not)
	failed         int                     // streams that errored or came back short
	firstErr       error
	cpu, sys       float64 // CPU seconds of the target's processes over the phase (user+system, system)
	wall           time.Duration
	loadStart, end string
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600_000_000, 3) }

// Run starts the stub and the proxies, runs Rounds rounds of every level over
// every target (the targets' order rotates by round, and so does the levels'),
// and writes results.csv, summary.md and the proxies' configs into Out.
func Run(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755) // nginx's workers (user nobody) read nothing there, but traverse it
	meta := runMeta{start: time.Now().UTC(), loadStart: loadAvg(), uptimeStart: uptime()}
	st, err := startStub(o.Replicas, o.Events, o.Interval)
	if err != nil {
		return err
	}
	defer st.close()
	targets := []*target{directTarget(st)}
	defer func() {
		for _, t := range targets {
			t.stop()
		}
	}()
	peers := o.Peers
	if o.Baseline != "" {
		peers = append(slices.Clone(peers), WardenBase)
	}
	for _, name := range peers {
		var (
			t    *target
			addr string
			err  error
		)
		switch name {
		case Warden:
			t, addr, err = wardenTarget(Warden, o.Exe, st, work, o.Profile)
		case WardenBase:
			t, addr, err = wardenTarget(WardenBase, o.Baseline, st, work, "")
		case Nginx:
			t, addr, err = nginxTarget(st, work)
		case HAProxy:
			t, addr, err = haproxyTarget(st, work)
		}
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				fmt.Fprintf(o.Log, "proxybench: %s skipped: %v\n", name, err)
				meta.skipped = append(meta.skipped, name+": "+err.Error())
				continue
			}
			return fmt.Errorf("proxybench: %s: %w", name, err)
		}
		if err := t.start(ctx, addr); err != nil {
			return fmt.Errorf("proxybench: %w", err)
		}
		fmt.Fprintf(o.Log, "proxybench: %s up on %s (pids %v)\n", name, addr, t.pids)
		targets = append(targets, t)
	}
	// Idle: every proxy up, no traffic (warden still scrapes /metrics and
	// checks /health of each replica; nginx and HAProxy do neither).
	if o.Idle > 0 {
		if err := measureIdle(ctx, targets, o.Idle); err != nil {
			return err
		}
	}
	b := &bench{o: o, st: st}
	results, err := b.rounds(ctx, targets, newClients(targets, o.Levels))
	if err != nil {
		return err
	}
	for _, t := range targets[1:] {
		t.stop()
	}
	meta.end = time.Now().UTC()
	meta.loadEnd, meta.uptimeEnd = loadAvg(), uptime()
	for _, t := range targets {
		meta.targets = append(meta.targets, t)
		if t.cmd != nil {
			name := t.name + ".conf"
			if t.name == Warden || t.name == WardenBase {
				name = t.name + "-command.txt"
			}
			if err := os.WriteFile(filepath.Join(o.Out, name), []byte(t.config), 0o644); err != nil {
				return err
			}
		}
	}
	return writeResults(o, meta, results)
}

// bench runs phases.
type bench struct {
	o  Options
	st *stub
}

// newClients returns one HTTP client per target, each keeping enough idle
// connections for the highest of levels.
func newClients(targets []*target, levels []int) map[string]*http.Client {
	maxLevel := 0
	for _, l := range levels {
		maxLevel = max(maxLevel, l)
	}
	clients := map[string]*http.Client{}
	for _, t := range targets {
		clients[t.name] = &http.Client{Transport: &http.Transport{
			MaxIdleConns: 0, MaxIdleConnsPerHost: maxLevel + 16, DisableCompression: true,
			IdleConnTimeout: 90 * time.Second,
		}}
	}
	return clients
}

// rounds runs one unrecorded warm-up phase per target at the lowest level, then
// Rounds rounds of every level over every target (orders rotating by round).
func (b *bench) rounds(ctx context.Context, targets []*target, clients map[string]*http.Client) ([]phaseResult, error) {
	var results []phaseResult
	// One warm-up phase per target at the lowest level: connections made,
	// warden's sessions placed; not recorded.
	for _, t := range targets {
		if _, err := b.phase(ctx, t, clients[t.name], b.o.Levels[0], -1); err != nil {
			return nil, err
		}
	}
	for r := range b.o.Rounds {
		for li := range b.o.Levels {
			level := b.o.Levels[(li+r)%len(b.o.Levels)]
			for ti := range targets {
				t := targets[(ti+r)%len(targets)]
				res, err := b.phase(ctx, t, clients[t.name], level, r)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(b.o.Log, "proxybench: round %d, %d streams, %-7s: ttfb p50 %.2f ms p99 %.2f ms, %d streams, %d failed, cpu %.2f s, load %s\n",
					r+1, level, t.name, ms(res.ttfb.ValueAtQuantile(50)), ms(res.ttfb.ValueAtQuantile(99)),
					res.streams, res.failed, res.cpu, res.end)
				results = append(results, res)
			}
		}
	}
	return results, nil
}

// phase runs level slots against t: slot i starts at i/level of one stream's
// length, runs one unmeasured stream, then PerSlot measured ones back to back,
// so every measured stream starts while all level slots are streaming. Each
// slot is one conversation (its own session key, the same over rounds).
func (b *bench) phase(ctx context.Context, t *target, c *http.Client, level, round int) (phaseResult, error) {
	res := phaseResult{target: t.name, level: level, round: round, ttfb: newHist(), hop: newHist(), loadStart: loadAvg()}
	u0, s0, err := cpuSeconds(t.pids)
	if err != nil {
		return res, err
	}
	streamLen := time.Duration(b.o.Events) * b.o.Interval
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := time.Now()
	for i := range level {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(streamLen * time.Duration(i) / time.Duration(level)):
			}
			key := fmt.Sprintf("pb-%d-%d", level, i)
			for j := range 1 + b.o.PerSlot {
				id := fmt.Sprintf("%s-%d-%d-%d-%d", t.name, level, round, i, j)
				ttfb, err := b.stream(ctx, c, t.base(key), key, id)
				var wait time.Duration
				if err == nil {
					wait, err = b.st.wait(id)
				}
				mu.Lock()
				res.streams++
				if err != nil {
					res.failed++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else if j > 0 {
					res.ttfb.RecordValue(max(1, ttfb.Microseconds()))
					res.hop.RecordValue(max(1, (ttfb - wait).Microseconds()))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	u1, s1, err := cpuSeconds(t.pids)
	if err != nil {
		return res, err
	}
	res.cpu, res.sys = u1-u0+s1-s0, s1-s0
	res.end = loadAvg()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if res.failed > res.streams/100 {
		return res, fmt.Errorf("proxybench: %s, %d streams: %d of %d streams failed, first: %v", t.name, level, res.failed, res.streams, res.firstErr)
	}
	return res, nil
}

// chatBody is the request every stream sends (90 bytes, like a short chat turn).
const chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"say hi"}],"max_tokens":64}`

// stream sends one streamed chat completion and reads it to the end. TTFB is
// request sent -> first body byte read (the stub sends the headers at once, so
// this is the first event).
func (b *bench) stream(ctx context.Context, c *http.Client, base, key, id string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+wire.PathChatCompletions, strings.NewReader(chatBody))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderSession, key)
	req.Header.Set(HeaderStream, id)
	sent := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: status %d", base, resp.StatusCode)
	}
	buf := make([]byte, 32<<10)
	n, err := resp.Body.Read(buf)
	for n == 0 && err == nil {
		n, err = resp.Body.Read(buf)
	}
	ttfb := time.Since(sent)
	total := n
	for err == nil {
		n, err = resp.Body.Read(buf)
		total += n
	}
	if err != io.EOF {
		return 0, fmt.Errorf("%s: reading the stream after %d bytes: %w", base, total, err)
	}
	if want := b.st.streamBytes(); total != want {
		return 0, fmt.Errorf("%s: stream of %d bytes, want %d", base, total, want)
	}
	return ttfb, nil
}

func ms(us int64) float64 { return float64(us) / 1000 }

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// uptime is uptime(1)'s line, or /proc/loadavg's when uptime is absent.
func uptime() string {
	out, err := runOut("uptime")
	if err != nil {
		return "loadavg " + loadAvg()
	}
	return strings.TrimSpace(out)
}
