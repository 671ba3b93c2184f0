package routerhttp

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/router"
)

// CardPath is where the HTML status card is served, on the main listener (Handler)
// and on the admin listener (AdminHandler, behind the admin token when one is
// set). It shows replica names and load only: no URLs, session keys or tokens.
const CardPath = "/status/card"

// DefaultCardRefresh is how often the card page reloads itself (wall time).
const DefaultCardRefresh = 2 * time.Second

// Card is what the status card shows: per model, a row per replica and a fleet
// line with the capacity check. Rates are per second of simulated time (wall
// time against real servers).
type Card struct {
	Generated time.Time // wall time the card was built
	WindowS   float64   // rate window, simulated seconds (DefaultCardWindow)
	Models    []CardModel
}

// CardModel is one model's pool on the card.
type CardModel struct {
	Model             string
	Affinity          bool
	OverflowThreshold int
	ThresholdAuto     bool
	SessionsHomed     int // sessions in the session table
	// LiveWindowS is the session table's live window in force, simulated
	// seconds (Balancer.LiveWindow): a conversation is live (counted in
	// CardReplica.Conversations) while its last request is at most this old.
	LiveWindowS float64
	Replicas    []CardReplica
	Fleet       CardReplica // sums over the replicas (KVUsage: mean of those reporting it, -1 none; hit rates: pooled)
	Capacity    CardCapacity
	// PinningIgnored names the replicas (DP ranks) whose server does not honour
	// X-Data-Parallel-Rank (ReplicaReport.DPPinning "ignored"): the server's own
	// balancer places their requests. PinningMismatch names those of a server
	// with fewer ranks than configured ("rank-mismatch"), PinningUnverified those
	// whose check could not decide.
	PinningIgnored, PinningMismatch, PinningUnverified []string
	// Ejected lists the replicas ejected after consecutive failed requests,
	// each with why and how long until its probe ("d: status 500, probe in 25 s").
	Ejected []CardEjection
	// Draining lists the replicas draining (docs/router.md "Draining a
	// replica") with what is left on them.
	Draining []CardDrain
	// Admission is the admission gate (router.AdmissionStatus; State "off"
	// when not on).
	Admission router.AdmissionStatus
}

// CardReplica is one replica's row. Unknown values are negative (-1).
type CardReplica struct {
	Name        string
	Healthy     bool
	ScrapeFresh bool
	ScrapeAgeS  float64 // -1 before the first scrape

	// Requests the Balancer routed here, by decision reason (ReplicaStatus.ServedBy).
	Requests uint64
	Sticky   uint64 // to the session's home
	Placed   uint64 // first request of a new conversation homed here
	Overflow uint64 // arrived by overflow from a busy home
	// Other is every other decision (rehome, no-key, balanced, and any reason a
	// policy adds), itemized in OtherBy.
	Other   uint64
	OtherBy string // e.g. "rehome 2, no-key 5"; "" when Other is 0

	SessionsHomed int // session-table homes (affinity on)
	InFlight      int // router's own count
	Running       int // vllm:num_requests_running as last scraped
	Waiting       int // vllm:num_requests_waiting
	KVUsage       float64

	// HitRate is the prefix-cache hit rate over the rate window; HitRateSince since
	// the router's first scrape (ReplicaReport.PrefixHitRate). -1 when unknown.
	HitRate, HitRateSince float64
	// UsageHitRate is cached / prompt tokens from the responses' usage since the
	// router started (ReplicaStatus.UsageCachedTokens / UsagePromptTokens): the
	// per-request view of the same rate. -1 when no response reported a cache
	// count.
	UsageHitRate float64
	// Prompt tokens per second over the rate window: read from the prefix cache
	// and computed (see windowRates.promptRates). -1 when unknown.
	CachedPerS, ComputedPerS float64
	RateSource               string // "prompt_tokens_by_source" or "prefix_cache counters"

	// Conversations live on this replica and the sum of their context
	// estimates, tokens: the working set the policies decide on
	// (ReplicaStatus.DecidedLive: sessions homed here with a request within
	// the live window, each at its latest full-size prompt estimate; with
	// shared state the larger of this router's and another router's figures,
	// Shared true when another router's were larger). The session table is fed
	// only with affinity on, so both are 0 with affinity off.
	Conversations int
	ContextTokens int64
	Shared        bool
	// KVTokens is the KV cache capacity, (num_gpu_blocks - 1) x block_size from
	// vllm:cache_config_info (block 0 is vLLM's null block), or the adapter's
	// (ReplicaStatus.KVCapacityTokens: SGLang max_total_num_tokens, llama.cpp
	// slots x per-slot n_ctx from /props); 0 when not reported.
	KVTokens int64

	// Engine is the server's kind (ReplicaReport.Engine), Slots its slots
	// (llama.cpp; 0 unknown). ScrapeError says why its /metrics gave no figures;
	// Missing lists the figures the engine does not report and why (a "–" in
	// their cells), joined with "; ".
	Engine      string
	Slots       int
	ScrapeError string
	Missing     string
}

