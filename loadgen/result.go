package loadgen

import (
	"encoding/json"
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
	// (admission, router.ErrHold): X-Warden-Held-Ms over HTTP (the trailer of
	// a response the router kept alive while it held the request, else the
	// header), the world's own count in virtual time; 0 when not held. It is
	// part of the TTFB, which counts from Sent. A kept-alive response's
	// Headers are the router's commit, before the hold ended.
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

	// Trace identifies the trace request a replayed turn was (nil otherwise).
	Trace *ResultTrace `json:"trace,omitempty"`
}

// ResultTrace is a replayed request's place in its trace.
type ResultTrace struct {
	Index        int           `json:"index"`        // 0-based line of the request among the trace's requests
	Timestamp    time.Duration `json:"timestamp_ns"` // its timestamp after slicing (window shift, speedup)
	InputLength  int           `json:"input_length"`
	OutputLength int           `json:"output_length"`
	// Agent: the call's place in its session tree (agent replays; nil
	// otherwise).
	Agent *AgentCall `json:"agent,omitempty"`
}

// OK reports whether the turn completed successfully.
func (r *Result) OK() bool { return r.Err == "" && r.Status == 200 }

// ShiftForNetwork moves a turn measured next to the server to where a client
// oneWay (half an RTT, Workload.OneWay) away sees it: the client sent the request
// oneWay before the server-side Sent, and every response instant reaches it
// oneWay later. Zero instants (never happened) stay zero.
func (r *Result) ShiftForNetwork(oneWay time.Duration) {
	r.Sent -= oneWay
	for _, t := range []*time.Duration{&r.Headers, &r.FirstEvent, &r.FirstToken, &r.LastToken, &r.Done} {
		if *t != 0 {
			*t += oneWay
		}
	}
}

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
	RunID    string    `json:"run_id"`
	Created  time.Time `json:"created"`
	Mode     string    `json:"mode"` // "http" (real processes on loopback or a real server) or "virtual"
	Target   string    `json:"target"`
	Scenario *Scenario `json:"scenario"`
	Seed     uint64    `json:"seed"`
	Speed    float64   `json:"speed"` // simulated seconds per wall second (1 for real servers)
	Replicas []string  `json:"replicas"`
	Profile  string    `json:"profile,omitempty"` // simulator profile, "" against real servers
	Policy   string    `json:"policy"`            // router policy used when affinity is on
	// Subagents is the router's rule for Claude Code subagents: "split" or
	// "follow" (split_subagents, follow_subagents); omitted: "keep", under the
	// parent's key, or a router the harness does not configure.
	Subagents string `json:"subagents,omitempty"`
	// Admission is the router's admission gate (it acts with affinity on
	// only); absent in runs before it was recorded and through an external
	// router (--router), whose gate the harness does not set.
	Admission   *Admission        `json:"admission,omitempty"`
	Variants    []Variant         `json:"variants"`
	Versions    map[string]string `json:"versions"`
	Interrupted bool              `json:"interrupted"`
	Stopped     *StopReason       `json:"stopped,omitempty"` // a rule ended the run early; nil otherwise
	Notes       []string          `json:"notes,omitempty"`
	// Engines says, per replica scraped, which engine served it and where each
	// series.csv column came from; absent in virtual mode and in runs before
	// engine kinds were recorded (read as vLLM).
	Engines []ReplicaEngine `json:"engines,omitempty"`
	// Traces: one record per variant of a trace replay (Scenario.Trace); absent
	// otherwise.
	Traces []TraceReplay `json:"traces,omitempty"`
	// AgentTraces: one record per variant of an agent-session replay (trace
	// format claude-code); absent otherwise.
	AgentTraces []AgentReplay `json:"agent_traces,omitempty"`
	// TraceCalibration: how a trace replay's prompts were fitted to the
	// server's tokenizer (HTTP runs); absent otherwise.
	TraceCalibration *TraceCalibration `json:"trace_calibration,omitempty"`
}

