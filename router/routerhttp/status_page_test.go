package routerhttp

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/router"
)

func sampleCard() Card {
	return Card{
		Generated: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		WindowS:   30,
		Models: []CardModel{{
			Model: "<qwen>", Affinity: true, OverflowThreshold: 8, ThresholdAuto: true, SessionsHomed: 3,
			Replicas: []CardReplica{
				{Name: "r0", Healthy: true, ScrapeFresh: true, ScrapeAgeS: 0.4, Requests: 12345, Sticky: 12000, Placed: 300, Overflow: 38, Other: 7, OtherBy: "rehome 2, no-key 5",
					SessionsHomed: 2, InFlight: 3, Running: 3, Waiting: 1, KVUsage: 0.42, HitRate: 0.9, HitRateSince: 0.85, UsageHitRate: 0.8125,
					CachedPerS: 9000, ComputedPerS: 1000, RateSource: "prompt_tokens_by_source", Conversations: 2, ContextTokens: 150_000, KVTokens: 100_000},
				{Name: "r1", Healthy: false, ScrapeAgeS: -1, Running: -1, Waiting: -1, KVUsage: -1, HitRate: -1, HitRateSince: -1, UsageHitRate: -1,
					CachedPerS: -1, ComputedPerS: -1},
			},
			Fleet: CardReplica{Name: "fleet", Requests: 12345, HitRate: 0.9, HitRateSince: 0.85, CachedPerS: 9000, ComputedPerS: 1000,
				Conversations: 2, ContextTokens: 150_000, KVTokens: 100_000, KVUsage: 0.21},
			Capacity: CardCapacity{Conversations: 2, Demand: 150_000, Capacity: 100_000, Reporting: 1, Replicas: 2, Over: true,
				BytesPerToken: 3.62, Measured: true, Source: router.SizeResponses},
		}},
	}
}

func TestRenderCard(t *testing.T) {
	tests := []struct {
		name    string
		card    func() Card
		refresh int
		want    []string
		notWant []string
	}{
		{
			name: "over capacity", card: sampleCard, refresh: 2,
			want: []string{
				`<meta http-equiv="refresh" content="2">`,
				"&lt;qwen&gt;", // model name escaped
				">r0<", ">r1<small>down</small>",
				"12,345", "12,000", ">38<", // requests, sticky, overflow
				`title="rehome 2, no-key 5">7<`,
				"150.0k", "100.0k", // context estimate, KV capacity
				"42.0%",          // KV usage
				"90.0%", "85.0%", // hit rates
				"81.2%", `data-usage-hit-rate="-1"`, // usage-based hit rate; unknown on r1
				"9,000", "1,000", // cached, computed per s
				"(150.0%)", "contexts exceed the fleet", "1 of 2 replicas reporting",
				"updated 15:04:05", "affinity on", "overflow above 8 in flight (auto)",
				"3.6 bytes/token (measured",
			},
			notWant: []string{"<qwen>", "<script", "http://", "https://"},
		},
		{
			name: "capacity unknown, no refresh", refresh: 0,
			card: func() Card {
				c := sampleCard()
				m := &c.Models[0]
				m.Model, m.Affinity = "*", false
				m.Capacity = CardCapacity{Conversations: 1, Demand: 900, Replicas: 2, BytesPerToken: 4}
				m.Fleet.KVTokens = 0
				m.Replicas[0].KVTokens = 0
				return c
			},
			want:    []string{"any model", "affinity off", "fleet KV cache unknown", ">900<"},
			notWant: []string{"http-equiv", "contexts exceed the fleet", "refreshes every"},
		},
		{
			name: "under capacity", refresh: 5,
			card: func() Card {
				c := sampleCard()
				c.Models[0].Capacity = CardCapacity{Conversations: 2, Demand: 50_000, Capacity: 100_000, Reporting: 2, Replicas: 2, BytesPerToken: 4}
				return c
			},
			want:    []string{"50.0k", "(50.0%)", `content="5"`, "4.0 bytes/token (assumed)"},
			notWant: []string{"contexts exceed the fleet", "replicas reporting"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := RenderCard(&buf, tc.card(), tc.refresh); err != nil {
				t.Fatal(err)
			}
			html := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(html, w) {
					t.Errorf("card lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(html, w) {
					t.Errorf("card contains %q", w)
				}
			}
			// One body row per replica.
			if got := strings.Count(html, `<span class="dot`); got != len(tc.card().Models[0].Replicas) {
				t.Errorf("%d replica rows, want %d", got, len(tc.card().Models[0].Replicas))
			}
		})
	}
}

