package loadgen

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmwarden/warden/internal/vllmdp"
	"github.com/lmwarden/warden/internal/yamlpos"
	"github.com/lmwarden/warden/loadgen/agent"
)

// Scenario defaults. They describe the reference workload (docs/measurements.md,
// "The reference measurement"): a ~3.5k-token shared system prompt, a unique ~6k-token first user
// message, five more turns of ~400 user tokens, at most 256 output tokens per turn,
// stages of 4, 8, 16, 24 and 32 concurrent sessions of 3 minutes each, affinity off
// then on.
const (
	DefaultSeed               uint64 = 1
	DefaultSystemPromptTokens        = 3500
	DefaultFirstTurnTokens           = 6000
	DefaultTurnTokens                = 400
	DefaultTurns                     = 6
	DefaultMaxOutputTokens           = 256
	DefaultStageDuration             = 3 * time.Minute
	DefaultRequestTimeout            = 10 * time.Minute
	// DefaultFailureBackoff is the least gap between a failed turn and the first turn
	// of the session that replaces it. Without it a server that fails instantly (a
	// refused connection, a 400) would make the closed loop spin, and in the
	// virtual-time world loop forever at one instant.
	DefaultFailureBackoff = time.Second
)

// API names accepted in Scenario.API.
const (
	APIOpenAIChat        = "openai-chat"        // POST /v1/chat/completions
	APIAnthropicMessages = "anthropic-messages" // POST /v1/messages?beta=true
	APIOpenAIResponses   = "openai-responses"   // POST /v1/responses, as the Codex CLI sends it
)

// Session key styles accepted in Scenario.SessionHeader (docs/router.md section 4).
const (
	// SessionHeaderClaudeCode sends X-Claude-Code-Session-Id: <uuid> and, on the
	// Anthropic API, metadata.user_id = {"device_id":..,"account_uuid":"","session_id":<uuid>}
	// as Claude Code >= 2.1.86 does.
	SessionHeaderClaudeCode = "claude-code"
	// SessionHeaderXSessionID sends X-Session-ID: <uuid> (vLLM's multi-turn benchmark).
	SessionHeaderXSessionID = "x-session-id"
	// SessionHeaderCodex sends session-id: <id> and thread-id: <id>, as the Codex CLI
	// (0.171.0) does (docs/responses-api.md); the Responses client also puts the id
	// in prompt_cache_key whatever the style. The default for APIOpenAIResponses.
	SessionHeaderCodex = "codex"
	// SessionHeaderNone sends no session key at all (no header, no
	// metadata.user_id, no prompt_cache_key): a generic client, the traffic the
	// router places keyless (docs/routing.md "Keyless placement").
	SessionHeaderNone = "none"
)

// SessionHeaders lists every style Scenario.SessionHeader accepts, in the order
// help and error texts name them.
var SessionHeaders = []string{SessionHeaderClaudeCode, SessionHeaderXSessionID, SessionHeaderCodex, SessionHeaderNone}

// Upper bounds Validate puts on a scenario, so that a typo (an extra zero) fails
// at once instead of exhausting the machine's memory. MaxSessions keeps the memory
// budget it was set with (5x the 2,000 sessions measured at 825 MB in virtual mode,
// fresh-user trial 2026-11-29: 0.4 MB each, the harness keeping each session's
// history) for sessions that since cost about half as much: one copy of each
// conversation as token ids in virtual mode (peak RSS 881 -> 410 MB at 1,600
// sessions on 32 replicas, results/bench/virtual-scale.md); MaxTurns is far past
// any context a served model accepts.
const (
	MaxSessions = 20_000
	MaxTurns    = 10_000
)

// DefaultStages returns the reference ramp: 4, 8, 16, 24, 32 concurrent sessions.
func DefaultStages() []int { return []int{4, 8, 16, 24, 32} }

// DefaultVariants returns the reference variants: affinity off, then on.
func DefaultVariants() []string { return []string{"off", "on"} }

// TokenRange is the spread of a token count: each draw is uniform over [Min, Max]
// (inclusive). The zero TokenRange means "fixed": every draw is the nominal count.
type TokenRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// IsFixed reports whether the range is the zero value (no spread).
func (r TokenRange) IsFixed() bool { return r.Min == 0 && r.Max == 0 }

