// Package scrape is the one reader of an engine's Prometheus /metrics: Fetch gets
// the body over HTTP (a non-200 status is an error that quotes the body, so
// llama-server's 501 "start it with --metrics" reads as such), Parse folds the text
// into vllmmetrics.Snapshot. The router, the harness's scraper and its pre-flight
// call these; the pure cores and the report use only the names in vllmmetrics.
package scrape

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxBody bounds the /metrics body read (bytes); a vLLM server with many DP ranks
// and histograms exports a few hundred KiB.
const MaxBody = 32 << 20

// Fetch GETs url (an engine's /metrics endpoint) and parses the body. userAgent is
// sent when non-empty. Errors name the URL: the request, a non-200 status (a
// *StatusError, with up to 512 bytes of the body), the body's transfer, or the
// parse (a *ParseError).
func Fetch(ctx context.Context, client *http.Client, url, userAgent string) (*vllmmetrics.Snapshot, error) {
	return fetch(ctx, client, url, userAgent, Parse)
}

// fetch is the one GET of a /metrics body for Fetch and FetchEngine: it sends
// userAgent when non-empty, turns a non-200 answer into a *StatusError, reads at
// most MaxBody bytes into parse, and names url in every error.
func fetch[T any](ctx context.Context, client *http.Client, url, userAgent string, parse func(io.Reader) (T, error)) (T, error) {
	var zero T
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return zero, fmt.Errorf("scraping %s: %w", url, err)
	}
	if userAgent != "" {
		req.Header.Set("User-Agent", userAgent)
	}
	resp, err := client.Do(req)
	if err != nil {
		return zero, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return zero, statusError(url, resp)
	}
	body := &bodyReader{r: io.LimitReader(resp.Body, MaxBody)}
	snap, err := parse(body)
	if err != nil {
		if body.err != nil {
			// The body broke off (a timeout, a reset): the transport failed,
			// not the text.
			return zero, fmt.Errorf("scraping %s: reading the body: %w", url, body.err)
		}
		return zero, &ParseError{URL: url, Err: err}
	}
	return snap, nil
}

// bodyReader keeps the first read error other than io.EOF of r, so fetch
// tells a body that broke off from one that is not Prometheus text.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// ParseError is the error Fetch and FetchEngine return when the /metrics body
// arrived whole but is not Prometheus text. Use errors.As to get it.
type ParseError struct {
	URL string
	Err error // the parser's error
}

func (e *ParseError) Error() string { return fmt.Sprintf("scraping %s: %v", e.URL, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// StatusError is the error Fetch and FetchEngine return for a non-200 /metrics
// answer. It keeps the status, up to 512 bytes of the body and the Server header,
// so a caller can tell llama-server's 501 ("start it with --metrics") or SGLang's
// 404 (no --enable-metrics) from a failure. Use errors.As to get it.
type StatusError struct {
	URL    string
	Code   int    // HTTP status
	Body   string // up to 512 bytes, trimmed
	Server string // the Server response header ("llama.cpp" on llama-server)
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("scraping %s: http %d: %s", e.URL, e.Code, e.Body)
}

func statusError(url string, resp *http.Response) *StatusError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &StatusError{URL: url, Code: resp.StatusCode, Body: strings.TrimSpace(string(b)), Server: resp.Header.Get("Server")}
}

// Parse reads a Prometheus text exposition and returns the vLLM series per engine.
// It fails when the text cannot be parsed; a body with no vLLM series at all gives
// an empty vllmmetrics.Snapshot (callers decide with Require whether that is an error).
func Parse(r io.Reader) (*vllmmetrics.Snapshot, error) {
	fams, err := decode(r)
	if err != nil {
		return nil, err
	}
	return parseVLLM(fams), nil
}

// decode reads a Prometheus text exposition into metric families by name.
func decode(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics text: %w", err)
	}
	return fams, nil
}

// vllmField is where one vllm: family lands in an Engine: its canonical name
// (legacy names map to the current one), whether it is a gauge (max over
// samples of one engine) or a counter (sum), and the Engine field.
type vllmField struct {
	canonical string
	gauge     bool
	set       func(e *vllmmetrics.Engine) *float64
}

// vllmFields maps each vllm: family Parse reads to its Engine field.
var vllmFields = map[string]vllmField{
	vllmmetrics.NumRequestsRunning:  {vllmmetrics.NumRequestsRunning, true, func(e *vllmmetrics.Engine) *float64 { return &e.Running }},
	vllmmetrics.NumRequestsWaiting:  {vllmmetrics.NumRequestsWaiting, true, func(e *vllmmetrics.Engine) *float64 { return &e.Waiting }},
	vllmmetrics.KVCacheUsagePerc:    {vllmmetrics.KVCacheUsagePerc, true, func(e *vllmmetrics.Engine) *float64 { return &e.KVUsage }},
	vllmmetrics.LegacyKVCacheUsage:  {vllmmetrics.KVCacheUsagePerc, true, func(e *vllmmetrics.Engine) *float64 { return &e.KVUsage }},
	vllmmetrics.PrefixCacheQueries:  {vllmmetrics.PrefixCacheQueries, false, func(e *vllmmetrics.Engine) *float64 { return &e.PrefixQueries }},
	vllmmetrics.LegacyPrefixQueries: {vllmmetrics.PrefixCacheQueries, false, func(e *vllmmetrics.Engine) *float64 { return &e.PrefixQueries }},
	vllmmetrics.PrefixCacheHits:     {vllmmetrics.PrefixCacheHits, false, func(e *vllmmetrics.Engine) *float64 { return &e.PrefixHits }},
	vllmmetrics.LegacyPrefixHits:    {vllmmetrics.PrefixCacheHits, false, func(e *vllmmetrics.Engine) *float64 { return &e.PrefixHits }},
	vllmmetrics.PromptTokens:        {vllmmetrics.PromptTokens, false, func(e *vllmmetrics.Engine) *float64 { return &e.PromptTokens }},
	vllmmetrics.GenerationTokens:    {vllmmetrics.GenerationTokens, false, func(e *vllmmetrics.Engine) *float64 { return &e.GenerationTokens }},
	vllmmetrics.NumPreemptions:      {vllmmetrics.NumPreemptions, false, func(e *vllmmetrics.Engine) *float64 { return &e.Preemptions }},
	vllmmetrics.RequestSuccess:      {vllmmetrics.RequestSuccess, false, func(e *vllmmetrics.Engine) *float64 { return &e.RequestsFinished }},
}

