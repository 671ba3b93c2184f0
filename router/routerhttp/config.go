package routerhttp

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/yamlpos"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/redisstate"

	"github.com/lmwarden/warden/internal/simclock"
)

// Config defaults.
const (
	DefaultListen = ":8080"
	// DefaultAdminListen is loopback only: the admin API changes routing.
	DefaultAdminListen = "127.0.0.1:8081"
	// DefaultBodyLimit bounds a request body. Claude Code bodies run 50-100 KB at
	// the start of a conversation and grow with it; a 200k-token context is ~1 MB.
	DefaultBodyLimit = 32 << 20
	// DefaultHealthInterval is how often the router calls each upstream's /health.
	DefaultHealthInterval = 5 * time.Second
	// DefaultDialTimeout bounds connecting to an upstream; a refused or timed-out
	// connect is retried on another replica.
	DefaultDialTimeout = 5 * time.Second
	// DefaultBodyReadTimeout bounds reading one request body (wall time from
	// the request's headers): a 1 MB Claude Code body needs 35 KB/s to arrive
	// in time, a 32 MiB one (the body limit) 1.1 MB/s. The same 30 s as the
	// servers' read-header timeout.
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultBodyMemoryBytes caps the memory of all request bodies being read
	// at once: 256 one-MB Claude Code bodies in transit together, or 8 at the
	// body limit. A body holds what it received (from a 16 KiB start, doubling),
	// so 1,000 clients trickling bytes hold about 16 MiB of it.
	DefaultBodyMemoryBytes = 256 << 20
	// DefaultDrainTimeout is how long requests in flight get to finish once
	// the listener closed at shutdown (Config.DrainTimeout): the 10 s grace
	// `warden route` gave them before drain_timeout existed.
	DefaultDrainTimeout = 10 * time.Second
	// WildcardModel as a model name matches any requested model.
	WildcardModel = "*"
)