// CardCapacity compares the active conversations' contexts with the fleet's KV
// cache: when Demand exceeds Capacity, the conversations cannot all keep their
// prefix cached and hit rates fall.
type CardCapacity struct {
	Conversations int   // live conversations (CardReplica.Conversations summed)
	Demand        int64 // sum of their context estimates, tokens (LiveTokens summed)
	Capacity      int64 // sum of KVTokens over the replicas reporting it
	Reporting     int   // replicas that reported their KV capacity
	Replicas      int
	Over          bool // Demand > Capacity (and Capacity known)
	// BytesPerToken is the ratio the Balancer turns request bodies into prompt
	// estimates with (Balancer.BytesPerToken), measured (Measured) from the
	// responses' prompt_tokens or the /metrics window (Source), or CharsPerToken.
	BytesPerToken float64
	Measured      bool
	Source        router.SizeSource
}

// Ratio is Demand / Capacity, or -1 when the capacity is unknown.
// CardDrain is one draining replica on the card: its mode, the requests in
// flight there over every router and the conversations homed there.
type CardDrain struct {
	Name, Mode         string
	InFlight, Sessions int
}

// CardEjection is one ejected replica on the card.
type CardEjection struct {
	Name, Reason string
	ProbeInS     float64 // seconds until a probe may return it (0: due)
}

func (c CardCapacity) Ratio() float64 {
	if c.Capacity <= 0 {
		return -1
	}
	return float64(c.Demand) / float64(c.Capacity)
}