// vllmFold collects the per-engine samples of one /metrics body.
type vllmFold struct {
	byEngine     map[string]*vllmmetrics.Engine
	cacheDefault struct {
		bs, nb int
		ok     bool
	}
}

// parseVLLM folds the vllm: families into per-engine samples (Parse's result).
func parseVLLM(fams map[string]*dto.MetricFamily) *vllmmetrics.Snapshot {
	fo := &vllmFold{byEngine: map[string]*vllmmetrics.Engine{}}
	// The current names win over legacy ones when a server exports both.
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		li, lj := strings.HasPrefix(names[i], "vllm:gpu_"), strings.HasPrefix(names[j], "vllm:gpu_")
		if li != lj {
			return li
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		fam := fams[name]
		if f, ok := vllmFields[name]; ok {
			fo.field(f, fam)
			continue
		}
		switch name {
		case vllmmetrics.PromptTokensBySrc:
			fo.promptBySource(fam)
		case vllmmetrics.CacheConfigInfo:
			fo.cacheConfig(fam)
		}
	}
	snap := &vllmmetrics.Snapshot{}
	for _, e := range fo.byEngine {
		if fo.cacheDefault.ok && e.BlockSize == 0 {
			e.BlockSize, e.NumGPUBlocks = fo.cacheDefault.bs, fo.cacheDefault.nb
			e.Present[vllmmetrics.CacheConfigInfo] = true
		}
		snap.Engines = append(snap.Engines, e)
	}
	sort.Slice(snap.Engines, func(i, j int) bool { return engineLess(snap.Engines[i].Engine, snap.Engines[j].Engine) })
	return snap
}

// get returns the Engine of m's engine label, created on first sight.
func (fo *vllmFold) get(m *dto.Metric) *vllmmetrics.Engine {
	var modelName, engine string
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "model_name":
			modelName = l.GetValue()
		case "engine":
			engine = l.GetValue()
		}
	}
	e := fo.byEngine[engine]
	if e == nil {
		e = &vllmmetrics.Engine{Model: modelName, Engine: engine, Present: map[string]bool{}, PrefixUnit: "tokens"}
		fo.byEngine[engine] = e
	}
	if e.Model == "" {
		// cache_config_info carries no model_name and may be read first.
		e.Model = modelName
	}
	return e
}

// field folds the samples of a family of vllmFields into f's Engine field.
func (fo *vllmFold) field(f vllmField, fam *dto.MetricFamily) {
	blocks := strings.Contains(fam.GetHelp(), "queried blocks") || strings.Contains(fam.GetHelp(), "cached blocks")
	seen := map[*vllmmetrics.Engine]bool{}
	for _, m := range fam.GetMetric() {
		e := fo.get(m)
		v := value(m)
		dst := f.set(e)
		switch {
		case !seen[e]:
			*dst = v
		case f.gauge:
			*dst = math.Max(*dst, v)
		default:
			*dst += v
		}
		seen[e] = true
		e.Present[f.canonical] = true
		if blocks && (f.canonical == vllmmetrics.PrefixCacheQueries || f.canonical == vllmmetrics.PrefixCacheHits) {
			e.PrefixUnit = "blocks"
		}
	}
}

// promptBySource folds vllm:prompt_tokens_by_source into PromptBySource.
func (fo *vllmFold) promptBySource(fam *dto.MetricFamily) {
	for _, m := range fam.GetMetric() {
		e := fo.get(m)
		if e.PromptBySource == nil {
			e.PromptBySource = map[string]float64{}
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "source" {
				e.PromptBySource[l.GetValue()] += value(m)
			}
		}
		e.Present[vllmmetrics.PromptTokensBySrc] = true
	}
}

// cacheConfig folds vllm:cache_config_info's block_size and num_gpu_blocks.
func (fo *vllmFold) cacheConfig(fam *dto.MetricFamily) {
	for _, m := range fam.GetMetric() {
		// cache_config_info carries no engine label in some versions: it
		// then applies to every engine, filled in by parseVLLM.
		var bs, nb int
		hasEngine := false
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "block_size":
				bs, _ = strconv.Atoi(l.GetValue())
			case "num_gpu_blocks":
				nb, _ = strconv.Atoi(l.GetValue())
			case "engine":
				hasEngine = true
			}
		}
		if hasEngine {
			e := fo.get(m)
			e.BlockSize, e.NumGPUBlocks = bs, nb
			e.Present[vllmmetrics.CacheConfigInfo] = true
		} else {
			fo.cacheDefault.bs, fo.cacheDefault.nb, fo.cacheDefault.ok = bs, nb, true
		}
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// engineLess orders engine labels numerically when they are numbers.
func engineLess(a, b string) bool {
	ai, errA := strconv.Atoi(a)
	bi, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return ai < bi
	}
	return a < b
}
