package loadgenhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
)

// Runner defaults.
const (
	// DefaultProgressEvery is the wall gap between two progress lines within a stage.
	DefaultProgressEvery = 10 * time.Second
	// DefaultMaxConsecutiveFailures aborts a run when that many turns in a row fail
	// (a wrong model name, a dead server): the figures would mean nothing. A turn
	// that succeeds resets the count; side requests do not count. The run then
	// returns ErrTooManyFailures and its manifest records Stopped. warden bench
	// uses this default (no flag or scenario field sets it; RunConfig does).
	DefaultMaxConsecutiveFailures = 50
	// DefaultIdleWait caps (wall) the wait for replicas to drain before a variant.
	DefaultIdleWait = 30 * time.Second
)

// RunConfig configures an HTTP-world run (Run). Zero fields take defaults.
type RunConfig struct {
	Scenario *loadgen.Scenario // required; defaults applied
	BaseURL  string            // router (or server) root the turns go to, e.g. "http://127.0.0.1:8080"
	// BaseURLs, when it has more than one root, spreads the turns over them
	// round robin per turn (RoundRobin; several routers sharing state); BaseURL
	// is then its first and is asked for the model.
	BaseURLs []string
	// Clock is the run's simulated clock (speed 1 against real servers); nil = a
	// new simclock.Scaled at speed 1. Every instant recorded is Clock.Now().
	Clock *simclock.Scaled
	// Client sends the turns; nil = NewClient(Scenario, BaseURL, HTTP, Header).
	Client Client
	HTTP   *http.Client // nil = a client with a connection pool sized for the stages
	Header http.Header  // extra headers on every turn (e.g. auth); may be nil

	// Replicas are scraped every ScrapeInterval on average (each scrape jittered
	// within its interval, loadgen.PollSchedule); a required series missing at the
	// first scrape fails the run before any load is sent (docs/bench.md, failure
	// case 4).
	Replicas       []ReplicaMetrics
	ScrapeInterval time.Duration // simulated; default loadgen.DefaultScrapeInterval
	// ResetURLs are server roots to POST /reset_prefix_cache to before each variant
	// when Scenario.ResetCache (vLLM needs VLLM_SERVER_DEV_MODE=1; a refusal is a
	// warning and a manifest note, not a failure).
	ResetURLs []string
	// ResetTargets are the same reset for engines other than vLLM, by their own
	// endpoint (SGLang: POST <root>/flush_cache). An engine with none (llama.cpp)
	// is not listed; its caller notes what that means.
	ResetTargets []ResetTarget
	// SetAffinity switches the router's session affinity before each variant; nil =
	// the harness cannot switch it (noted in the manifest).
	SetAffinity func(ctx context.Context, on bool) error
	IdleWait    time.Duration // wall cap on waiting for replicas to drain; default DefaultIdleWait

	ResultsDir    string                     // results/<run-id>/ to write; "" = write nothing
	Progress      io.Writer                  // progress lines; nil = none
	ProgressEvery time.Duration              // wall; default DefaultProgressEvery
	OnResult      func(r loadgen.Result)     // called for every finished turn (from one goroutine)
	OnSample      func(loadgen.SeriesSample) // called for every series sample (from the scrape goroutines, one call at a time)

	MaxConsecutiveFailures int // default DefaultMaxConsecutiveFailures; < 0 = never abort

	// FleetKVTokens is the replicas' total KV capacity in tokens, for a trace
	// replay's shared-LRU figure (0: unknown, figure left out).
	FleetKVTokens int64
	// MaxModelLen is the servers' max_model_len (0 unknown), for an agent
	// replay's over-length calls.
	MaxModelLen int
	// TraceSynth writes a trace replay's prompts (CalibrateTrace; nil = the
	// simulator's tokenizer without template tokens) and TraceForce says how
	// the output length is forced (ForceVLLM, ForceLlamaCpp). TraceCalibration
	// goes into the manifest.
	TraceSynth       *trace.Synth
	TraceForce       string
	TraceCalibration *loadgen.TraceCalibration

	// Copied into the manifest.
	RunID   string // default: loadgen.NewRunID of the start
	Mode    string // default "http"
	Target  string // default BaseURL
	Profile string
	Policy  string
	// Subagents: the harness's router's subagent rule (recorded in the
	// manifest; "" keep).
	Subagents string
	Versions  map[string]string
	Notes     []string
	Engines   []loadgen.ReplicaEngine // Manifest.Engines
	// Admission is the admission gate of the router the run goes through
	// (Manifest.Admission); nil when the caller does not know it.
	Admission *loadgen.Admission
}