// DurationRange is the spread of a duration (Scenario.ThinkSpread): each draw is
// uniform over [Min, Max] at nanosecond resolution. The zero value means fixed.
type DurationRange struct {
	Min time.Duration `json:"min"`
	Max time.Duration `json:"max"`
}

// IsFixed reports whether the range is the zero value (no spread).
func (r DurationRange) IsFixed() bool { return r.Min == 0 && r.Max == 0 }

// The reference scenario's network and API server (docs/simulator.md section 9,
// where the sources are): what an internet client of a small office server sees,
// and vLLM's default number of API-server processes for --data-parallel-size 4.
// They are set by DefaultScenario (and scenarios/claude-code-reference.yaml), not
// by WithDefaults: a scenario without rtt or api_servers has neither.
const (
	// ReferenceRTT is the reference client's round trip: two broadband access links
	// (FCC Measuring Broadband America: 11.5-14.7 ms idle on fibre) and an
	// in-country path (an ISP's published targets: < 50 ms within Germany, < 70 ms
	// within Europe).
	ReferenceRTT = 50 * time.Millisecond
	// ReferenceRTTJitter spreads each turn's RTT uniformly over ReferenceRTT ±
	// this (an assumption: idle broadband latency varies by a few ms).
	ReferenceRTTJitter = 5 * time.Millisecond
	// ReferenceAPIServers is vLLM's --api-server-count for --data-parallel-size 4
	// when not given: the DP size (vllm-project/vllm PR #32525, 2026-01).
	ReferenceAPIServers = 4
)

// DefaultScenario returns the reference workload with every default filled in,
// including the reference's network and API server (ReferenceRTT,
// ReferenceAPIServers).
func DefaultScenario() *Scenario {
	sc := &Scenario{
		Name:       "claude-code-reference",
		RTT:        ReferenceRTT,
		RTTSpread:  DurationRange{Min: ReferenceRTT - ReferenceRTTJitter, Max: ReferenceRTT + ReferenceRTTJitter},
		APIServers: ReferenceAPIServers,
	}
	return sc.WithDefaults()
}

