package routerhttp

import (
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/router"
)

// Status is the router's state as GET /status reports it.
type Status struct {
	Models []ModelStatus `json:"models"`
}

// ModelStatus is one model's pool.
type ModelStatus struct {
	Model             string `json:"model"`
	Affinity          bool   `json:"affinity"`
	Policy            string `json:"policy"` // affinity-on policy (PolicyNames)
	OverflowThreshold int    `json:"overflow_threshold"`
	ThresholdAuto     bool   `json:"overflow_threshold_auto"`
	// SlotBased: every replica is llama.cpp (configured or detected), so the
	// auto threshold is slots - 1 (router.SlotOverflowThreshold) rather than
	// max_num_seqs / 4.
	SlotBased bool `json:"slot_based"`
	Sessions  int  `json:"sessions"`
	// BytesPerToken is the body bytes per prompt token the policies' size
	// estimates and the status card use; BytesPerTokenSource says where it comes
	// from (Balancer.BytesPerToken: "responses", "metrics" or "assumed") and
	// BytesPerTokenMeasured whether it is not the assumed 4.
	BytesPerToken         float64           `json:"bytes_per_token"`
	BytesPerTokenMeasured bool              `json:"bytes_per_token_measured"`
	BytesPerTokenSource   router.SizeSource `json:"bytes_per_token_source"`
	// Admission is the admission gate's configuration, queue and estimates
	// (router.AdmissionStatus with durations as Go duration strings:
	// AdmissionReport; state "off" when not on).
	Admission AdmissionReport `json:"admission"`
	Replicas  []ReplicaReport `json:"replicas"`
}

// ReplicaReport is ReplicaStatus plus what only the HTTP router knows.
type ReplicaReport struct {
	router.ReplicaStatus
	URL  string `json:"url"`
	Rank *int   `json:"dp_rank,omitempty"`
	// KVUsage is kv_usage as /status writes it (it takes the place of
	// ReplicaStatus.KVUsage in the JSON): the fraction last scraped, or null
	// when it is not known now: the replica was never read, its last scrape is
	// stale (scrape_fresh false: a dead replica's last figure is no reading of
	// its cache today), or its engine or this
	// server does not export a KV usage series (Missing then has a
	// "kv_usage: ..." line saying which), so a missing figure never reads as 0.
	KVUsage *float64 `json:"kv_usage"`
	// Engine is the server's engine kind ("vllm", "sglang", "llamacpp";
	// "unknown" while an "auto" one is undetected). ScrapeError is why its
	// /metrics gave no figures at the last scrape ("" after a good one).
	// Missing lists the figures the engine does not report, each with why
	// (engines.Capability), e.g. "prefix_hits: no hit counter: ...", then
	// those the engine has but this server's last /metrics lacked, e.g.
	// "kv_usage: not exported by this server: llamacpp:kv_cache_usage_ratio
	// absent from its /metrics".
	Engine      string   `json:"engine"`
	ScrapeError string   `json:"scrape_error,omitempty"`
	Missing     []string `json:"missing_figures,omitempty"`
	Slots       int      `json:"slots,omitempty"` // llama.cpp GET /props total_slots; 0 unknown or not slot-based
	// DPPinning is whether the server behind URL honours X-Data-Parallel-Rank
	// (CheckDPPinning, run once at start for a URL with several ranks; "pending"
	// until it ends, "skipped" with Config.SkipPinningCheck); absent for a
	// replica that is not one of several ranks.
	DPPinning *PinCheck `json:"dp_pinning,omitempty"`
	// PrefixHitRate is hits/queries of vLLM's prefix-cache counters since the
	// router's first scrape of this replica (reset-aware); -1 before two scrapes
	// or without queries. PrefixHitRateLifetime uses the counters' absolute values
	// (since the server started).
	PrefixHitRate         float64 `json:"prefix_hit_rate"`
	PrefixHitRateLifetime float64 `json:"prefix_hit_rate_lifetime"`
}

// Status reports every model and replica.
func (rt *Router) Status() Status {
	var st Status
	for _, pool := range rt.proxy.Pools() {
		b := pool.Balancer
		n, auto := b.OverflowThreshold()
		ms := ModelStatus{Model: pool.Model, Affinity: b.Affinity(), Policy: b.Policy(), OverflowThreshold: n, ThresholdAuto: auto,
			SlotBased: b.SlotBased(), Sessions: b.Sessions()}
		ms.BytesPerToken, ms.BytesPerTokenSource = b.BytesPerToken()
		ms.BytesPerTokenMeasured = ms.BytesPerTokenSource != router.SizeAssumed
		ms.Admission = AdmissionReport{b.Admission()}
		ups := pool.UpstreamList()
		for i, s := range b.Status() {
			if i >= len(ups) {
				break // a replica being added: its upstream is listed first
			}
			up := ups[i]
			rep := ReplicaReport{ReplicaStatus: s, URL: up.URL.String(), PrefixHitRate: -1, PrefixHitRateLifetime: -1}
			if up.Rank >= 0 {
				k := up.Rank
				rep.Rank = &k
			}
			rt.fillPrefix(pool, i, &rep)
			if kv := s.KVUsage; s.ScrapeFresh && !lacks(rep.Missing, engines.FigKVUsage) {
				rep.KVUsage = &kv
			}
			ms.Replicas = append(ms.Replicas, rep)
		}
		st.Models = append(st.Models, ms)
	}
	return st
}

func (rt *Router) fillPrefix(pool *Pool, replica int, rep *ReplicaReport) {
	for _, t := range rt.targetList() {
		if t.pool != pool {
			continue
		}
		for k, idx := range t.replicas {
			if idx != replica {
				continue
			}
			t.mu.Lock()
			ps := t.prefix[k]
			rep.DPPinning = t.pin
			rep.Engine, rep.ScrapeError, rep.Slots = string(t.kind), t.scrapeErr, t.slots
			rep.Missing = append(append([]string(nil), t.lacks...), t.unexported...)
			t.mu.Unlock()
			if ps.have && ps.windowQueries > 0 {
				rep.PrefixHitRate = ps.windowHit / ps.windowQueries
			}
			if ps.have && ps.queries > 0 {
				rep.PrefixHitRateLifetime = ps.hits / ps.queries
			}
			return
		}
	}
}