func TestOtherReasons(t *testing.T) {
	tests := []struct {
		by   map[string]uint64
		sum  uint64
		list string
	}{
		{map[string]uint64{"sticky": 9, "placed": 1, "overflow": 3}, 0, ""},
		{map[string]uint64{"sticky": 9, "no-key": 5, "rehome": 2, "balanced": 0}, 7, "rehome 2, no-key 5"},
		{map[string]uint64{"zeta": 1, "alpha": 1000, "balanced": 4}, 1005, "balanced 4, alpha 1,000, zeta 1"},
	}
	for _, tc := range tests {
		if sum, list := otherReasons(tc.by); sum != tc.sum || list != tc.list {
			t.Errorf("otherReasons(%v) = %d, %q; want %d, %q", tc.by, sum, list, tc.sum, tc.list)
		}
	}
}

func TestFormatters(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{fmtCount(0), "0"}, {fmtCount(999), "999"}, {fmtCount(1000), "1,000"}, {fmtCount(int64(1234567)), "1,234,567"},
		{fmtCount(uint64(42)), "42"}, {fmtCount(-1), "–"},
		{fmtTokens(9999), "9,999"}, {fmtTokens(12_345), "12.3k"}, {fmtTokens(4_560_000), "4.56M"}, {fmtTokens(-1), "–"},
		{fmtRate(-1), "–"}, {fmtRate(0), "0"}, {fmtRate(2.345), "2.3"}, {fmtRate(1234.4), "1,234"}, {fmtRate(12_345), "12.3k"},
		{fmtPct(-1), "–"}, {fmtPct(0.125), "12.5%"},
		{fmtShare(3, 1), "75.0%"}, {fmtShare(0, 0), "–"}, {fmtShare(-1, 2), "–"},
		{barWidth(1.7), "100.0"}, {barWidth(-1), "0.0"},
		{fmtAge(-1), "never"}, {fmtAge(0.25), "0.2 s"}, {fmtAge(42), "42 s"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("case %d: got %q, want %q", i, tc.got, tc.want)
		}
	}
}