// WithDefaults returns a copy of sc in which every zero field holds its default.
// Slices are copied, so the result shares no memory with sc.
func (sc *Scenario) WithDefaults() *Scenario {
	c := *sc
	c.Stages = append([]int(nil), sc.Stages...)
	c.Variants = append([]string(nil), sc.Variants...)
	if sc.ResetCache != nil {
		v := *sc.ResetCache
		c.ResetCache = &v
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.API == "" {
		c.API = APIOpenAIChat
	}
	if c.SessionHeader == "" && c.API == APIOpenAIResponses {
		c.SessionHeader = SessionHeaderCodex
	}
	if c.SessionHeader == "" {
		c.SessionHeader = SessionHeaderClaudeCode
	}
	if c.SystemPromptTokens == 0 {
		c.SystemPromptTokens = DefaultSystemPromptTokens
	}
	if c.FirstTurnTokens == 0 {
		c.FirstTurnTokens = DefaultFirstTurnTokens
	}
	if c.TurnTokens == 0 {
		c.TurnTokens = DefaultTurnTokens
	}
	if c.Turns == 0 {
		c.Turns = DefaultTurns
	}
	if c.MaxOutputTokens == 0 {
		c.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if len(c.Stages) == 0 {
		c.Stages = DefaultStages()
	}
	if c.StageDuration == 0 {
		c.StageDuration = DefaultStageDuration
	}
	if len(c.Variants) == 0 {
		c.Variants = DefaultVariants()
	}
	if c.ResetCache == nil {
		t := true
		c.ResetCache = &t
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.FailureBackoff == 0 {
		c.FailureBackoff = DefaultFailureBackoff
	}
	if c.Shape == ShapeAgent && c.Agent == nil {
		c.Agent = &AgentShape{}
	}
	if c.Agent != nil {
		c.Agent = c.Agent.clone()
		if c.Agent.TokenScale == 0 {
			c.Agent.TokenScale = 1
		}
	}
	if sc.SideRequests != nil {
		s := *sc.SideRequests
		s.Turns = append([]int(nil), s.Turns...)
		if s.PromptTokens == 0 {
			s.PromptTokens = DefaultSidePromptTokens
		}
		if s.MaxOutputTokens == 0 {
			s.MaxOutputTokens = DefaultSideMaxOutputTokens
		}
		c.SideRequests = &s
	}
	return &c
}

// SimulatesServerSide reports whether the scenario sets simulated network or
// API-server time (RTT, RTTSpread, APIServers), which only the simulator's worlds
// apply.
func (sc *Scenario) SimulatesServerSide() bool {
	return sc.RTT != 0 || !sc.RTTSpread.IsFixed() || sc.APIServers != 0 || sc.VLLMBalancer != ""
}

// ForRealServers returns a copy of sc without the simulated network and API-server
// time: against real servers the real network and API server provide them.
func (sc *Scenario) ForRealServers() *Scenario {
	c := *sc
	c.RTT, c.RTTSpread, c.APIServers, c.VLLMBalancer = 0, DurationRange{}, 0, ""
	return &c
}

// variantRE: "off" or "on", optionally with a suffix for a repeat ("on-2", "off_b").
var variantRE = regexp.MustCompile(`^(off|on)([-_.][A-Za-z0-9_.-]+)?$`)

// AffinityOf returns the router setting a variant name stands for: "off..." is
// affinity off, "on..." is affinity on.
func AffinityOf(variant string) (bool, error) {
	m := variantRE.FindStringSubmatch(variant)
	if m == nil {
		return false, fmt.Errorf("variant %q: want \"off\" or \"on\", optionally with a suffix such as \"on-2\"", variant)
	}
	return m[1] == "on", nil
}

// Validate checks the scenario with defaults applied (a zero field is valid: it
// means the default) and returns every problem found, joined with errors.Join. Each
// problem names the YAML field, prefixed with "file:line: " when the scenario was
// loaded from a file.
func (sc *Scenario) Validate() error {
	var errs []error
	for _, p := range sc.problems() {
		errs = append(errs, p.err(sc.source))
	}
	return errors.Join(errs...)
}

// problems returns what Validate reports, each with its field and line.
func (sc *Scenario) problems() []problem {
	c := sc.WithDefaults()
	ps := &problemSet{sc: sc}
	switch c.API {
	case APIOpenAIChat, APIAnthropicMessages, APIOpenAIResponses:
	default:
		ps.bad("api", "unknown API %q (want %q, %q or %q)", c.API, APIOpenAIChat, APIAnthropicMessages, APIOpenAIResponses)
	}
	if !slices.Contains(SessionHeaders, c.SessionHeader) {
		ps.bad("session_header", "unknown style %q (want one of %s)", c.SessionHeader, strings.Join(SessionHeaders, ", "))
	}
	ps.tokens("system_prompt_tokens", c.SystemPromptTokens, c.SystemPromptSpread)
	ps.tokens("first_turn_tokens", c.FirstTurnTokens, c.FirstTurnSpread)
	ps.tokens("turn_tokens", c.TurnTokens, c.TurnSpread)
	if c.Turns < 1 {
		ps.bad("turns", "must be at least 1, got %d", c.Turns)
	} else if c.Turns > MaxTurns {
		ps.bad("turns", "%d is more than %d (a conversation's context grows with every turn; a real one hits the model's max_model_len long before)", c.Turns, MaxTurns)
	}
	if c.MaxOutputTokens < 1 {
		ps.bad("max_output_tokens", "must be at least 1, got %d", c.MaxOutputTokens)
	}
	if c.SLO != nil {
		if c.SLO.TTFB < 0 || c.SLO.TPOT < 0 || (c.SLO.TTFB == 0 && c.SLO.TPOT == 0) {
			ps.bad("slo", "give ttfb and/or tpot as positive durations (e.g. ttfb: 2s, tpot: 50ms), got ttfb %v, tpot %v", c.SLO.TTFB, c.SLO.TPOT)
		}
	}
	if c.Trace != nil {
		// TraceSpec.Validate names its fields ("trace.sample ..."): one problem
		// per message, not "trace: " again in front.
		if err := c.Trace.Validate(); err != nil {
			for _, msg := range strings.Split(err.Error(), "\n") {
				ps.out = append(ps.out, problem{line: sc.line("trace"), field: "trace", text: msg})
			}
		}
	}
	ps.duration("think_time", c.ThinkTime, c.ThinkSpread)
	ps.duration("rtt", c.RTT, c.RTTSpread)
	if c.APIServers < 0 {
		ps.bad("api_servers", "must not be negative, got %d", c.APIServers)
	}
	if c.VLLMBalancer != "" {
		if err := vllmdp.ValidRelease(c.VLLMBalancer); err != nil {
			ps.bad("vllm_balancer", "%v", err)
		} else if c.APIServers < 1 {
			ps.bad("vllm_balancer", "needs api_servers (the processes that each run a balancer), got %d", c.APIServers)
		}
	}
	if c.FailureBackoff < 0 {
		ps.bad("failure_backoff", "must not be negative, got %s", c.FailureBackoff)
	}
	for i, n := range c.Stages {
		if n < 1 {
			ps.bad(fmt.Sprintf("stages[%d]", i), "must be at least 1 session, got %d", n)
		} else if n > MaxSessions {
			ps.bad(fmt.Sprintf("stages[%d]", i), "%d sessions is more than %d: the harness keeps every session's history (about 0.2 MB each in virtual mode, results/bench/virtual-scale.md), so this would need about %.0f GB",
				n, MaxSessions, float64(n)*0.2/1024)
		}
	}
	if c.StageDuration <= 0 {
		ps.bad("stage_duration", "must be positive, got %s", c.StageDuration)
	}
	if c.Warmup < 0 {
		ps.bad("warmup", "must not be negative, got %s", c.Warmup)
	} else if c.StageDuration > 0 && c.Warmup >= c.StageDuration {
		ps.bad("warmup", "%s leaves nothing of a %s stage to measure", c.Warmup, c.StageDuration)
	}
	seen := map[string]bool{}
	for i, v := range c.Variants {
		field := fmt.Sprintf("variants[%d]", i)
		if _, err := AffinityOf(v); err != nil {
			ps.bad(field, "%v", err)
		}
		if seen[v] {
			ps.bad(field, "duplicate variant %q", v)
		}
		seen[v] = true
	}
	if c.RequestTimeout <= 0 {
		ps.bad("request_timeout", "must be positive, got %s", c.RequestTimeout)
	}
	ps.sideRequests(c)
	ps.shapeProblems(c)
	return ps.out
}

// problemSet collects Validate's problems of sc in order.
type problemSet struct {
	sc  *Scenario
	out []problem
}

// bad adds the problem "field: text" at field's line.
func (ps *problemSet) bad(field, format string, args ...any) {
	ps.out = append(ps.out, problem{line: ps.sc.line(field), field: field, text: field + ": " + fmt.Sprintf(format, args...)})
}

// tokens checks a token count field with its nominal n and draw range r.
func (ps *problemSet) tokens(field string, n int, r TokenRange) {
	if n < 1 {
		ps.bad(field, "must be at least 1 token, got %d", n)
		return
	}
	if r.IsFixed() {
		return
	}
	if r.Min < 1 {
		ps.bad(field, "smallest draw must be at least 1 token, got %d", r.Min)
	}
	if r.Min > r.Max {
		ps.bad(field, "min %d is greater than max %d", r.Min, r.Max)
		return
	}
	if n < r.Min || n > r.Max {
		ps.bad(field, "nominal %d lies outside [%d, %d]", n, r.Min, r.Max)
	}
}

// duration checks a duration field with its nominal value and draw range r.
func (ps *problemSet) duration(field string, nominal time.Duration, r DurationRange) {
	if r.IsFixed() {
		if nominal < 0 {
			ps.bad(field, "must not be negative, got %s", nominal)
		}
		return
	}
	switch {
	case r.Min < 0:
		ps.bad(field, "smallest draw (min, or mean - jitter) must not be negative, got %s", r.Min)
	case r.Min > r.Max:
		ps.bad(field, "min %s is greater than max %s", r.Min, r.Max)
	case nominal < r.Min || nominal > r.Max:
		ps.bad(field, "nominal %s lies outside [%s, %s]", nominal, r.Min, r.Max)
	}
}

// sideRequests checks c's side_requests block, if any (c with defaults).
func (ps *problemSet) sideRequests(c *Scenario) {
	if s := c.SideRequests; s != nil {
		if len(s.Turns) == 0 {
			ps.bad("side_requests.turns", "list the turns (0-based) that send a side request, e.g. [0]")
		}
		seenTurn := map[int]bool{}
		for i, t := range s.Turns {
			if t < 0 || t >= c.Turns {
				ps.bad(fmt.Sprintf("side_requests.turns[%d]", i), "turn %d is not one of the session's turns 0..%d", t, c.Turns-1)
			}
			if seenTurn[t] {
				ps.bad(fmt.Sprintf("side_requests.turns[%d]", i), "turn %d listed twice", t)
			}
			seenTurn[t] = true
		}
		if s.PromptTokens < 1 {
			ps.bad("side_requests.prompt_tokens", "must be at least 1 token, got %d", s.PromptTokens)
		}
		if s.MaxOutputTokens < 1 {
			ps.bad("side_requests.max_output_tokens", "must be at least 1, got %d", s.MaxOutputTokens)
		}
	}
}

// line returns the line of a field ("stages[1]", "side_requests.turns",
// "agent.subagent_types[1].name") of a scenario loaded from a file: its key's,
// else its nearest enclosing key's; 0 if unknown.
func (sc *Scenario) line(field string) int {
	key := field
	for key != "" {
		if line := sc.lines[key]; line > 0 {
			return line
		}
		key = key[:max(0, strings.LastIndexAny(key, ".["))]
	}
	return 0
}

// problem is one thing wrong with a scenario: its line in the file (0: none
// known), the field it is about ("" if none) and its text, "field: what" (or
// yaml.v3's message with the field named).
type problem struct {
	line  int
	field string
	text  string
}

// err formats p as "source:line: text", "source: text" without a line, and
// without a source as "line N: text" or "text".
func (p problem) err(source string) error {
	switch {
	case source != "" && p.line > 0:
		return fmt.Errorf("%s:%d: %s", source, p.line, p.text)
	case source != "":
		return fmt.Errorf("%s: %s", source, p.text)
	case p.line > 0:
		return fmt.Errorf("line %d: %s", p.line, p.text)
	}
	return errors.New(p.text)
}

// Source returns the file the scenario was loaded from ("" if built in code).
func (sc *Scenario) Source() string { return sc.source }

// LoadScenario reads a scenario file strictly (unknown fields are errors), fills in
// defaults and validates it. Durations are Go duration strings ("3m", "500ms").
// Token counts are an integer, {mean: M, jitter: J} (uniform over [M-J, M+J]) or
// {min: A, max: B} (uniform over [A, B], nominal (A+B)/2). All problems are reported
// at once, each as "path:line: field: problem". A scenario without a name takes the
// file's base name.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading scenario: %w", err)
	}
	sc, err := ParseScenario(data, path)
	if err != nil {
		return nil, err
	}
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if sc.Trace != nil && sc.Trace.Path == "" {
		sc.Trace.Path = sc.Trace.File
		if !filepath.IsAbs(sc.Trace.File) {
			sc.Trace.Path = filepath.Join(filepath.Dir(path), sc.Trace.File)
		}
	}
	if sc.Trace != nil && sc.Trace.Format == "" {
		if f, err := DetectFormat(sc.Trace.Path); err == nil {
			sc.Trace.Format = f
			if err := sc.Trace.Validate(); err != nil {
				return nil, fmt.Errorf("%s: trace %s is %s: %w", path, sc.Trace.File, f, err)
			}
		}
	}
	return sc, nil
}

// ParseScenario decodes a scenario from YAML bytes as LoadScenario does; source
// names the input in error messages ("" for none).
func ParseScenario(data []byte, source string) (*Scenario, error) {
	prefix := "scenario: "
	if source != "" {
		prefix = source + ": "
	}
	sc := &Scenario{source: source, lines: yamlpos.KeyLines(data)}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// yaml.v3 keeps decoding after a type error (unknown field, wrong type) and
	// reports them all in one *yaml.TypeError; the fields it could decode are then
	// validated too, so one pass reports every problem.
	var probs []problem
	if err := dec.Decode(sc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%sscenario is empty", prefix)
		}
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("%sdecoding YAML: %s", prefix, yamlpos.SyntaxLine(err.Error()))
		}
		for _, e := range te.Errors {
			loc := yamlpos.Locate(tidyYAMLError(e), sc.lines)
			probs = append(probs, problem{line: loc.Line, field: loc.Path, text: loc.Text})
		}
	}
	// A key given twice makes yaml.v3 skip the whole mapping that holds it
	// (decode.go mapping, uniqueKeys), so every other check would report fields
	// of that mapping as missing or empty: the duplicates are the only messages.
	if dups := duplicateKeys(probs); len(dups) > 0 {
		probs = dups
		errs := make([]error, len(probs))
		for i, p := range probs {
			errs[i] = p.err(source)
		}
		return nil, errors.Join(errs...)
	}
	// A field that failed to decode is left empty; validating it would only add
	// a second, misleading message (e.g. "list the turns" after a type error).
	undecoded := map[string]bool{}
	for _, p := range probs {
		f, _, _ := strings.Cut(p.field, "[")
		undecoded[f] = true
	}
	probs = append(probs, fractionalInts(data)...)
	probs = append(probs, fractionalAgentInts(data)...)
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		msg := "only one YAML document is allowed"
		if source == "" {
			msg = prefix + msg
		}
		probs = append(probs, problem{text: msg})
	}
	sc.SystemPromptTokens, sc.SystemPromptSpread = splitTokens(sc.SystemPromptSpread)
	sc.FirstTurnTokens, sc.FirstTurnSpread = splitTokens(sc.FirstTurnSpread)
	sc.TurnTokens, sc.TurnSpread = splitTokens(sc.TurnSpread)
	sc.ThinkTime, sc.ThinkSpread = splitDuration(sc.ThinkSpread)
	sc.RTT, sc.RTTSpread = splitDuration(sc.RTTSpread)
	// An empty list would silently mean the default (WithDefaults): say so.
	if _, ok := sc.lines["stages"]; ok && len(sc.Stages) == 0 && !undecoded["stages"] {
		probs = append(probs, problem{line: sc.line("stages"), field: "stages",
			text: fmt.Sprintf("stages: empty list (omit the field for the default ramp %v)", DefaultStages())})
	}
	if _, ok := sc.lines["variants"]; ok && len(sc.Variants) == 0 && !undecoded["variants"] {
		probs = append(probs, problem{line: sc.line("variants"), field: "variants",
			text: "variants: empty list (omit the field for the default off, on)"})
	}
	for _, p := range sc.problems() {
		f, _, _ := strings.Cut(p.field, "[")
		parent, _, _ := strings.Cut(f, ".")
		if !undecoded[f] && !undecoded[parent] {
			probs = append(probs, p)
		}
	}
	if len(probs) > 0 {
		// In file order, whichever check found them.
		slices.SortStableFunc(probs, func(a, b problem) int { return cmp.Compare(a.line, b.line) })
		errs := make([]error, len(probs))
		for i, p := range probs {
			errs[i] = p.err(source)
		}
		return nil, errors.Join(errs...)
	}
	return sc.WithDefaults(), nil
}

