package simhttp

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/sim"
)

// Defaults for Config. DefaultProfile is the reference GPU + model pair; DefaultReplyTokens
// is how long the simulated model's reply is when the client's limit is larger (equal
// to the harness's default max_output_tokens, loadgen.Scenario, so harness turns end
// on "length" exactly as asked); DefaultHost keeps the simulator on loopback.
const (
	DefaultReplicas    = 4
	DefaultProfile     = "a4000-qwen3-4b"
	DefaultSpeed       = 1.0
	DefaultHost        = "127.0.0.1"
	DefaultReplyTokens = 256
	// DefaultSnapshotInterval is how often the DP balancer's view of engine load is
	// refreshed, in simulated time: vLLM's DP coordinator publishes changed engine
	// stats at most every 100 ms (vllm/v1/engine/coordinator.py,
	// min_stats_update_interval_ms = 100; unchanged stats go out every 4 s).
	DefaultSnapshotInterval = 100 * time.Millisecond
	// MaxRequestBytes bounds a request body (Claude Code turns are tens of KiB to a
	// few MiB; anything larger is refused with 413).
	MaxRequestBytes = 64 << 20
)

// Config configures a simulated vLLM cluster: Replicas independent `vllm serve`
// processes, each on its own port, each with DataParallelSize engines (DP ranks).
// A zero field takes the default given in its comment; DefaultConfig returns a Config
// with every default filled in, including DevMode on.
type Config struct {
	// Replicas is the number of servers (ports). Default 4.
	Replicas int
	// DataParallelSize: 0 or 1 = one engine per server; N = one server with N engines
	// behind vLLM's internal DP balancer (the header X-data-parallel-rank pins a rank).
	DataParallelSize int
	// IgnoreRankHeader makes the servers ignore X-data-parallel-rank and let the
	// internal balancer place every request, as a vLLM that does not read the header
	// does (an endpoint that does not pass it on answers 200 all the same; see
	// vllm-project/vllm PR #42330 for one such endpoint). For testing the router's
	// pinning check (router.CheckDPPinning). Default false: the header pins.
	IgnoreRankHeader bool
	// APIKey, when set, is required as "Authorization: Bearer <key>" on every
	// path under /v1 (401 {"error": "Unauthorized"} otherwise), as vLLM's
	// --api-key does (AuthenticationMiddleware in
	// vllm/entrypoints/openai/server_utils.py: /health, /metrics and /version
	// stay open). Default "": no authentication.
	APIKey string
	// Profile names a built-in sim.Profile. Default "a4000-qwen3-4b".
	Profile string
	// Model is the served model name (--served-model-name). Default: the profile's
	// DefaultModelName.
	Model string
	// Per-engine scheduler and cache limits; 0 = sim's defaults (NumGPUBlocks 0 = from
	// the profile's memory arithmetic).
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int
	NumGPUBlocks        int
	BlockSize           int
	// ReplyTokens is how many tokens the simulated model writes before it stops on its
	// own (finish_reason "stop", Anthropic "end_turn"). A request whose max_tokens is at
	// or below it gets exactly max_tokens (finish_reason "length", "max_tokens").
	// Default 256.
	ReplyTokens int
	// Speed is simulated seconds per wall second. Default 1. Ignored when Clock is set.
	Speed float64
	// Host to listen on. Default 127.0.0.1.
	Host string
	// BasePort: server i listens on BasePort+i; 0 = a random free port per server.
	BasePort int
	// Seed is the run's seed: engine k (server index x DP size + rank, the
	// router's replica order) seeds its step-time stream with
	// sim.EngineSeed(Seed, k), as the virtual world does. Default 0.
	Seed uint64
	// DevMode enables the development endpoints (POST /reset_prefix_cache), as vLLM's
	// VLLM_SERVER_DEV_MODE=1 does. The zero Config has it off; DefaultConfig turns it on.
	DevMode bool
	// SnapshotInterval is the DP balancer's stats refresh period in simulated time.
	// Default 100ms (DefaultSnapshotInterval).
	SnapshotInterval time.Duration
	// Clock, when set, is the shared simulated clock (so a harness in the same process
	// reads the same simulated time). Default: simclock.NewScaled(Speed) at Start.
	Clock *simclock.Scaled
	// APIServers is the number of API-server processes (vLLM's
	// --api-server-count) doing the profile's front-end work (sim.FrontendCosts)
	// before a request reaches its engine and after every step, one piece at a
	// time per process (sim.Frontend). A Cluster shares one set of processes among
	// all its servers, as one `vllm serve --data-parallel-size N` shares them among
	// its ranks. Default 0: no front-end time.
	APIServers int

	// ResponsesStore keeps stored Responses API answers in each server's memory so a
	// later request can name one in previous_response_id, as vLLM does with
	// VLLM_ENABLE_RESPONSES_API_STORE=1 (serving_responses.py enable_store). Off (the
	// default, as in vLLM): store is ignored and every previous_response_id is 404.
	// The store is per server and never evicted, as vLLM's.
	ResponsesStore bool

	frontend *frontend // shared by a Cluster's servers; nil: NewServer makes its own
}