func TestRateWindow(t *testing.T) {
	s := func(at time.Duration, q, h, comp, cached float64, src bool) cardSample {
		return cardSample{at: at, queries: q, hits: h, computed: comp, cached: cached, hasPrefix: true, prefixTokens: true, hasSource: src}
	}
	tests := []struct {
		name                   string
		samples                []cardSample
		span                   time.Duration
		ok                     bool
		cached, computed, hits float64 // per second; hits = hit rate
		source                 string
	}{
		{name: "one sample", samples: []cardSample{s(0, 10, 5, 5, 5, true)}, span: time.Minute},
		{
			name:    "by source over the window",
			samples: []cardSample{s(0, 0, 0, 0, 0, true), s(10*time.Second, 1000, 900, 100, 900, true), s(20*time.Second, 2000, 1800, 200, 1800, true)},
			span:    time.Minute, ok: true, cached: 90, computed: 10, hits: 0.9, source: "prompt_tokens_by_source",
		},
		{
			name:    "prefix counters when by-source is missing",
			samples: []cardSample{s(0, 0, 0, 0, 0, false), s(10*time.Second, 1000, 250, 0, 0, false)},
			span:    time.Minute, ok: true, cached: 25, computed: 75, hits: 0.25, source: "prefix_cache counters",
		},
		{
			name: "older samples outside the span are left out",
			samples: []cardSample{s(0, 0, 0, 0, 0, true), s(100*time.Second, 10_000, 0, 10_000, 0, true),
				s(110*time.Second, 11_000, 1000, 10_000, 1000, true)},
			span: 30 * time.Second, ok: true, cached: 100, computed: 0, hits: 1, source: "prompt_tokens_by_source",
		},
		{
			name:    "a counter reset counts what came after it",
			samples: []cardSample{s(0, 5000, 4000, 1000, 4000, true), s(10*time.Second, 100, 50, 50, 50, true)},
			span:    time.Minute, ok: true, cached: 5, computed: 5, hits: 0.5, source: "prompt_tokens_by_source",
		},
		{
			name:    "a sample not newer than the last is dropped",
			samples: []cardSample{s(10*time.Second, 0, 0, 0, 0, true), s(10*time.Second, 500, 500, 0, 500, true)},
			span:    time.Minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w rateWindow
			for _, x := range tc.samples {
				w.add(x)
			}
			r := w.rates(tc.span)
			cached, computed, src, ok := r.promptRates()
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if cached != tc.cached || computed != tc.computed || src != tc.source {
				t.Errorf("rates = %g cached, %g computed (%s); want %g, %g (%s)", cached, computed, src, tc.cached, tc.computed, tc.source)
			}
			if hr := r.dHits / r.dQueries; hr != tc.hits {
				t.Errorf("hit rate %g, want %g", hr, tc.hits)
			}
		})
	}
}

func TestRateWindowRingWraps(t *testing.T) {
	var w rateWindow
	for i := range 3 * cardSamples {
		at := time.Duration(i) * time.Second
		w.add(cardSample{at: at, queries: float64(10 * i), hits: float64(4 * i), hasPrefix: true, prefixTokens: true})
	}
	if w.n != cardSamples {
		t.Fatalf("n = %d, want %d", w.n, cardSamples)
	}
	if first, last := w.at(0).at, w.at(w.n-1).at; last-first != (cardSamples-1)*time.Second {
		t.Fatalf("window spans %v..%v", first, last)
	}
	r := w.rates(10 * time.Second)
	cached, computed, _, ok := r.promptRates()
	if !ok || r.seconds != 10 || cached != 4 || computed != 6 {
		t.Errorf("rates over 10 s: ok=%v seconds=%g cached=%g computed=%g; want 10 s, 4, 6", ok, r.seconds, cached, computed)
	}
}