// duplicateKeyRE matches yaml.v3's duplicate-key message (decode.go mapping).
var duplicateKeyRE = regexp.MustCompile(`mapping key "(.*)" already defined at line (\d+)$`)

// duplicateKeys returns the problems among probs that are keys given twice in
// one mapping, rewritten as "FIELD: key given twice (first at line N)" at the
// second occurrence's line (FIELD: the key's path, e.g. side_requests.turns).
func duplicateKeys(probs []problem) []problem {
	var out []problem
	for _, p := range probs {
		if m := duplicateKeyRE.FindStringSubmatch(p.text); m != nil {
			field := p.field // the key's path, e.g. side_requests.turns, when yamlpos found it
			if field == "" {
				field = m[1]
			}
			out = append(out, problem{line: p.line, field: field,
				text: fmt.Sprintf("%s: key given twice (first at line %s)", field, m[2])})
		}
	}
	return out
}

// tidyYAMLError rewrites yaml.v3 messages to name fields as the schema does.
func tidyYAMLError(msg string) string {
	msg = yamlpos.KnownKeys(msg, Scenario{}, SideRequests{}, AgentShape{}, agent.Dist[int]{}, agent.Dist[time.Duration]{}, agent.SubagentType{})
	msg = strings.ReplaceAll(msg, " into loadgen.AgentShape", " into a map (agent: parameters, scenarios/README.md)")
	msg = strings.ReplaceAll(msg, " into loadgen.SideRequests", " into a map (turns, prompt_tokens, max_output_tokens)")
	msg = strings.ReplaceAll(msg, " into loadgen.Scenario", " into a scenario (a mapping of fields)")
	return yamlpos.Tidy(msg)
}