// Config is the router's configuration: defaults, then a YAML file (ParseConfig,
// LoadConfig), then flags set by the caller, then Validate. Zero values mean the
// documented default. Durations are YAML strings such as "1s" or "500ms"; they
// are simulated time on Clock (wall time at the default speed 1).
type Config struct {
	Listen      string `yaml:"listen"`       // main listener (API + /metrics); default ":8080"
	AdminListen string `yaml:"admin_listen"` // admin API listener; default "127.0.0.1:8081"
	// AdminToken, when set, is required as "Authorization: Bearer <token>" on the
	// admin API.
	AdminToken string `yaml:"admin_token"`
	// BodyLimit in bytes; larger bodies get 413. Default DefaultBodyLimit.
	BodyLimit int64 `yaml:"body_limit_bytes"`
	// BodyReadTimeout bounds reading one request body, wall time (408 past it,
	// in the API's error shape). Default DefaultBodyReadTimeout (30s);
	// negative: none.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout"`
	// BodyMemoryBytes caps the bytes all request bodies being read hold
	// together; a request whose body would pass it gets 503 with Retry-After.
	// Default DefaultBodyMemoryBytes (256 MiB).
	BodyMemoryBytes int64 `yaml:"body_memory_bytes"`
	// ScrapeInterval between /metrics scrapes of each upstream; scrapes older than 3
	// intervals are ignored. Default 1s; negative disables scraping.
	ScrapeInterval time.Duration `yaml:"scrape_interval"`
	// HealthInterval between /health checks of each upstream. Default 5s; negative
	// disables active checks (passive marking still happens).
	HealthInterval time.Duration `yaml:"health_interval"`
	// DialTimeout for upstream connections. Default 5s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout: give up (504) when an upstream sends no response
	// headers for this long. Default 0: none (a non-streaming request under load
	// legitimately waits for minutes). Never applies to a stream once it started.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	SessionTTL            time.Duration `yaml:"session_ttl"`  // default 1h
	MaxSessions           int           `yaml:"max_sessions"` // default 1,000,000
	// SessionHeaders are read for a session key after Claude Code's own sources;
	// default [X-Session-ID].
	SessionHeaders []string `yaml:"session_headers"`
	// UseOpenAIUser takes the OpenAI "user" body field as a session key, last.
	UseOpenAIUser bool `yaml:"use_openai_user"`
	// SplitSubagents places Claude Code subagents on their own (see KeyConfig).
	SplitSubagents bool `yaml:"split_subagents"`
	// FollowSubagents gives subagents keys of their own that start on their
	// parent's replica while it is under the overflow threshold (KeyConfig).
	FollowSubagents bool `yaml:"follow_subagents"`
	// SnapshotInterval of the shortest-queue policy (affinity off); default 100ms.
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
	// Seed of the tie-break randomness (model i uses Seed + i). The Config
	// takes it as given, 0 included; `warden route` draws one from the clock
	// when neither the file (FileSets("seed")) nor --seed sets it, and the
	// benchmark and virtual runs keep theirs, so their runs repeat.
	Seed uint64 `yaml:"seed"`
	// Ejection of a replica whose requests fail while its /health passes
	// (router.OutlierConfig; docs/router.md section 9): this many consecutive
	// failures (5xx the request did not also get from another replica, a
	// connection broken before any response, or a stream the replica broke
	// after it started) within EjectWindow eject it for
	// EjectBaseTime x the ejections in a row (at most EjectMaxTime), then a
	// probe decides; at most EjectMaxPercent of a model's replicas (at least
	// one of two or more) are out at once. Defaults 5, 1m, 30s, 5m, 25;
	// eject_consecutive_failures negative: no ejection.
	EjectConsecutiveFailures int           `yaml:"eject_consecutive_failures"`
	EjectWindow              time.Duration `yaml:"eject_window"`
	EjectBaseTime            time.Duration `yaml:"eject_base_time"`
	EjectMaxTime             time.Duration `yaml:"eject_max_time"`
	EjectMaxPercent          int           `yaml:"eject_max_percent"`
	// EjectSlowStart: a replica back from ejection takes new conversations at
	// a share ramping up over this window (router.DefaultSlowStartWindow, 1m;
	// negative: none).
	EjectSlowStart time.Duration `yaml:"eject_slow_start"`
	// SkipPinningCheck turns off the check, once at start, that every URL with
	// dp_ranks > 1 honours X-Data-Parallel-Rank (CheckDPPinning: two one-token
	// requests per rank; the verdict goes to the log and /status). Default false:
	// the check runs.
	SkipPinningCheck bool `yaml:"skip_pinning_check"`
	// APIKey is the servers' --api-key, sent as "Authorization: Bearer <key>" on
	// the router's own /v1 requests (the pinning probes). Clients' requests
	// are forwarded with their own headers, untouched. Default "": none.
	APIKey string        `yaml:"api_key"`
	Models []ModelConfig `yaml:"models"`
	// State, when set, is the store shared with every router that names the same
	// one: redis://[user:password@]host:port/db, or rediss:// for TLS. Session
	// homes with their idle TTL, moves, each replica's in-flight count and live
	// working set are shared; scrapes, health and admin switches stay per router
	// (docs/router.md "Several routers"). Default "": this router's memory only.
	State string `yaml:"state"`
	// StatePrefix begins every key the router writes to State; default
	// redisstate.DefaultPrefix ("warden:").
	StatePrefix string `yaml:"state_prefix"`
	// StateTimeout bounds each call to State (wall time): the most a request
	// waits for a hung store. Default redisstate.DefaultTimeout (50ms).
	StateTimeout time.Duration `yaml:"state_timeout"`
	// DrainDelay: once shutdown begins (SIGTERM, SIGINT: the context of
	// Serve ends) /ready answers 503 and the listener still serves for this
	// long, so a load balancer or Kubernetes takes the router out of its
	// endpoints before it stops accepting (listen.go). Wall time; default 0.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// DrainTimeout: then the listener closes, requests held by admission get
	// 503 with Retry-After, and requests in flight get this long to finish;
	// past it they are cut. Wall time; default DefaultDrainTimeout (10s).
	DrainTimeout time.Duration `yaml:"drain_timeout"`

	// Clock gives simulated time; nil means wall time (speed 1). Set it to the
	// simulator's scaled clock when the upstreams run faster than real time.
	Clock simclock.Clock `yaml:"-"`
	// Logger for routing events; nil means slog.Default(). Session keys are logged
	// redacted only.
	Logger *slog.Logger `yaml:"-"`

	// source and lines locate a decoded file's fields for Validate's messages
	// ("router.yaml:7: models[0].replicas[0].url: ..."); empty for a Config
	// built in code.
	source string
	lines  map[string]int
}

