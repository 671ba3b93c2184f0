package loadgen

import (
	"time"
)

// Result is the record of one turn (one request) as the harness saw it. All instants
// are simulated time since the run's clock origin (see Manifest); against a real
// server simulated time is wall time. A failed turn is data: Status and Err say why.
// FirstEvent, FirstToken and LastToken are when the event's last bytes were read
// (package doc, "Time stamps and the first token").
//
// Stage attribution (the rule report applies): a turn belongs to the stage window
// that contains its Done instant; turns that completed during a window's warm-up are
// excluded from that stage's figures.
type Result struct {
	Variant    string `json:"variant"`     // variant name, e.g. "off" or "on"
	Session    int64  `json:"session"`     // session index within the variant, from 0
	SessionKey string `json:"session_key"` // session id sent to the router
	Turn       int    `json:"turn"`        // 0-based turn index within the session
	LastTurn   bool   `json:"last_turn"`   // true for the session's final turn
	// Side marks a side request sent beside turn Turn (Scenario.SideRequests): not
	// a turn; the report counts it apart.
	Side bool `json:"side,omitempty"`

	Replica string `json:"replica"` // replica that served it (router response header), "" if unknown

	Intended   time.Duration `json:"intended_ns"`    // when the closed loop wanted to send it
	Sent       time.Duration `json:"sent_ns"`        // when the request was written
	Headers    time.Duration `json:"headers_ns"`     // when response headers arrived (0: never)
	FirstEvent time.Duration `json:"first_event_ns"` // first SSE event of any kind (0: none)
	FirstToken time.Duration `json:"first_token_ns"` // first non-empty content/reasoning/tool delta (0: none)
	LastToken  time.Duration `json:"last_token_ns"`  // last content-carrying event (0: none)
	Done       time.Duration `json:"done_ns"`        // stream end, error or cancel
	// Held is how long the router held the request before sending it upstream
	// (admission, router.ErrHold): the X-Warden-Held-Ms response header over
	// HTTP, the world's own count in virtual time; 0 when not held. It is part
	// of the TTFB, which counts from Sent.
	Held time.Duration `json:"held_ns,omitempty"`

	Status int    `json:"status"` // HTTP status (0: no response)
	Err    string `json:"err,omitempty"`

	// Token counts. PromptTokens/OutputTokens/CachedTokens come from the server's
	// usage (prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens, or
	// the Anthropic equivalents); CachedTokens is -1 when the server did not report it.
	// NominalPromptTokens is the generator's own count of the words it wrote for the
	// whole prompt (before any template or real tokenizer).
	PromptTokens        int `json:"prompt_tokens"`
	OutputTokens        int `json:"output_tokens"`
	CachedTokens        int `json:"cached_tokens"`
	NominalPromptTokens int `json:"nominal_prompt_tokens"`
}

// OK reports whether the turn completed successfully.
func (r *Result) OK() bool { return r.Err == "" && r.Status == 200 }

// TTFB is the client-side time to first token: from Sent to FirstToken. It is 0 for
// a turn that produced no token.
func (r *Result) TTFB() time.Duration {
	if r.FirstToken == 0 {
		return 0
	}
	return r.FirstToken - r.Sent
}

// Manifest describes a run: what was run, how, and the stage windows of each variant.
// It is written to manifest.json in the run's results directory.
type Manifest struct {
	RunID       string            `json:"run_id"`
	Created     time.Time         `json:"created"`
	Mode        string            `json:"mode"` // "http" (real processes on loopback or a real server) or "virtual"
	Target      string            `json:"target"`
	Scenario    *Scenario         `json:"scenario"`
	Seed        uint64            `json:"seed"`
	Speed       float64           `json:"speed"` // simulated seconds per wall second (1 for real servers)
	Replicas    []string          `json:"replicas"`
	Profile     string            `json:"profile,omitempty"` // simulator profile, "" against real servers
	Policy      string            `json:"policy"`            // router policy used when affinity is on
	Variants    []Variant         `json:"variants"`
	Versions    map[string]string `json:"versions"`
	Interrupted bool              `json:"interrupted"`
	Notes       []string          `json:"notes,omitempty"`
}

// Variant is one pass over all stages with one router setting.
type Variant struct {
	Name     string        `json:"name"`     // "off" or "on" (a repeat adds a suffix)
	Affinity bool          `json:"affinity"` // session affinity on or off
	Stages   []StageWindow `json:"stages"`
	Complete bool          `json:"complete"` // false if interrupted before its last stage ended
}

// StageWindow is one stage of one variant: a concurrency level held over a window
// of simulated time. The measured window is [Start+Warmup, End).
type StageWindow struct {
	Sessions int           `json:"sessions"`
	Start    time.Duration `json:"start_ns"`
	End      time.Duration `json:"end_ns"`
	Warmup   time.Duration `json:"warmup_ns"`
	Complete bool          `json:"complete"`
	// Accounting at the end of the window (peers.md case 14): Started turns ==
	// Completed + Failed + InFlight.
	Started   int `json:"turns_started"`
	Completed int `json:"turns_completed"`
	Failed    int `json:"turns_failed"`
	InFlight  int `json:"turns_in_flight"`
}

// SeriesSample is one scrape of one replica's /metrics (or, in virtual mode, one read
// of an engine's counters), written as a row of series.csv. Counters are cumulative.
type SeriesSample struct {
	Variant          string        `json:"variant"`
	T                time.Duration `json:"t_ns"`
	Replica          string        `json:"replica"`
	Running          float64       `json:"running"`
	Waiting          float64       `json:"waiting"`
	KVUsage          float64       `json:"kv_usage"`
	PrefixQueries    float64       `json:"prefix_queries"`
	PrefixHits       float64       `json:"prefix_hits"`
	PromptTokens     float64       `json:"prompt_tokens"`
	GenerationTokens float64       `json:"generation_tokens"`
	Preemptions      float64       `json:"preemptions"`
}

// DefaultScrapeInterval is the simulated gap between two polls of every replica's
// engine counters (SeriesSample): the HTTP runner scrapes /metrics that often
// (wall gap = interval / speed), the virtual world reads the engines that often.
const DefaultScrapeInterval = time.Second