// intFields are the scenario's integer fields that yaml.v3 would fill from a
// fractional number by truncating it (1.5 -> 1).
var intFields = []string{"seed", "turns", "max_output_tokens"}

// fractionalInts reports an integer field written as a fractional number.
func fractionalInts(data []byte) []problem {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := doc.Content[0]
	var out []problem
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if slices.Contains(intFields, k.Value) && v.Kind == yaml.ScalarNode && v.Tag == "!!float" {
			out = append(out, problem{line: v.Line, field: k.Value, text: fmt.Sprintf("%s: %s is not an integer", k.Value, v.Value)})
		}
	}
	return out
}

// fractionalAgentInts reports an integer field under agent: written as a
// fractional number (yaml.v3 would truncate it), found by walking the section
// beside AgentShape's type.
func fractionalAgentInts(data []byte) []problem {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := doc.Content[0]
	var out []problem
	var walk func(n *yaml.Node, t reflect.Type, path string)
	walk = func(n *yaml.Node, t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case n.Kind == yaml.ScalarNode && t.Kind() == reflect.Int && n.Tag == "!!float":
			out = append(out, problem{line: n.Line, field: path, text: fmt.Sprintf("%s: %s is not an integer", path, n.Value)})
		case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if f, ok := yamlField(t, n.Content[i].Value); ok {
					walk(n.Content[i+1], f, path+"."+n.Content[i].Value)
				}
			}
		case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
			for i, c := range n.Content {
				walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "agent" {
			walk(m.Content[i+1], reflect.TypeOf(AgentShape{}), "agent")
		}
	}
	return out
}