// ModelConfig is one served model and its replicas; one Balancer per model.
type ModelConfig struct {
	// Name as requested in the body's "model" field; WildcardModel ("*") matches
	// any model no other entry names.
	Name     string          `yaml:"name"`
	Replicas []ReplicaConfig `yaml:"replicas"`
	// Affinity: session affinity on (default) or off (vLLM-style shortest queue).
	Affinity *bool `yaml:"affinity"`
	// OverflowThreshold: "auto" (default, max_num_seqs / 4) or a positive number
	// of in-flight requests.
	OverflowThreshold Threshold `yaml:"overflow_threshold"`
	// MaxNumSeqs: the servers' --max-num-seqs; 0 (not set, kept 0 by
	// WithDefaults) means router.VLLMDefaultMaxNumSeqs, or for a llama.cpp
	// model the slots its replicas report (GET /props total_slots).
	MaxNumSeqs int `yaml:"max_num_seqs"`
	// Policy used while affinity is on: "working-set" (default), "sticky",
	// "session-hash" or "shortest-queue" (PolicyNames; docs/routing.md).
	Policy string `yaml:"policy"`
	// Keyless: placement of requests without a session key while affinity is
	// on: "prefix" (default, router.DefaultKeyless), the replica sent the
	// longest part of the request's prefix, or "shortest-queue"
	// (router.KeylessNames; docs/routing.md "Keyless placement").
	Keyless string `yaml:"keyless"`
	// Engine is the default engine of the model's replicas (ReplicaConfig.Engine);
	// default auto: each replica's engine is detected from its /metrics. A
	// model whose replicas are all llama.cpp (configured, or once detected)
	// is slot-based: its auto threshold is router.SlotOverflowThreshold(
	// max_num_seqs), max_num_seqs learned from /props slots when not set.
	Engine string `yaml:"engine"`
	// Admission: the admission gate (AdmissionYAML; off by default).
	Admission AdmissionYAML `yaml:"admission"`
}

// ReplicaConfig is one upstream URL: one replica, or DPRanks replicas (DP ranks
// behind one endpoint, pinned with X-Data-Parallel-Rank). In YAML a mapping,
// or a plain URL string for a replica with the other fields at their defaults
// (UnmarshalYAML).
type ReplicaConfig struct {
	URL     string `yaml:"url"`
	Name    string `yaml:"name"`     // default "r<i>" by position in the model's list
	DPRanks int    `yaml:"dp_ranks"` // 0: one replica, not pinned; N >= 1: ranks 0..N-1
	// Engine is the server's engine (engines.ParseKind): "vllm", "sglang",
	// "llamacpp", or "auto" (detect from /metrics: series prefixes, or
	// llama-server's 501; until then vLLM's threshold rule applies). Default
	// the model's Engine, else auto. A replica set to vllm whose /metrics has
	// no vllm: series is a scrape error naming the engine the series are of.
	Engine string `yaml:"engine"`
	// Drain starts the replica draining (router.ParseDrainMode): "move" or
	// "finish"; "" none. With `state:` it is written to the shared state at
	// start, so every router sees it (docs/router.md, "Draining a replica").
	Drain string `yaml:"drain"`

	// decodeErr holds the problems UnmarshalYAML found in this replica's
	// mapping, one yaml.v3 message a line, for parseConfig to report.
	decodeErr string
}

// UnmarshalYAML accepts a replica as a mapping (url, name, dp_ranks, engine, drain),
// decoded strictly like the rest of the file (an unknown key is an error
// naming the known ones), or as a plain URL string, "http://h0:8000", for a
// replica with every other setting at its default.
func (r *ReplicaConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		*r = ReplicaConfig{URL: n.Value}
		return nil
	case n.Kind != yaml.MappingNode:
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a replica: want a URL string (http://host:port) or a mapping with url:", n.Line, n.Value)}}
	}
	// A yaml.Unmarshaler's node.Decode does not inherit the file decoder's
	// KnownFields, so unknown keys are found here, in yaml.v3's own words
	// (yamlpos.KnownKeys adds the did-you-mean).
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "<<" && !slices.Contains(replicaKeys, k.Value) {
			errs = append(errs, fmt.Sprintf("line %d: field %s not found in type routerhttp.ReplicaConfig", k.Line, k.Value))
		}
	}
	type plain ReplicaConfig // without this method
	err := n.Decode((*plain)(r))
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te):
		errs = append(errs, te.Errors...)
	case err != nil:
		return err
	}
	// Returned, a *yaml.TypeError would drop the replica from its list (and
	// give "at least one replica is required" too); the file decoder keeps a
	// mapping with a bad field. So the replica keeps its errors for
	// parseConfig (decodeErrors), and decodes as far as it could.
	r.decodeErr = strings.Join(errs, "\n")
	return nil
}