// Card builds the card from the router's state now.
func (rt *Router) Card() Card {
	card := Card{Generated: time.Now(), WindowS: DefaultCardWindow.Seconds()}
	st := rt.Status()
	pools := rt.Pools()
	for mi, ms := range st.Models {
		pool := pools[mi]
		cm := CardModel{
			Model: ms.Model, Affinity: ms.Affinity, OverflowThreshold: ms.OverflowThreshold,
			ThresholdAuto: ms.ThresholdAuto, SessionsHomed: ms.Sessions, Admission: ms.Admission.AdmissionStatus,
		}
		cm.LiveWindowS = pool.Balancer.LiveWindow().Seconds()
		fleet := CardReplica{Name: "fleet", Healthy: true, ScrapeFresh: true, ScrapeAgeS: -1}
		var fr windowRates
		fr.ok, fr.hasPrefix, fr.prefixTokens, fr.hasSource = true, true, true, true
		var sinceQ, sinceH float64
		var usageP, usageC uint64
		ratesKnown, kvKnown := 0, 0
		for i, rep := range ms.Replicas {
			cr := newCardReplica(&rep)
			if cr.KVUsage >= 0 {
				kvKnown++
			}
			usageP += rep.UsagePromptTokens
			usageC += rep.UsageCachedTokens
			cm.noteProblems(&rep)
			cr.KVTokens = rep.KVCapacityTokens
			if w, ok := rt.cardWindow(pool, i); ok {
				if w.kvTokens > 0 {
					cr.KVTokens = w.kvTokens
				}
				r := w.rates(DefaultCardWindow)
				if r.ok && r.hasPrefix && r.dQueries > 0 {
					cr.HitRate = r.dHits / r.dQueries
				}
				if c, p, src, ok := r.promptRates(); ok {
					cr.CachedPerS, cr.ComputedPerS, cr.RateSource = c, p, src
					fleet.CachedPerS += c
					fleet.ComputedPerS += p
					ratesKnown++
				}
				fr.dQueries += r.dQueries
				fr.dHits += r.dHits
				fr.hasPrefix = fr.hasPrefix && r.ok && r.hasPrefix
			} else {
				fr.hasPrefix = false
			}
			if rep.PrefixHitRate >= 0 {
				// Status gives ratios only: the fleet's since-start rate is their mean.
				sinceQ++
				sinceH += rep.PrefixHitRate
			}
			fleet.add(&cr)
			if cr.KVTokens > 0 {
				cm.Capacity.Reporting++
			}
			cm.Replicas = append(cm.Replicas, cr)
		}
		// The policies' ratio (Balancer.BytesPerToken): from the responses'
		// prompt_tokens, else the /metrics window, else CharsPerToken. The
		// context estimates were made with it (or the ratio in force then).
		bpt, src := pool.Balancer.BytesPerToken()
		n := len(cm.Replicas)
		if kvKnown > 0 {
			fleet.KVUsage /= float64(kvKnown) // the mean of the replicas that report it
		} else {
			fleet.KVUsage = -1 // none does (llama.cpp: not exported)
		}
		fleet.HitRate, fleet.HitRateSince = -1, -1
		if fr.hasPrefix && fr.dQueries > 0 {
			fleet.HitRate = fr.dHits / fr.dQueries
		}
		if sinceQ > 0 {
			fleet.HitRateSince = sinceH / sinceQ
		}
		fleet.UsageHitRate = usageRate(usageC, usageP)
		if ratesKnown == 0 {
			fleet.CachedPerS, fleet.ComputedPerS = -1, -1
		}
		cm.Fleet = fleet
		cm.Capacity.Conversations = fleet.Conversations
		cm.Capacity.Demand = fleet.ContextTokens
		cm.Capacity.BytesPerToken, cm.Capacity.Source = bpt, src
		cm.Capacity.Measured = src != router.SizeAssumed
		cm.Capacity.Capacity = fleet.KVTokens
		cm.Capacity.Replicas = n
		cm.Capacity.Over = cm.Capacity.Capacity > 0 && cm.Capacity.Demand > cm.Capacity.Capacity
		card.Models = append(card.Models, cm)
	}
	return card
}