// yamlField returns the type of struct t's field decoded from key (inline
// structs included).
func yamlField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if strings.Contains(opts, "inline") {
			if ft, ok := yamlField(f.Type, key); ok {
				return ft, true
			}
			continue
		}
		if name == key {
			return f.Type, true
		}
	}
	return nil, false
}

// UnmarshalYAML decodes a token count as written in a scenario file (400,
// {mean: 400, jitter: 50} or {min: 350, max: 450}) into the range of its draws:
// [400, 400] for a fixed count; ParseScenario splits it (splitTokens). Problems
// are returned as a *yaml.TypeError so the decoder keeps going and reports them
// with the others.
func (r *TokenRange) UnmarshalYAML(n *yaml.Node) error {
	lo, hi, err := decodeSpread[int](n, "token count", "an integer", "N", "J")
	if err != nil {
		return err
	}
	*r = TokenRange{Min: lo, Max: hi}
	return nil
}

// UnmarshalYAML decodes a think time as written in a scenario file (3s, {mean:
// 5s, jitter: 4s} or {min: 1s, max: 9s}) as TokenRange.UnmarshalYAML does.
func (r *DurationRange) UnmarshalYAML(n *yaml.Node) error {
	lo, hi, err := decodeSpread[time.Duration](n, "think time", "a duration such as 3s", "D", "J")
	if err != nil {
		return err
	}
	*r = DurationRange{Min: lo, Max: hi}
	return nil
}