// decodeErrors returns the problems UnmarshalYAML kept on c's replicas, as
// yaml.v3 messages ("line N: ...").
func (c Config) decodeErrors() []string {
	var out []string
	for _, m := range c.Models {
		for _, r := range m.Replicas {
			if r.decodeErr != "" {
				out = append(out, strings.Split(r.decodeErr, "\n")...)
			}
		}
	}
	return out
}

// replicaKeys are ReplicaConfig's YAML keys (its fields' yaml tags).
var replicaKeys = func() []string {
	var keys []string
	for f := range reflect.TypeFor[ReplicaConfig]().Fields() {
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}()

// Threshold is an overflow threshold: 0 means auto.
type Threshold int

// UnmarshalYAML accepts what router.ParseThreshold does: "auto", 0 (auto, as
// --overflow-threshold 0) or a positive integer.
func (t *Threshold) UnmarshalYAML(n *yaml.Node) error {
	v, err := router.ParseThreshold(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		// A *yaml.TypeError lets the decoder go on and report the file's other
		// problems with this one (any other error stops it here).
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: overflow_threshold %q: want \"auto\", 0 (auto) or a positive integer", n.Line, n.Value)}}
	}
	*t = Threshold(v)
	return nil
}

// MarshalYAML writes "auto" for 0.
func (t Threshold) MarshalYAML() (any, error) {
	if t == 0 {
		return "auto", nil
	}
	return int(t), nil
}

// ParseConfig decodes YAML strictly (unknown fields are errors) over the defaults.
// It does not validate; call Validate.
func ParseConfig(r io.Reader) (Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("reading router config: %w", err)
	}
	return parseConfig(data, "")
}

// parseConfig decodes data (the file source, "" when not from a file) as
// ParseConfig describes. Messages carry "source:line:" (or "line N:") and the
// field's path.
func parseConfig(data []byte, source string) (Config, error) {
	var cfg Config
	lines := yamlpos.KeyLines(data)
	urlStringLines(data, lines)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if kept := cfg.decodeErrors(); len(kept) > 0 {
		var te *yaml.TypeError
		switch {
		case err == nil:
			err = &yaml.TypeError{Errors: kept}
		case errors.As(err, &te):
			te.Errors = append(te.Errors, kept...)
		}
	}
	if err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			// A syntax error: "yaml: line 2: did not find expected key".
			return Config{}, &syntaxError{at: fileLine(strings.TrimPrefix(yamlpos.SyntaxLine(err.Error()), "yaml: "), source), err: err}
		}
		// yaml.v3 names Go types ("field x not found in type router.Config");
		// a user wrote YAML keys (yamlpos.Tidy), and for an unknown key wants
		// the ones there are (yamlpos.KnownKeys).
		var probs []located
		for _, e := range te.Errors {
			loc := yamlpos.Locate(yamlpos.Tidy(yamlpos.KnownKeys(e, Config{}, ModelConfig{}, ReplicaConfig{})), lines)
			msg := loc.Text
			if loc.Line > 0 {
				msg = "line " + strconv.Itoa(loc.Line) + ": " + msg
			}
			probs = append(probs, located{loc.Line, errors.New(fileLine(msg, source))})
		}
		// yaml.v3 decodes what it can around a type error, so the rest of the
		// file can be checked now rather than after the user fixes these (a
		// field that failed to decode is zero, i.e. its default). A mapping with
		// a duplicate key it leaves undecoded: check the file with the first of
		// each duplicate instead, so its fields are not reported missing.
		if doc, dropped := yamlpos.WithoutDuplicateKeys(data); dropped {
			cfg = Config{}
			_ = doc.Decode(&cfg) // its problems were reported by the strict decode
		}
		cfg.source, cfg.lines = source, lines
		probs = append(probs, cfg.problems()...)
		return Config{}, fmt.Errorf("router config: %w", joinLocated(probs))
	}
	cfg.source, cfg.lines = source, lines
	return cfg, nil
}