// ResetTarget is one prefix-cache reset call: Method to URL (the full endpoint).
type ResetTarget struct {
	Method, URL string
}

// ErrTooManyFailures is returned when MaxConsecutiveFailures turns failed in a row.
var ErrTooManyFailures = errors.New("too many consecutive failed turns")

// Run runs every variant of the scenario against BaseURL in the HTTP world: for
// each variant it waits for the replicas to drain, resets their prefix caches (if
// asked), sets the router's affinity, then runs the closed loop (Loop) over the
// stages with one goroutine per turn, while a scraper records every replica's
// series. It writes the results directory (if ResultsDir) and returns the manifest.
//
// On ctx cancellation (Ctrl-C) it stops the current variant at once (in-flight turns
// are canceled and counted InFlight), writes everything completed with
// Manifest.Interrupted set, and returns the manifest with an error wrapping
// ctx.Err(). A broken accounting (Manifest.Check) is returned as an error wrapping
// ErrAccounting, with the manifest.
func Run(ctx context.Context, cfg RunConfig) (*loadgen.Manifest, error) {
	if cfg.Scenario == nil {
		return nil, errors.New("running benchmark: no scenario")
	}
	if err := cfg.Scenario.Validate(); err != nil {
		return nil, fmt.Errorf("running benchmark: invalid scenario: %w", err)
	}
	rn := &runner{cfg: cfg, sc: cfg.Scenario.WithDefaults()}
	if err := rn.setup(ctx); err != nil {
		return nil, err
	}
	var runErr error
	for _, name := range rn.sc.Variants {
		v, err := rn.runVariant(ctx, name)
		if v != nil {
			rn.m.Variants = append(rn.m.Variants, *v)
		}
		if err != nil {
			runErr = err
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	if errors.Is(runErr, ErrTooManyFailures) {
		rn.m.Stopped = &loadgen.StopReason{Reason: runErr.Error(), Rule: fmt.Sprintf(
			"consecutive failures: the run stops when %d turns in a row fail (RunConfig.MaxConsecutiveFailures, default loadgenhttp.DefaultMaxConsecutiveFailures = %d)",
			rn.maxConsecutiveFailures(), DefaultMaxConsecutiveFailures)}
	}
	if ctx.Err() != nil {
		rn.m.Interrupted = true
		if runErr == nil {
			runErr = fmt.Errorf("running benchmark: interrupted: %w", ctx.Err())
		}
	}
	rn.m.Notes = append(rn.m.Notes, rn.notes...)
	if err := rn.m.Check(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("running benchmark: %w", err))
	}
	if rn.out != nil {
		if err := rn.out.Close(rn.m); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("running benchmark: %w", err))
		}
	}
	return rn.m, runErr
}

type runner struct {
	cfg      RunConfig
	sc       *loadgen.Scenario
	clock    *simclock.Scaled
	client   Client
	http     *http.Client
	w        *loadgen.Workload
	scraper  *Scraper
	out      *loadgen.ResultsWriter
	m        *loadgen.Manifest
	progress io.Writer

	notesMu sync.Mutex
	notes   []string
	warned  map[string]bool

	sampleMu sync.Mutex // OnSample is called from one scrape loop at a time
}