// DefaultConfig returns the simulator's default configuration (DevMode on).
func DefaultConfig() Config {
	c := Config{DevMode: true}
	c.fill()
	return c
}

// fill sets defaults in place. Fields that depend on the profile (Model) are filled
// only when the profile exists.
func (c *Config) fill() {
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.DataParallelSize == 0 {
		c.DataParallelSize = 1
	}
	if c.Profile == "" {
		c.Profile = DefaultProfile
	}
	if c.Model == "" {
		if p, err := sim.LookupProfile(c.Profile); err == nil {
			c.Model = p.DefaultModelName
		}
	}
	if c.ReplyTokens == 0 {
		c.ReplyTokens = DefaultReplyTokens
	}
	if c.Speed == 0 {
		c.Speed = DefaultSpeed
	}
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
}

// Validate returns every problem in c joined with errors.Join, or nil. Zero fields are
// valid (they mean "default").
func (c Config) Validate() error {
	var errs []error
	neg := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative: got %d", name, v))
		}
	}
	neg("replicas", c.Replicas)
	neg("data_parallel_size", c.DataParallelSize)
	neg("max_num_seqs", c.MaxNumSeqs)
	neg("max_num_batched_tokens", c.MaxNumBatchedTokens)
	neg("max_model_len", c.MaxModelLen)
	neg("num_gpu_blocks", c.NumGPUBlocks)
	neg("block_size", c.BlockSize)
	neg("reply_tokens", c.ReplyTokens)
	neg("api_servers", c.APIServers)
	if c.SnapshotInterval < 0 {
		errs = append(errs, fmt.Errorf("snapshot_interval must not be negative: got %s", c.SnapshotInterval))
	}
	if math.IsNaN(c.Speed) || math.IsInf(c.Speed, 0) || c.Speed < 0 {
		errs = append(errs, fmt.Errorf("speed must be a positive number of simulated seconds per wall second: got %v", c.Speed))
	}
	if c.BasePort < 0 || c.BasePort > 65535 {
		errs = append(errs, fmt.Errorf("base_port must be 0..65535: got %d", c.BasePort))
	} else if c.BasePort > 0 {
		n := c.Replicas
		if n == 0 {
			n = DefaultReplicas
		}
		if c.BasePort+n-1 > 65535 {
			errs = append(errs, fmt.Errorf("base_port %d + %d replicas runs past port 65535", c.BasePort, n))
		}
	}
	profile := c.Profile
	if profile == "" {
		profile = DefaultProfile
	}
	if _, err := sim.LookupProfile(profile); err != nil {
		errs = append(errs, fmt.Errorf("profile: %w", err))
	}
	if c.Clock != nil && (math.IsNaN(c.Clock.Speed) || c.Clock.Speed < 0) {
		errs = append(errs, fmt.Errorf("clock speed must be positive: got %v", c.Clock.Speed))
	}
	return errors.Join(errs...)
}

// engineConfig builds the sim.EngineConfig every engine of a server uses.
func (c Config) engineConfig() (sim.EngineConfig, error) {
	p, err := sim.LookupProfile(c.Profile)
	if err != nil {
		return sim.EngineConfig{}, fmt.Errorf("looking up profile %q: %w", c.Profile, err)
	}
	return sim.EngineConfig{
		Profile:             p,
		MaxNumSeqs:          c.MaxNumSeqs,
		MaxNumBatchedTokens: c.MaxNumBatchedTokens,
		BlockSize:           c.BlockSize,
		MaxModelLen:         c.MaxModelLen,
		NumGPUBlocks:        c.NumGPUBlocks,
		EmitTokens:          true,
	}, nil
}