// ReplicaEngine is one replica's engine in the manifest.
type ReplicaEngine struct {
	Replica  string `json:"replica"`
	Kind     string `json:"kind"`               // "vllm", "sglang", "llamacpp"
	Evidence string `json:"evidence,omitempty"` // how the kind was decided ("configured", "GET /metrics series prefix ...")
	// Columns: the source of every series.csv column, or why it is missing.
	Columns []ColumnSource `json:"columns"`
	// ResetPrefixCache is the endpoint that empties the prefix cache between
	// variants ("POST /flush_cache"), or "none: <what that means>".
	ResetPrefixCache string `json:"reset_prefix_cache"`
}

// ColumnSource is where one series.csv column of one replica came from: Source
// names the series (or endpoint), or Missing says why the column is empty (NaN
// in the file, "n/a" in the report). Exactly one is set.
type ColumnSource struct {
	Column  string `json:"column"`
	Source  string `json:"source,omitempty"`
	Missing string `json:"missing,omitempty"`
}

// StopReason says why a rule of the harness ended a run before its last stage
// (not Ctrl-C, which is Manifest.Interrupted): Reason is the error the run
// returned, Rule the rule and the limit it applied, e.g. the HTTP runner's
// consecutive-failures rule (loadgenhttp.DefaultMaxConsecutiveFailures).
type StopReason struct {
	Reason string `json:"reason"`
	Rule   string `json:"rule"`
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
	// Accounting at the end of the window (docs/bench.md, failure case 5): CarriedIn (turns in
	// flight at the window's start, the previous window's InFlight) + Started
	// (turns sent inside the window) == Completed + Failed + InFlight (turns in
	// flight at its end).
	Started   int `json:"turns_started"`
	Completed int `json:"turns_completed"`
	Failed    int `json:"turns_failed"`
	InFlight  int `json:"turns_in_flight"`
	CarriedIn int `json:"turns_carried_in"`
	// UnrecordedInFlight is the time, summed over turns, that the turns still in
	// flight when the variant stopped (canceled, so not in turns.jsonl) spent in
	// flight inside this window's measured part: the report adds it to what
	// turns.jsonl gives for the achieved concurrency. 0 when omitted.
	UnrecordedInFlight time.Duration `json:"unrecorded_in_flight_ns,omitempty"`

	legacyStarted bool // read from a manifest without turns_carried_in
}

// UnmarshalJSON reads a window, noting whether it has turns_carried_in: a
// manifest written before that field existed counted the carried-in turns in
// turns_started too (Variant.UnmarshalJSON converts it).
func (w *StageWindow) UnmarshalJSON(b []byte) error {
	type plain StageWindow
	aux := struct {
		*plain
		CarriedIn *int `json:"turns_carried_in"` // shallower: shadows plain's
	}{plain: (*plain)(w)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	w.CarriedIn, w.legacyStarted = 0, aux.CarriedIn == nil
	if aux.CarriedIn != nil {
		w.CarriedIn = *aux.CarriedIn
	}
	return nil
}

// UnmarshalJSON reads a variant. Windows of an old manifest (no
// turns_carried_in) get CarriedIn = the previous window's InFlight (0 for the
// first), which their Started included, and Started less that: the accounting
// the loop writes today.
func (v *Variant) UnmarshalJSON(b []byte) error {
	type plain Variant
	if err := json.Unmarshal(b, (*plain)(v)); err != nil {
		return err
	}
	for i := range v.Stages {
		w := &v.Stages[i]
		if !w.legacyStarted {
			continue
		}
		w.legacyStarted = false
		if i > 0 {
			w.CarriedIn = v.Stages[i-1].InFlight
			w.Started -= w.CarriedIn
		}
	}
	return nil
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
	// PromptComputedTokens is the engine's counter of prompt tokens it computed
	// (prefilled), not served from its prefix cache: vLLM
	// vllm:prompt_tokens_by_source_total{source="local_compute"}, SGLang's
	// prefill compute counter, llama.cpp's llamacpp:prompt_tokens_total
	// (engines.FigPromptComputed); NaN when the engine does not export it.
	PromptComputedTokens float64 `json:"prompt_computed_tokens"`
}

// DefaultScrapeInterval is the mean simulated gap between two polls of every
// replica's engine counters (SeriesSample): the HTTP runner scrapes /metrics once
// per interval (wall = interval / speed), the virtual world reads the engines once
// per interval, each at the same jittered instant within it (PollSchedule).
const DefaultScrapeInterval = time.Second