// urlStringLines adds to lines (yamlpos.KeyLines of data, which locates keys
// only) the line of each replica given as a plain URL string, as the path
// "models[i].replicas[j].url", so a problem with that URL names its own line.
func urlStringLines(data []byte, lines map[string]int) {
	var doc yaml.Node
	if lines == nil || yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return
	}
	child := func(n *yaml.Node, key string) *yaml.Node {
		for i := 0; n != nil && n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
		return nil
	}
	models := child(doc.Content[0], "models")
	for i := 0; models != nil && models.Kind == yaml.SequenceNode && i < len(models.Content); i++ {
		reps := child(models.Content[i], "replicas")
		for j := 0; reps != nil && reps.Kind == yaml.SequenceNode && j < len(reps.Content); j++ {
			if r := reps.Content[j]; r.Kind == yaml.ScalarNode {
				lines[fmt.Sprintf("models[%d].replicas[%d].url", i, j)] = r.Line
			}
		}
	}
}

// fileLine puts source in place of a yaml.v3 message's "line N: " ("router.yaml:N:
// ..."), or before a message without a line; msg unchanged when source is "".
func fileLine(msg, source string) string {
	if source == "" {
		return msg
	}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, _, ok := strings.Cut(rest, ":"); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return source + ":" + rest
			}
		}
	}
	return source + ": " + msg
}

// syntaxError is a config file that is not YAML, located ("router.yaml:2: did
// not find expected key"); it unwraps to yaml.v3's error.
type syntaxError struct {
	at  string
	err error
}

func (e *syntaxError) Error() string { return "router config: " + e.at }
func (e *syntaxError) Unwrap() error { return e.err }

// FileSets reports whether the decoded YAML file set the field at path (a
// Validate path such as "seed" or "models[0].policy"), even to its zero value.
// False for a Config built in code.
func (c Config) FileSets(path string) bool {
	_, ok := c.lines[path]
	return ok
}