// TestCardConversationsFromBalancer: the card's conversations and their context
// are the Balancer's live working set (Status Live, LiveTokens), one source with
// the policies: a side request does not shrink a context, an overflow does not
// move the conversation, keyless requests and idle conversations are not
// counted, and with affinity off there is no session table to count. Every
// routed body byte is still counted on its replica for the size window.
func TestCardConversationsFromBalancer(t *testing.T) {
	type step struct {
		at        time.Duration // since the previous step
		key       string
		bytes     int
		avoidHome bool // the conversation's home must not serve it (an overflow)
	}
	tests := []struct {
		name     string
		affinity bool
		steps    []step
		live     map[string]int64 // live conversations at the end: key -> context tokens
	}{
		{
			name: "latest full-size prompt wins; a side request does not shrink it", affinity: true,
			steps: []step{{0, "a", 4000, false}, {time.Second, "a", 8000, false}, {time.Second, "a", 400, false}},
			live:  map[string]int64{"a": 2000},
		},
		{
			name: "an overflow does not move the conversation", affinity: true,
			steps: []step{{0, "a", 4000, false}, {time.Second, "a", 4400, true}},
			live:  map[string]int64{"a": 1100},
		},
		{
			name: "keyless requests are not conversations", affinity: true,
			steps: []step{{0, "", 4000, false}, {time.Second, "a", 400, false}},
			live:  map[string]int64{"a": 100},
		},
		{
			name: "idle past the live window: not live", affinity: true,
			steps: []step{{0, "a", 40_000, false}, {router.DefaultLiveWindow + time.Second, "b", 4000, false}},
			live:  map[string]int64{"b": 1000},
		},
		{
			name: "affinity off: no session table", affinity: false,
			steps: []step{{0, "a", 4000, false}, {time.Second, "b", 8000, false}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &simclock.Manual{}
			cfg := Config{HealthInterval: -1, ScrapeInterval: -1, Clock: clk,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Models: []ModelConfig{{Name: "m", Affinity: &tc.affinity, Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1"}, {URL: "http://127.0.0.1:2"}}}}}
			rt, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pool := rt.Pools()[0]
			var routed [2]int64
			home := map[string]int{}
			for _, s := range tc.steps {
				clk.Advance(s.at)
				var avoid uint64
				if h, ok := home[s.key]; ok && s.avoidHome {
					avoid = 1 << h
				}
				d, err := pool.Balancer.Acquire(router.Facts{SessionKey: s.key, BodyBytes: s.bytes, Avoid: avoid})
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := home[s.key]; !ok && s.key != "" {
					home[s.key] = d.Replica
				}
				rt.noteRoute(pool, s.key, s.bytes, d)
				pool.Balancer.Release(d.Replica)
				routed[d.Replica] += int64(s.bytes)
			}
			var wantLive [2]int
			var wantTokens [2]int64
			for key, tok := range tc.live {
				wantLive[home[key]]++
				wantTokens[home[key]] += tok
			}
			m := rt.Card().Models[0]
			st := pool.Balancer.Status()
			var live [2]int
			var tokens [2]int64
			for i, r := range m.Replicas {
				live[i], tokens[i] = r.Conversations, r.ContextTokens
				if r.Conversations != st[i].Live || r.ContextTokens != st[i].LiveTokens {
					t.Errorf("%s: card %d conversations, %d tokens; Balancer %d, %d", r.Name, r.Conversations, r.ContextTokens, st[i].Live, st[i].LiveTokens)
				}
			}
			if live != wantLive || tokens != wantTokens {
				t.Errorf("live %v tokens %v, want %v %v (homes %v)", live, tokens, wantLive, wantTokens, home)
			}
			if m.Fleet.Conversations != live[0]+live[1] || m.Capacity.Demand != tokens[0]+tokens[1] {
				t.Errorf("fleet %d conversations, demand %d; want the rows' sums", m.Fleet.Conversations, m.Capacity.Demand)
			}
			if m.LiveWindowS != pool.Balancer.LiveWindow().Seconds() {
				t.Errorf("live window %g s, want the Balancer's %v", m.LiveWindowS, pool.Balancer.LiveWindow())
			}
			// Every routed byte is counted on its replica, keyless included.
			if got := [2]int64{rt.routed[pool].routed(0), rt.routed[pool].routed(1)}; got != routed {
				t.Errorf("routed bytes %v, want %v", got, routed)
			}
		})
	}
}

// engineVals are one engine's series for metricsText.
type engineVals struct {
	engine                             string
	running, waiting                   int
	kv, queries, hits, computed, hits2 float64
	blocks, blockSize                  int
	prompt                             float64 // vllm:prompt_tokens_total; negative: absent
}

// metricsText is a vLLM /metrics body with one sample per engine in each family.
func metricsText(es ...engineVals) string {
	var b strings.Builder
	fam := func(name, typ string, val func(e engineVals) (string, string)) {
		fmt.Fprintf(&b, "# TYPE %s %s\n", name, typ)
		for _, e := range es {
			labels, v := val(e)
			fmt.Fprintf(&b, "%s{engine=%q,model_name=\"m\"%s} %s\n", name, e.engine, labels, v)
		}
	}
	g := func(x float64) string { return fmt.Sprint(x) }
	fam(vllmmetrics.NumRequestsRunning, "gauge", func(e engineVals) (string, string) { return "", g(float64(e.running)) })
	fam(vllmmetrics.NumRequestsWaiting, "gauge", func(e engineVals) (string, string) { return "", g(float64(e.waiting)) })
	fam(vllmmetrics.KVCacheUsagePerc, "gauge", func(e engineVals) (string, string) { return "", g(e.kv) })
	fam(vllmmetrics.PrefixCacheQueries, "counter", func(e engineVals) (string, string) { return "", g(e.queries) })
	fam(vllmmetrics.PrefixCacheHits, "counter", func(e engineVals) (string, string) { return "", g(e.hits) })
	if es[0].prompt >= 0 {
		fam(vllmmetrics.PromptTokens, "counter", func(e engineVals) (string, string) { return "", g(e.prompt) })
	}
	fmt.Fprintf(&b, "# TYPE %s counter\n", vllmmetrics.PromptTokensBySrc)
	for _, e := range es {
		fmt.Fprintf(&b, "%s{engine=%q,model_name=\"m\",source=\"local_compute\"} %g\n", vllmmetrics.PromptTokensBySrc, e.engine, e.computed)
		fmt.Fprintf(&b, "%s{engine=%q,model_name=\"m\",source=\"local_cache_hit\"} %g\n", vllmmetrics.PromptTokensBySrc, e.engine, e.hits2)
	}
	fmt.Fprintf(&b, "# TYPE %s gauge\n", vllmmetrics.CacheConfigInfo)
	for _, e := range es {
		fmt.Fprintf(&b, "%s{block_size=\"%d\",engine=%q,num_gpu_blocks=\"%d\"} 1\n", vllmmetrics.CacheConfigInfo, e.blockSize, e.engine, e.blocks)
	}
	return b.String()
}

func observeText(t *testing.T, rt *Router, tg *target, text string) {
	t.Helper()
	snap, err := scrape.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	rt.observe(tg, snap, rt.clock.Now())
}

// TestRouterCard feeds scrapes and routed requests into a Router and checks the
// card built from them, and that both listeners serve it.
func TestRouterCard(t *testing.T) {
	clk := &simclock.Manual{}
	cfg := Config{HealthInterval: -1, ScrapeInterval: -1, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Models: []ModelConfig{{Name: "m", MaxNumSeqs: 32, Replicas: []ReplicaConfig{
			{URL: "http://127.0.0.1:1"}, {URL: "http://127.0.0.1:2", DPRanks: 2}}}}}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := rt.Pools()[0]
	// r0 alone; r1/rank0 and r1/rank1 behind one URL.
	observeText(t, rt, rt.targets[0], metricsText(engineVals{"0", 2, 0, 0.5, 1000, 800, 200, 800, 100, 16, -1}))
	observeText(t, rt, rt.targets[1], metricsText(engineVals{"0", 1, 1, 0.25, 0, 0, 0, 0, 100, 16, -1},
		engineVals{"1", 0, 0, 0, 0, 0, 0, 0, 100, 16, -1}))
	clk.Advance(10 * time.Second)
	observeText(t, rt, rt.targets[0], metricsText(engineVals{"0", 2, 0, 0.5, 2000, 1700, 300, 1700, 100, 16, -1}))
	for i, key := range []string{"a", "b", "c"} {
		d, err := pool.Balancer.Acquire(router.Facts{SessionKey: key, BodyBytes: 4000 * (i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		rt.noteRoute(pool, key, 4000*(i+1), d)
		pool.Balancer.Release(d.Replica)
	}
	rt.noteRoute(pool, "", 1<<20, router.Decision{}) // keyless: not a conversation

	card := rt.Card()
	if len(card.Models) != 1 || len(card.Models[0].Replicas) != 3 {
		t.Fatalf("card: %+v", card)
	}
	m := card.Models[0]
	r0 := m.Replicas[0]
	if r0.Name != "r0" || r0.Running != 2 || r0.KVUsage != 0.5 || r0.KVTokens != 1584 {
		t.Errorf("r0 = %+v", r0)
	}
	if r0.CachedPerS != 90 || r0.ComputedPerS != 10 || r0.HitRate != 0.9 || r0.RateSource != "prompt_tokens_by_source" {
		t.Errorf("r0 rates: cached %g computed %g hit %g (%s); want 90, 10, 0.9", r0.CachedPerS, r0.ComputedPerS, r0.HitRate, r0.RateSource)
	}
	if r1 := m.Replicas[1]; r1.Name != "r1/rank0" || r1.Running != 1 || r1.Waiting != 1 || r1.KVTokens != 1584 || r1.CachedPerS != -1 {
		t.Errorf("r1/rank0 = %+v (one scrape: rates unknown)", r1)
	}
	if m.Fleet.Requests != 3 || m.Fleet.Placed != 3 {
		t.Errorf("fleet requests %d placed %d, want 3, 3", m.Fleet.Requests, m.Fleet.Placed)
	}
	// Conversations: the Balancer's estimates of 4, 8 and 12 KB bodies at the
	// assumed 4 bytes/token, 1000 + 2000 + 3000 tokens, over three replicas'
	// 3 x (100 - 1) x 16 tokens of KV (block 0 is vLLM's null block).
	want := CardCapacity{Conversations: 3, Demand: 6000, Capacity: 4752, Reporting: 3, Replicas: 3, Over: true, BytesPerToken: CharsPerToken, Source: router.SizeAssumed}
	if m.Capacity != want {
		t.Errorf("capacity = %+v, want %+v", m.Capacity, want)
	}
	var conv int
	for _, r := range m.Replicas {
		conv += r.Conversations
	}
	if conv != 3 {
		t.Errorf("%d conversations over the rows, want 3", conv)
	}

	for name, h := range map[string]http.Handler{"main": rt.Handler(), "admin": rt.AdminHandler()} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", CardPath+"?refresh=0", nil))
			if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
				t.Fatalf("status %d, type %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			body := rec.Body.String()
			for _, w := range []string{"r1/rank1", "contexts exceed the fleet", "127.0.0.1"} {
				if has := strings.Contains(body, w); has != (w != "127.0.0.1") {
					t.Errorf("contains %q = %v", w, has)
				}
			}
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", CardPath+"?refresh=x", nil))
			if rec.Code != http.StatusBadRequest {
				t.Errorf("bad refresh: status %d, want 400", rec.Code)
			}
		})
	}
}

// TestCardMeasuredBytesPerToken: once the replicas have counted enough prompt
// tokens in the window, the card and the policies' prompt estimates convert body
// bytes with the ratio measured from /metrics; a later window with too few
// tokens keeps it; responses that report their prompt size take over from it.
func TestCardMeasuredBytesPerToken(t *testing.T) {
	clk := &simclock.Manual{}
	cfg := Config{HealthInterval: -1, ScrapeInterval: -1, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Models: []ModelConfig{{Name: "m", Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1"}}}}}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := rt.Pools()[0]
	scrape := func(prompt float64) {
		observeText(t, rt, rt.targets[0], metricsText(engineVals{"0", 0, 0, 0, 0, 0, 0, 0, 1000, 16, prompt}))
	}
	scrape(0)
	clk.Advance(time.Second)
	// 30,000 bytes routed while the engine counted 10,000 prompt tokens: 3 bytes/token.
	rt.noteRoute(pool, "", 30_000, router.Decision{Replica: 0, Reason: router.ReasonNoKey})
	scrape(10_000)
	// A conversation's 12 KB request after it: the Balancer's estimate at 3 bytes/token.
	route := func(bodyBytes int) {
		t.Helper()
		d, err := pool.Balancer.Acquire(router.Facts{SessionKey: "a", BodyBytes: bodyBytes})
		if err != nil {
			t.Fatal(err)
		}
		rt.noteRoute(pool, "a", bodyBytes, d)
		pool.Balancer.Release(d.Replica)
	}
	route(12_000)
	c := rt.Card().Models[0].Capacity
	if !c.Measured || c.Source != router.SizeMetrics || c.BytesPerToken != 3 || c.Demand != 4000 || c.Capacity != 15_984 || c.Over {
		t.Errorf("capacity = %+v; want 3 bytes/token from metrics, demand 4000, capacity 999 x 16", c)
	}
	estimate := pool.Balancer.EstimateTokens
	if e := estimate(3000); e != 1000 {
		t.Errorf("policies' estimate of 3,000 bytes: %d tokens, want 1,000 (the metrics ratio)", e)
	}
	// Too few prompt tokens in the window: the last measured ratio stays.
	clk.Advance(50 * time.Second) // within the live window: "a" stays live
	scrape(10_500)
	if c := rt.Card().Models[0].Capacity; c.Source != router.SizeMetrics || c.BytesPerToken != 3 {
		t.Errorf("capacity = %+v; want the last measured 3 bytes/token", c)
	}
	// Responses report their prompt size (2 bytes per token): they take over
	// for the next estimate; the conversation's context is the Balancer's
	// estimate made when its request was routed, until its next request.
	for range router.SizeMinSeen {
		pool.Balancer.ObserveSize(2000, 1000)
	}
	if c := rt.Card().Models[0].Capacity; c.Source != router.SizeResponses || c.BytesPerToken != 2 || c.Demand != 4000 {
		t.Errorf("capacity = %+v; want 2 bytes/token from responses, demand still 4000", c)
	}
	route(12_000)
	if c := rt.Card().Models[0].Capacity; c.Demand != 6000 {
		t.Errorf("capacity = %+v; want demand 6000 after the next request", c)
	}
	if st := rt.Status().Models[0]; st.BytesPerTokenSource != router.SizeResponses || st.BytesPerToken != 2 {
		t.Errorf("/status: %.2f bytes/token from %s, want 2 from responses", st.BytesPerToken, st.BytesPerTokenSource)
	}
}

// BenchmarkNoteRoute: the per-request cost the card adds to the proxy (OnRoute):
// counting the routed body bytes of one replica among 8 (the conversations are
// the Balancer's, already paid for in Acquire).
func BenchmarkNoteRoute(b *testing.B) {
	cfg := Config{HealthInterval: -1, ScrapeInterval: -1, Clock: &simclock.Manual{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Models: []ModelConfig{{Name: "m", Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1", DPRanks: 8}}}}}
	rt, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pool := rt.Pools()[0]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rt.noteRoute(pool, "0000-4000-8000", 60_000, router.Decision{Replica: i % 8, Reason: router.ReasonSticky})
		i++
	}
}

// BenchmarkRenderCard: building and rendering the card of an 8-replica router
// with 1,000 active conversations.
func BenchmarkRenderCard(b *testing.B) {
	cfg := Config{HealthInterval: -1, ScrapeInterval: -1, Clock: &simclock.Manual{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Models: []ModelConfig{{Name: "m", Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1", DPRanks: 8}}}}}
	rt, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pool := rt.Pools()[0]
	for i := range 1000 {
		d, err := pool.Balancer.Acquire(router.Facts{SessionKey: fmt.Sprint("s", i), BodyBytes: 40_000})
		if err != nil {
			b.Fatal(err)
		}
		rt.noteRoute(pool, fmt.Sprint("s", i), 40_000, d)
		pool.Balancer.Release(d.Replica)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := RenderCard(io.Discard, rt.Card(), 2); err != nil {
			b.Fatal(err)
		}
	}
}