// newCardReplica is the card row of one replica's status (before the card
// window's rates are added).
func newCardReplica(rep *ReplicaReport) CardReplica {
	cr := CardReplica{
		Name: rep.Name, Healthy: rep.Healthy, ScrapeFresh: rep.ScrapeFresh, ScrapeAgeS: rep.ScrapeAgeS,
		Requests: rep.ServedTotal,
		Sticky:   rep.ServedBy[router.ReasonSticky.String()], Placed: rep.ServedBy[router.ReasonPlaced.String()],
		// Arrived by overflow: served away from home once, or moved here for good.
		Overflow:      rep.ServedBy[router.ReasonOverflow.String()] + rep.ServedBy[router.ReasonMoved.String()],
		SessionsHomed: rep.Sessions, InFlight: rep.InFlight,
		Running: rep.Running, Waiting: rep.Waiting, KVUsage: -1,
		HitRate: -1, HitRateSince: rep.PrefixHitRate, CachedPerS: -1, ComputedPerS: -1,
		UsageHitRate: usageRate(rep.UsageCachedTokens, rep.UsagePromptTokens),
		Shared:       rep.SharedLive > rep.Live || rep.SharedLiveTokens > rep.LiveTokens,
		Engine:       rep.Engine, Slots: rep.Slots, ScrapeError: rep.ScrapeError, Missing: strings.Join(rep.Missing, "; "),
	}
	cr.Conversations, cr.ContextTokens = rep.DecidedLive()
	cr.Other, cr.OtherBy = otherReasons(rep.ServedBy)
	if rep.ScrapeAgeS < 0 {
		cr.Running, cr.Waiting = -1, -1
	}
	if rep.KVUsage != nil { // nil: never read, or not reported (ReplicaReport.KVUsage)
		cr.KVUsage = *rep.KVUsage
	}
	if lacks(rep.Missing, engines.FigRunning) {
		cr.Running, cr.Waiting = -1, -1
	}
	return cr
}

// noteProblems lists rep in cm's ejected and DP-pinning problem lists it
// belongs to.
func (cm *CardModel) noteProblems(rep *ReplicaReport) {
	if rep.Ejected {
		cm.Ejected = append(cm.Ejected, CardEjection{Name: rep.Name, Reason: rep.EjectReason, ProbeInS: rep.EjectedForS})
	}
	if rep.Draining != "" {
		cm.Draining = append(cm.Draining, CardDrain{Name: rep.Name, Mode: rep.Draining, InFlight: rep.InFlight + rep.SharedInFlight, Sessions: rep.Sessions})
	}
	if p := rep.DPPinning; p != nil {
		switch p.Verdict {
		case PinIgnored:
			cm.PinningIgnored = append(cm.PinningIgnored, rep.Name)
		case PinRankMismatch:
			// Only the ranks the server does not have.
			if rep.Rank == nil || p.Engines == 0 || *rep.Rank >= p.Engines {
				cm.PinningMismatch = append(cm.PinningMismatch, rep.Name)
			}
		case PinUnverified:
			cm.PinningUnverified = append(cm.PinningUnverified, rep.Name)
		}
	}
}

// add sums cr into the fleet row f (Running, Waiting and KVUsage without their
// unknown -1; KVUsage is divided by the replica count after).
func (f *CardReplica) add(cr *CardReplica) {
	f.Healthy = f.Healthy && cr.Healthy
	f.ScrapeFresh = f.ScrapeFresh && cr.ScrapeFresh
	f.Requests += cr.Requests
	f.Sticky += cr.Sticky
	f.Placed += cr.Placed
	f.Overflow += cr.Overflow
	f.Other += cr.Other
	f.SessionsHomed += cr.SessionsHomed
	f.Conversations += cr.Conversations
	f.ContextTokens += cr.ContextTokens
	f.InFlight += cr.InFlight
	f.Running += max(cr.Running, 0)
	f.Waiting += max(cr.Waiting, 0)
	f.KVUsage += max(cr.KVUsage, 0)
	f.KVTokens += cr.KVTokens
}

// otherReasons sums the decisions that have no column of their own and lists
// them in Reasons order (then any unknown reason by name).
func otherReasons(by map[string]uint64) (uint64, string) {
	own := map[string]bool{router.ReasonSticky.String(): true, router.ReasonPlaced.String(): true, router.ReasonOverflow.String(): true, router.ReasonMoved.String(): true}
	var sum uint64
	var parts []string
	seen := map[string]bool{}
	add := func(name string) {
		if own[name] || seen[name] || by[name] == 0 {
			return
		}
		seen[name] = true
		sum += by[name]
		parts = append(parts, name+" "+fmtCount(by[name]))
	}
	for _, r := range router.Reasons {
		add(r.String())
	}
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		add(name)
	}
	return sum, strings.Join(parts, ", ")
}