// maxConsecutiveFailures is the failure streak that ends the run (< 0: none).
func (rn *runner) maxConsecutiveFailures() int {
	if n := rn.cfg.MaxConsecutiveFailures; n != 0 {
		return n
	}
	return DefaultMaxConsecutiveFailures
}

func (rn *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	rn.notesMu.Lock()
	defer rn.notesMu.Unlock()
	if rn.warned == nil {
		rn.warned = map[string]bool{}
	}
	if rn.warned[msg] {
		return
	}
	rn.warned[msg] = true
	rn.notes = append(rn.notes, msg)
	fmt.Fprintf(rn.progress, "warning: %s\n", msg)
}

func (rn *runner) setup(ctx context.Context) error {
	cfg := rn.cfg
	rn.clock = cfg.Clock
	if rn.clock == nil {
		rn.clock = simclock.NewScaled(1)
	}
	rn.progress = io.Discard
	if cfg.Progress != nil {
		rn.progress = &lockedWriter{w: cfg.Progress}
	}
	rn.http = cfg.HTTP
	if rn.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		most := 0
		for _, n := range rn.sc.Stages {
			most = max(most, n)
		}
		tr.MaxIdleConnsPerHost = 2*most + 16
		tr.MaxIdleConns = 0
		rn.http = &http.Client{Transport: tr}
	}
	if cfg.Client != nil {
		rn.client = cfg.Client
	} else {
		if rn.sc.Model == "" {
			model, err := engineapi.FirstModel(ctx, rn.http, cfg.BaseURL, cfg.Header)
			if err != nil {
				return fmt.Errorf("running benchmark: asking the served model: %w", err)
			}
			rn.sc.Model = model
		}
		rn.client = NewClient(rn.sc, cfg.BaseURL, rn.http, cfg.Header)
		if len(cfg.BaseURLs) > 1 {
			rr := &RoundRobin{}
			for _, u := range cfg.BaseURLs {
				rr.Clients = append(rr.Clients, NewClient(rn.sc, u, rn.http, cfg.Header))
			}
			rn.client = rr
		}
	}
	if _, _, ok := rn.sc.BlockPrompts(); ok {
		if err := rn.traceClients(); err != nil {
			return err
		}
	}
	rn.w = loadgen.NewWorkload(rn.sc)
	if len(cfg.Replicas) > 0 {
		rn.scraper = &Scraper{Replicas: cfg.Replicas, HTTP: rn.http, Clock: rn.clock}
		if _, err := rn.scraper.Scrape(ctx, ""); err != nil {
			return fmt.Errorf("running benchmark: first scrape of replica metrics: %w", err)
		}
	}
	rn.m = rn.newManifest()
	rn.m.TraceCalibration = cfg.TraceCalibration
	if cfg.ResultsDir != "" {
		out, err := loadgen.CreateResults(cfg.ResultsDir)
		if err != nil {
			return fmt.Errorf("running benchmark: %w", err)
		}
		rn.out = out
	}
	return nil
}

// newManifest assembles the run's manifest, with RunConfig's defaults for the
// fields copied into it.
func (rn *runner) newManifest() *loadgen.Manifest {
	cfg := rn.cfg
	created := time.Now()
	info := loadgen.RunInfo{
		RunID: cfg.RunID, Mode: cfg.Mode, Target: cfg.Target, Speed: rn.clock.Speed,
		Profile: cfg.Profile, Policy: cfg.Policy, Subagents: cfg.Subagents, Versions: maps.Clone(cfg.Versions), Notes: cfg.Notes,
		Engines: cfg.Engines, Admission: cfg.Admission,
	}
	if info.RunID == "" {
		info.RunID = loadgen.NewRunID(created)
	}
	if info.Mode == "" {
		info.Mode = "http"
	}
	if info.Target == "" {
		info.Target = cfg.BaseURL
	}
	if info.Speed <= 0 {
		info.Speed = 1
	}
	if info.Versions == nil {
		info.Versions = map[string]string{}
	}
	if _, ok := info.Versions["go"]; !ok {
		info.Versions["go"] = runtime.Version()
	}
	for _, r := range cfg.Replicas {
		info.Replicas = append(info.Replicas, r.Name)
	}
	if cfg.SetAffinity == nil {
		info.Notes = append(slices.Clone(info.Notes), "the harness did not switch router affinity between variants (no SetAffinity)")
	}
	return loadgen.NewManifest(rn.sc, created, info)
}