// splitTokens splits a decoded token range into the nominal count, its middle,
// and the spread, zero when the range is one value.
func splitTokens(r TokenRange) (int, TokenRange) {
	nominal, lo, hi := middle(r.Min, r.Max)
	return nominal, TokenRange{Min: lo, Max: hi}
}

// splitDuration splits a decoded think-time range as splitTokens does.
func splitDuration(r DurationRange) (time.Duration, DurationRange) {
	nominal, lo, hi := middle(r.Min, r.Max)
	return nominal, DurationRange{Min: lo, Max: hi}
}

// middle returns the middle of [lo, hi] and the range, zero when lo == hi.
func middle[T int | time.Duration](lo, hi T) (nominal, spreadLo, spreadHi T) {
	if lo == hi {
		return lo, 0, 0
	}
	return lo + (hi-lo)/2, lo, hi
}

// decodeSpread decodes a value or a uniform distribution of it: V, {mean: M,
// jitter: J} (uniform over [M-J, M+J]) or {min: A, max: B}. It returns the range
// of the draws, [V, V] for a fixed value. what and unit
// name the field and its type in messages ("token count", "an integer"); m and j
// are the placeholders of the mean and jitter in them. Problems are returned as a
// *yaml.TypeError with their line, so the decoder reports them with the others.
func decodeSpread[T int | time.Duration](n *yaml.Node, what, unit, m, j string) (lo, hi T, err error) {
	fail := func(line int, format string, args ...any) (T, T, error) {
		return 0, 0, &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", line) + fmt.Sprintf(format, args...)}}
	}
	want := fmt.Sprintf("want %s, {mean: %s, jitter: %s} or {min: A, max: B}", unit, m, j)
	switch n.Kind {
	case yaml.ScalarNode:
		var v T
		if err := n.Decode(&v); err != nil {
			return fail(n.Line, "%s %q: %s", what, n.Value, want)
		}
		return v, v, nil
	case yaml.MappingNode:
		vals := map[string]T{}
		var errs []string
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch k.Value {
			case "mean", "jitter", "min", "max":
			default:
				errs = append(errs, fmt.Sprintf("line %d: unknown %s distribution field %q (%s)", k.Line, what, k.Value, want))
				continue
			}
			if _, dup := vals[k.Value]; dup {
				errs = append(errs, fmt.Sprintf("line %d: duplicate field %q", k.Line, k.Value))
				continue
			}
			var x T
			if err := v.Decode(&x); err != nil {
				errs = append(errs, fmt.Sprintf("line %d: %s: %q is not %s", v.Line, k.Value, v.Value, unit))
				continue
			}
			vals[k.Value] = x
		}
		if len(errs) > 0 {
			return 0, 0, &yaml.TypeError{Errors: errs}
		}
		mean, hasMean := vals["mean"]
		jitter, hasJitter := vals["jitter"]
		a, hasMin := vals["min"]
		b, hasMax := vals["max"]
		switch {
		case hasMean && !hasMin && !hasMax:
			if jitter < 0 {
				return fail(n.Line, "jitter must not be negative, got %v", jitter)
			}
			return mean - jitter, mean + jitter, nil
		case hasMin && hasMax && !hasMean && !hasJitter:
			return a, b, nil
		case (hasMean || hasJitter) && (hasMin || hasMax):
			return fail(n.Line, "%s distribution mixes {mean, jitter} with {min, max}: %s", what, want)
		case hasMin != hasMax:
			return fail(n.Line, "%s distribution: min and max go together: %s", what, want)
		case hasJitter && !hasMean:
			return fail(n.Line, "%s distribution: jitter needs a mean: %s", what, want)
		}
		return fail(n.Line, "%s distribution: %s", what, want)
	}
	return fail(n.Line, "%s: %s", what, want)
}

// TinyScenario is a small, fast scenario for tests of the loop, the runner and
// their callers: stages of 2 and 4 sessions of 10 s, 3 turns of 50+80/20 prompt
// tokens and 8 output tokens, seed 42, both variants.
func TinyScenario() *Scenario {
	return (&Scenario{
		Name:               "test",
		Seed:               42,
		SystemPromptTokens: 50,
		FirstTurnTokens:    80,
		TurnTokens:         20,
		Turns:              3,
		MaxOutputTokens:    8,
		Stages:             []int{2, 4},
		StageDuration:      10 * time.Second,
		Variants:           []string{"off", "on"},
	}).WithDefaults()
}