// CardHandler serves the card as HTML. The page reloads itself every
// DefaultCardRefresh; ?refresh=N sets N seconds (0: never).
func (rt *Router) CardHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refresh := int(DefaultCardRefresh / time.Second)
		if v := r.URL.Query().Get("refresh"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 3600 {
				http.Error(w, "refresh: want 0..3600 seconds", http.StatusBadRequest)
				return
			}
			refresh = n
		}
		var buf bytes.Buffer
		if err := RenderCard(&buf, rt.Card(), refresh); err != nil {
			http.Error(w, "rendering status card: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		w.Write(buf.Bytes())
	})
}

//go:embed status_page.html
var cardFS embed.FS

var cardTmpl = template.Must(template.New("status_page.html").Funcs(template.FuncMap{
	"num":   fmtCount,
	"tok":   fmtTokens,
	"rate":  fmtRate,
	"pct":   fmtPct,
	"share": fmtShare,
	"bar":   barWidth,
	"age":   fmtAge,
	"gauge": fmtGauge,
	"clock": func(t time.Time) string { return t.Format("15:04:05") },
	"addf":  func(a, b float64) float64 { return a + b },
	"join":  func(names []string) string { return strings.Join(names, ", ") },
	"frac": func(a, b float64) float64 {
		if a < 0 || b < 0 || a+b <= 0 {
			return 0
		}
		return a / (a + b)
	},
}).ParseFS(cardFS, "status_page.html"))

// RenderCard writes c as a self-contained HTML page (no external assets) that
// reloads itself every refreshS seconds (0: never).
func RenderCard(w interface{ Write([]byte) (int, error) }, c Card, refreshS int) error {
	return cardTmpl.Execute(w, struct {
		Card
		Refresh int
	}{c, refreshS})
}

// fmtCount writes n with thousands separators: 12,345.
func fmtCount(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		n = int64(min(x, math.MaxInt64))
	default:
		return fmt.Sprint(v)
	}
	if n < 0 {
		return "–"
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtTokens writes a token count compactly: 950, 12.3k, 4.56M.
func fmtTokens(n int64) string {
	switch {
	case n < 0:
		return "–"
	case n < 10_000:
		return fmtCount(n)
	case n < 1_000_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 2, 64) + "M"
}

// fmtRate writes a per-second rate: "–" when unknown.
func fmtRate(v float64) string {
	switch {
	case v < 0:
		return "–"
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v < 10_000:
		return fmtCount(int64(math.Round(v)))
	}
	return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
}

// fmtPct writes a fraction as a percentage: "–" when negative (unknown).
func fmtPct(v float64) string {
	if v < 0 || math.IsNaN(v) {
		return "–"
	}
	return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
}

// fmtShare writes a/(a+b) as a percentage, "–" when unknown or both are zero.
func fmtShare(a, b float64) string {
	if a < 0 || b < 0 || a+b <= 0 {
		return "–"
	}
	return fmtPct(a / (a + b))
}

// barWidth turns a fraction into a CSS width percentage 0..100.
func barWidth(v float64) string {
	if v < 0 || math.IsNaN(v) {
		v = 0
	}
	return strconv.FormatFloat(100*min(v, 1), 'f', 1, 64)
}

// fmtGauge writes a scraped gauge count, "–" before the first scrape.
func fmtGauge(n int) string {
	if n < 0 {
		return "–"
	}
	return strconv.Itoa(n)
}

// fmtAge writes a scrape age in seconds.
func fmtAge(s float64) string {
	if s < 0 {
		return "never"
	}
	if s < 10 {
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	}
	return strconv.FormatFloat(s, 'f', 0, 64) + " s"
}

// usageRate is cached / prompt, or -1 when prompt is 0.
func usageRate(cached, prompt uint64) float64 {
	if prompt == 0 {
		return -1
	}
	return float64(cached) / float64(prompt)
}