// NewClient returns the streaming client for sc.API (OpenAIClient,
// AnthropicClient or ResponsesClient) with the scenario's model, max output tokens, session header
// style and request timeout.
func NewClient(sc *loadgen.Scenario, baseURL string, hc *http.Client, header http.Header) Client {
	sc = sc.WithDefaults()
	if sc.API == loadgen.APIOpenAIResponses {
		return &ResponsesClient{BaseURL: baseURL, Model: sc.Model, MaxTokens: sc.MaxOutputTokens,
			SessionHeader: sc.SessionHeader, Header: header, HTTP: hc, Timeout: sc.RequestTimeout}
	}
	if sc.API == loadgen.APIAnthropicMessages {
		return &AnthropicClient{BaseURL: baseURL, Model: sc.Model, MaxTokens: sc.MaxOutputTokens,
			SessionHeader: sc.SessionHeader, Header: header, HTTP: hc, Timeout: sc.RequestTimeout}
	}
	return &OpenAIClient{BaseURL: baseURL, Model: sc.Model, MaxTokens: sc.MaxOutputTokens,
		SessionHeader: sc.SessionHeader, Header: header, HTTP: hc, Timeout: sc.RequestTimeout}
}

// traceClients gives the clients the trace replay's prompt synthesis, and
// the OpenAI ones its output forcing. The Anthropic Messages API has no way to
// force the output length: over it a call's output_length is its max_tokens,
// and the manifest says so. The Responses API is refused.
func (rn *runner) traceClients() error {
	var cs []Client
	if rr, ok := rn.client.(*RoundRobin); ok {
		cs = rr.Clients
	} else {
		cs = []Client{rn.client}
	}
	anthropic := false
	for _, c := range cs {
		switch oc := c.(type) {
		case *OpenAIClient:
			oc.Synth, oc.Force = rn.cfg.TraceSynth, rn.cfg.TraceForce
		case *AnthropicClient:
			oc.Synth, anthropic = rn.cfg.TraceSynth, true
		default:
			return fmt.Errorf("running benchmark: a trace replay needs the OpenAI chat API (api: %s, which forces the output length with min_tokens / n_predict and ignore_eos) or the Anthropic Messages API (api: %s, unforced)", loadgen.APIOpenAIChat, loadgen.APIAnthropicMessages)
		}
	}
	if anthropic {
		rn.note("trace replay over the Anthropic Messages API: outputs are not forced (it has no min_tokens or ignore_eos); each call's output_length is its max_tokens and the server's model may stop earlier, so output sums can fall below the trace's")
	}
	return nil
}

// lockedWriter serialises writes from the central and scraper goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (rn *runner) prepareVariant(ctx context.Context, name string, affinity bool) error {
	rn.waitIdle(ctx)
	if *rn.sc.ResetCache {
		for _, u := range rn.cfg.ResetURLs {
			if err := resetPrefixCache(ctx, rn.http, u); err != nil {
				rn.note("variant %s: %v (the variant starts with a warm cache)", name, err)
			}
		}
		for _, t := range rn.cfg.ResetTargets {
			if err := resetCall(ctx, rn.http, t.Method, t.URL, ""); err != nil {
				rn.note("variant %s: %v (the variant starts with a warm cache)", name, err)
			}
		}
		if len(rn.cfg.ResetURLs) == 0 && len(rn.cfg.ResetTargets) == 0 {
			rn.note("prefix caches were not reset between variants (no reset URLs): later variants start warm")
		}
	}
	if rn.cfg.SetAffinity != nil {
		if err := rn.cfg.SetAffinity(ctx, affinity); err != nil {
			return fmt.Errorf("running variant %s: setting router affinity %v: %w", name, affinity, err)
		}
	}
	return nil
}