// LoadConfig reads and decodes the YAML file at path (see ParseConfig).
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading router config: %w", err)
	}
	return parseConfig(raw, path)
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.AdminListen == "" {
		c.AdminListen = DefaultAdminListen
	}
	if c.BodyLimit == 0 {
		c.BodyLimit = DefaultBodyLimit
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = router.DefaultScrapeInterval
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = router.DefaultSessionTTL
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = router.DefaultMaxSessions
	}
	if c.SessionHeaders == nil {
		c.SessionHeaders = append([]string(nil), DefaultSessionHeaders...)
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = router.DefaultSnapshotInterval
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.Clock == nil {
		c.Clock = simclock.NewScaled(1)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	models := make([]ModelConfig, len(c.Models))
	for i, m := range c.Models {
		if m.Affinity == nil {
			on := true
			m.Affinity = &on
		}
		m.Replicas = append([]ReplicaConfig(nil), m.Replicas...)
		for j := range m.Replicas {
			if m.Replicas[j].Name == "" {
				m.Replicas[j].Name = router.ReplicaName(j)
			}
		}
		models[i] = m
	}
	c.Models = models
	return c
}

// Validate returns every problem of cfg joined (errors.Join), each prefixed with
// its field path, e.g. "models[0].replicas[1].url: ...". It checks the config as
// given; call it on WithDefaults() to accept defaulted zero values.
func (c Config) Validate() error {
	return joinLocated(c.problems())
}

// located is one config problem and the file line it is at (0: unknown).
type located struct {
	line int
	err  error
}

// joinLocated joins probs in file order, whichever check found them (a Config
// built in code has no lines: check order).
func joinLocated(probs []located) error {
	slices.SortStableFunc(probs, func(a, b located) int { return cmp.Compare(a.line, b.line) })
	errs := make([]error, len(probs))
	for i, p := range probs {
		errs[i] = p.err
	}
	return errors.Join(errs...)
}

// problems is Validate's list, unsorted.
func (c Config) problems() []located {
	var probs []located
	bad := func(path, format string, args ...any) {
		// One error per line, each located: a joined error given as an
		// argument would otherwise carry the position on its first line only.
		at, line := c.where(path), c.lineOf(path)
		for _, text := range strings.Split(fmt.Sprintf(format, args...), "\n") {
			probs = append(probs, located{line, fmt.Errorf("%s%s: %s", at, path, text)})
		}
	}
	if c.BodyLimit < 0 {
		bad("body_limit_bytes", "%d is negative", c.BodyLimit)
	}
	if c.EjectMaxPercent < 0 || c.EjectMaxPercent > 100 {
		bad("eject_max_percent", "%d is out of range 0..100", c.EjectMaxPercent)
	}
	if c.BodyMemoryBytes < 0 {
		bad("body_memory_bytes", "%d is negative", c.BodyMemoryBytes)
	}
	for name, d := range map[string]time.Duration{
		"dial_timeout": c.DialTimeout, "response_header_timeout": c.ResponseHeaderTimeout,
		"session_ttl": c.SessionTTL, "snapshot_interval": c.SnapshotInterval,
		"eject_window": c.EjectWindow, "eject_base_time": c.EjectBaseTime, "eject_max_time": c.EjectMaxTime,
		"state_timeout": c.StateTimeout, "drain_delay": c.DrainDelay, "drain_timeout": c.DrainTimeout,
	} {
		if d < 0 {
			bad(name, "%v is negative", d)
		}
	}
	if c.MaxSessions < 0 {
		bad("max_sessions", "%d is negative", c.MaxSessions)
	}
	if c.SplitSubagents && c.FollowSubagents {
		bad("follow_subagents", "and split_subagents are both set: choose one (follow_subagents splits the key too)")
	}
	if c.State != "" {
		if err := checkStateURL(c.State); err != nil {
			bad("state", "%q is not a redis:// or rediss:// URL: %v", redisstate.Redact(c.State), err)
		}
	}
	for i, h := range c.SessionHeaders {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\t\r\n") {
			bad(fmt.Sprintf("session_headers[%d]", i), "%q is not a header name", h)
		}
	}
	if len(c.Models) == 0 {
		bad("models", "at least one model is required")
	}
	seenModel := map[string]int{}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			bad(p+".name", "is required (use %q to match any model)", WildcardModel)
		} else if j, dup := seenModel[m.Name]; dup {
			bad(p+".name", "%q already used by models[%d]", m.Name, j)
		}
		seenModel[m.Name] = i
		if m.MaxNumSeqs < 0 {
			bad(p+".max_num_seqs", "%d is negative", m.MaxNumSeqs)
		}
		if m.OverflowThreshold < 0 {
			bad(p+".overflow_threshold", "%d is negative", m.OverflowThreshold)
		}
		admissionProblems(p, m.Admission, bad)
		if !router.ValidPolicy(m.Policy) {
			bad(p+".policy", "%q is unknown (have %s)", m.Policy, strings.Join(router.PolicyNames(), ", "))
		}
		if err := router.ValidKeyless(m.Keyless); err != nil {
			bad(p+".keyless", "%q is unknown (have %s)", m.Keyless, strings.Join(router.KeylessNames(), ", "))
		}
		if _, err := engines.ParseKind(m.Engine); err != nil {
			bad(p+".engine", "%v", err)
		}
		if len(m.Replicas) == 0 {
			bad(p+".replicas", "at least one replica is required")
		}
		replicaProblems(p, m.Replicas, bad)
	}
	return probs
}

// replicaProblems reports the problems of the replicas of the model at path p
// through bad (Config.problems' reporter).
func replicaProblems(p string, replicas []ReplicaConfig, bad func(path, format string, args ...any)) {
	// Replica names as the router will use them (WithDefaults' r<i>, a DP
	// URL's <name>/rank<k>) must be unique: they label metrics and the card.
	seenName := map[string]int{}
	for j, r := range replicas {
		rp := fmt.Sprintf("%s.replicas[%d]", p, j)
		if err := CheckUpstreamURL(r.URL); err != nil {
			bad(rp+".url", "%v", err)
		}
		if _, err := engines.ParseKind(r.Engine); err != nil {
			bad(rp+".engine", "%v", err)
		}
		if r.Drain != "" {
			if _, err := router.ParseDrainMode(r.Drain); err != nil {
				bad(rp+".drain", "%v", err)
			}
		}
		if r.DPRanks < 0 || r.DPRanks > MaxDPRanks {
			bad(rp+".dp_ranks", "%d is out of range 0..%d", r.DPRanks, MaxDPRanks)
		}
		ranks := r.DPRanks
		if ranks > MaxDPRanks {
			ranks = 0
		}
		for _, n := range router.UpstreamNames(r.Name, j, ranks) {
			if k, dup := seenName[n]; dup && k != j {
				hint := ""
				if _, ranked := router.RankBase(n); ranked {
					hint = " (a DP URL's ranks are named <name>/rank<k>)"
				}
				bad(rp+".name", "%q already used by replicas[%d]%s", n, k, hint)
				break
			}
			seenName[n] = j
		}
	}
}

// where returns "source:line: " (or "line N: ") for a Validate path, from the
// decoded file's key lines: the path itself, or the nearest enclosing key
// (session_headers[0] -> session_headers); "" when unknown.
func (c Config) where(path string) string {
	l := c.lineOf(path)
	switch {
	case l == 0:
		return ""
	case c.source != "":
		return fmt.Sprintf("%s:%d: ", c.source, l)
	}
	return fmt.Sprintf("line %d: ", l)
}

// lineOf is the line where's message names: the path's own key, or the
// nearest enclosing one; 0 when unknown.
func (c Config) lineOf(path string) int {
	for p := path; p != ""; {
		if l, ok := c.lines[p]; ok {
			return l
		}
		switch i := strings.LastIndexAny(p, ".["); {
		case i > 0:
			p = p[:i]
		default:
			p = ""
		}
	}
	return 0
}

// MaxDPRanks bounds dp_ranks of one upstream URL (a config file's replica or an
// admin addition): far above any data-parallel size a single vLLM server runs.
const MaxDPRanks = 1024

// CheckUpstreamURL reports what is wrong with an upstream base URL: empty, not
// http(s), no host, a query or fragment, or a path ending in /v1 (the router
// forwards each request's own path, so http://h:8000/v1 would ask for
// /v1/v1/models).
func CheckUpstreamURL(s string) error {
	if s == "" {
		return errors.New("is required")
	}
	if !strings.Contains(s, "://") {
		return fmt.Errorf("%q has no scheme: write http://%s (or https://)", s, s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: no query or fragment allowed", s)
	}
	if p := strings.TrimRight(u.Path, "/"); p == "/v1" || strings.HasSuffix(p, "/v1") {
		root := *u
		root.Path = strings.TrimSuffix(p, "/v1")
		return fmt.Errorf("%q ends in /v1: give the server's root, %s (requests keep their own /v1/... path; /v1 is how an OpenAI client's base_url is written, not a server URL)", s, root.String())
	}
	return nil
}

// ParseReplicaSpec parses a command-line replica: "URL", "name=URL", optionally
// followed by ",dp_ranks=N", e.g. "gpu0=http://10.0.0.5:8000,dp_ranks=4".
func ParseReplicaSpec(s string) (ReplicaConfig, error) {
	var rc ReplicaConfig
	main, opts, _ := strings.Cut(s, ",")
	if name, u, ok := strings.Cut(main, "="); ok && !strings.Contains(name, "/") && !strings.Contains(name, ":") {
		rc.Name, rc.URL = name, u
	} else {
		rc.URL = main
	}
	if opts != "" {
		for _, kv := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch strings.TrimSpace(k) {
			case "dp_ranks":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return rc, fmt.Errorf("parsing replica %q: dp_ranks %q is not a non-negative integer", s, v)
				}
				rc.DPRanks = n
			default:
				return rc, fmt.Errorf("parsing replica %q: unknown option %q", s, k)
			}
		}
	}
	if err := CheckUpstreamURL(rc.URL); err != nil {
		if name, u, ok := strings.Cut(main, "="); ok && rc.Name == "" && CheckUpstreamURL(u) == nil {
			return rc, fmt.Errorf("parsing replica %q: name %q may not contain '/' or ':' (a DP URL's ranks are named <name>/rank<k>)", s, name)
		}
		return rc, fmt.Errorf("parsing replica %q: url %w", s, err)
	}
	return rc, nil
}

// ConfigForURLs returns a defaulted Config with one model matching any model name
// ("*") served by the given replicas (each parsed by ParseReplicaSpec), affinity on
// or off. It is what `warden route --replica URL...` and the benchmark use; set
// Clock, MaxNumSeqs etc. on the result before New.
func ConfigForURLs(specs []string, affinity bool) (Config, error) {
	m := ModelConfig{Name: WildcardModel, Affinity: &affinity}
	for _, s := range specs {
		rc, err := ParseReplicaSpec(s)
		if err != nil {
			return Config{}, err
		}
		m.Replicas = append(m.Replicas, rc)
	}
	cfg := Config{Models: []ModelConfig{m}}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("router config for %d replicas: %w", len(specs), err)
	}
	return cfg, nil
}