// waitIdle waits (up to IdleWait, wall) until no replica runs or queues a request,
// so a variant does not start on the previous one's leftovers.
func (rn *runner) waitIdle(ctx context.Context) {
	if rn.scraper == nil {
		return
	}
	limit := rn.cfg.IdleWait
	if limit == 0 {
		limit = DefaultIdleWait
	}
	deadline := time.Now().Add(limit)
	for {
		samples, _ := rn.scraper.Scrape(ctx, "")
		busy := false
		for _, s := range samples {
			if s.Running > 0 || s.Waiting > 0 {
				busy = true
			}
		}
		if !busy || time.Now().After(deadline) || ctx.Err() != nil {
			if busy {
				rn.note("replicas still busy after waiting %s for them to drain", limit)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func resetPrefixCache(ctx context.Context, hc *http.Client, base string) error {
	return resetCall(ctx, hc, http.MethodPost, strings.TrimSuffix(base, "/")+wire.PathResetPrefixCache, " (vLLM needs VLLM_SERVER_DEV_MODE=1)")
}

// resetCall sends method to url (an engine's prefix-cache reset endpoint); a
// status other than 2xx is an error naming the URL, the body and hint.
func resetCall(ctx context.Context, hc *http.Client, method, url, hint string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return fmt.Errorf("resetting prefix cache: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("resetting prefix cache: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return fmt.Errorf("resetting prefix cache: %s %s: http %d %s%s",
			method, url, resp.StatusCode, strings.TrimSpace(string(b)), hint)
	}
	return nil
}

// scrapeOnce scrapes with sc (rn.scraper or one server's part of it) and
// records the samples.
func (rn *runner) scrapeOnce(ctx context.Context, sc *Scraper, variant string) {
	samples, err := sc.Scrape(ctx, variant)
	for _, s := range samples {
		if rn.out != nil {
			if err := rn.out.WriteSample(s); err != nil {
				rn.note("%v", err)
			}
		}
		if rn.cfg.OnSample != nil {
			rn.sampleMu.Lock()
			rn.cfg.OnSample(s)
			rn.sampleMu.Unlock()
		}
	}
	if err != nil && ctx.Err() == nil {
		for _, e := range splitJoined(err) {
			rn.note("variant %s: %v", variant, e)
		}
	}
}

// scrapeLoop scrapes at the variant's poll instants after start
// (loadgen.PollSchedule: one jittered within each interval, as the virtual world
// polls) until ctx is done, each server in a loop of its own: a server slow to
// answer /metrics (llama-server during a long prefill) misses the instants that
// passed while it answered, and delays no other server's samples.
func (rn *runner) scrapeLoop(ctx context.Context, variant string, start time.Duration) {
	iv := rn.cfg.ScrapeInterval
	if iv <= 0 {
		iv = loadgen.DefaultScrapeInterval
	}
	var wg sync.WaitGroup
	for _, sc := range rn.scraper.PerServer() {
		wg.Go(func() {
			polls := loadgen.NewPollSchedule(rn.sc.Seed, variant, start, iv)
			for {
				next := polls.Next()
				for next < rn.clock.Now() {
					next = polls.Next() // passed while the last scrape ran
				}
				if err := rn.clock.SleepUntil(ctx, next); err != nil {
					return
				}
				rn.scrapeOnce(ctx, sc, variant)
			}
		})
	}
	wg.Wait()
}

// splitJoined returns the errors of an errors.Join, or err itself.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
