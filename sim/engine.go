package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Engine defaults. ReferenceMaxNumSeqs is the reference server's setting, which the
// simulator models (vLLM's own default, 256, is router.VLLMDefaultMaxNumSeqs: what
// the router assumes of a real server it is not told about); DefaultMaxNumBatchedTokens is vLLM's default for GPUs under 70 GiB
// (vllm/engine/arg_utils.py); DefaultBlockSize is vLLM's CUDA default.
const (
	ReferenceMaxNumSeqs        = 32
	DefaultMaxNumBatchedTokens = 2048
	DefaultBlockSize           = 16
	DefaultMaxModelLen         = 32768
)

// ErrPromptTooLong is returned by Submit when prompt + max_tokens exceeds max_model_len
// (vLLM answers 400 for this).
var ErrPromptTooLong = errors.New("prompt plus max_tokens exceeds max_model_len")

// ErrInvalidRequest is returned by Submit for an empty prompt, max_tokens < 1 or an id
// that is already live (vLLM answers 400 for the first two).
var ErrInvalidRequest = errors.New("invalid request")

// EngineConfig configures one engine (one vLLM engine core, one DP rank).
// Zero fields take the defaults above; NumGPUBlocks 0 means "from the profile"
// (Profile.NumGPUBlocks(BlockSize)); MaxModelLen 0 means DefaultMaxModelLen or the KV
// capacity (NumGPUBlocks-1)*BlockSize if smaller.
type EngineConfig struct {
	Profile             Profile
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	BlockSize           int
	MaxModelLen         int
	NumGPUBlocks        int
	// EmitTokens: when false, Step reports only EventFirstToken and EventFinished
	// (virtual mode does not need every token); when true, every token.
	EmitTokens bool
	// CountPrefixStatsPerAttempt mimics an old vLLM V1 accounting bug: the prefix
	// cache lookup of a waiting request was added to the query/hit counters on every
	// scheduling attempt (including attempts that then failed to get blocks, and
	// re-admissions after preemption), not once at admission. Under load, when
	// requests wait several steps, this inflates PrefixQueries and PrefixHits.
	// Current vLLM records at admission ("Record at admission so unscheduled lookups
	// are not counted", v1/core/sched/scheduler.py) and keeps preempted re-admissions
	// out of the exported counters. Default false (current behaviour).
	CountPrefixStatsPerAttempt bool
	// Seed seeds the engine's step-time stream (Profile.StepTimeSigma): one
	// seed per engine, normally EngineSeed(run seed, replica index), so a run
	// is deterministic for its seed. Unused when StepTimeSigma is 0.
	Seed uint64
}

// EngineSeed is the step-time seed of replica (0-based, in the order the
// router lists replicas) in a run seeded with runSeed: a SplitMix64 mix of
// the two, so neighbouring replicas and seeds get unrelated streams.
func EngineSeed(runSeed uint64, replica int) uint64 {
	z := runSeed ^ (uint64(replica)+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Request is one generation request submitted to an engine.
type Request struct {
	ID        string   // unique per engine while live
	Prompt    []uint32 // token ids of the rendered prompt (copied by Submit)
	MaxTokens int      // output tokens to generate (the engine generates exactly this many)
}

// EventKind says what happened to a request at a step's end.
type EventKind uint8

const (
	EventToken      EventKind = iota // one output token (only with EmitTokens)
	EventFirstToken                  // the first output token (prefill completed); also a token
	EventFinished                    // the request completed: last token emitted, blocks freed
	EventPreempted                   // preempted by recompute, back at the head of the waiting queue
)

// String names the kind for logs and test output.
func (k EventKind) String() string {
	switch k {
	case EventToken:
		return "token"
	case EventFirstToken:
		return "first_token"
	case EventFinished:
		return "finished"
	case EventPreempted:
		return "preempted"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one thing that happened to one request at the instant a step ended.
type Event struct {
	ReqID string
	Kind  EventKind
	Token uint32 // the output token for EventToken/EventFirstToken
	// For EventFirstToken and EventFinished: the prompt size and the prefix-cache
	// hit counted at the request's first admission (block-aligned).
	PromptTokens int
	CachedTokens int
	OutputTokens int // tokens emitted so far (== MaxTokens at EventFinished)
}

// StepResult is what Step reports. Events happened at the instant Step was called
// (they complete the batch that was running until then). If Busy, a new batch was
// scheduled and the caller must call Step again at NextAt; if not, the engine is idle
// until the next Submit.
type StepResult struct {
	Events []Event // valid until the next call to Step: the engine reuses the slice
	Busy   bool
	NextAt time.Duration
}

// Stats is the engine's state and cumulative counters, as vLLM's /metrics shows them.
type Stats struct {
	Running, Waiting int
	KVUsage          float64 // 1 - free/(num_gpu_blocks-1), idle cached blocks count as free
	PrefixQueries    int64   // prompt tokens looked up, once per request at first admission (see CountPrefixStatsPerAttempt)
	PrefixHits       int64   // of which found in the prefix cache (block-aligned)
	// PromptTokens, PromptComputed and PromptCached are counted when a request emits
	// its first token, as vLLM's IterationStats does (an aborted request that never
	// produced a token is not counted). PromptTokens = PromptComputed + PromptCached.
	PromptTokens      int64 // prompt tokens of requests that reached their first token (incl. cached)
	PromptComputed    int64 // prompt tokens computed (prompt_tokens_by_source local_compute)
	PromptCached      int64 // prompt tokens read from cache (local_cache_hit)
	GenerationTokens  int64
	Preemptions       int64
	RequestsFinished  int64 // finished_reason="length"
	RequestsAborted   int64 // finished_reason="abort"
	NumGPUBlocks      int
	BlockSize         int
	MaxNumSeqs        int
	MaxModelLen       int
	LiveContextTokens int64 // tokens held by running + waiting requests (their full current length)
}

// reqState is where a request is.
type reqState uint8

const (
	stateWaiting reqState = iota
	stateRunning
	stateDone // finished or aborted
)

// request is the engine's view of one live request (vllm/v1/request.py Request).
type request struct {
	id        string
	tokens    []uint32 // prompt, then output tokens as they are sampled
	promptLen int
	maxTokens int
	numOutput int
	// computed is num_computed_tokens: tokens whose KV is computed or scheduled.
	computed int
	blocks   []int32  // KV blocks held, in token order
	hashes   []uint64 // chained hashes of every full block of tokens
	// numCachedBlocks is how many of blocks have been offered to the prefix cache
	// (vLLM's num_cached_block per request in the KV cache coordinator).
	numCachedBlocks int
	cachedTokens    int // prefix hit at first admission; -1 before (num_cached_tokens)
	// hitIDs is the result of the request's last prefix lookup and hitSeen the
	// pool's eviction count then (blockPool.lookupAgain).
	hitIDs  []int32
	hitSeen uint64
	// slide holds the sliding-window groups' blocks: for each block index in
	// [slideLo, slideHi), one block per group (Engine.slideGroups).
	slide            []int32
	slideLo, slideHi int
	seed             uint64
	state            reqState
	admitted         bool // first admission happened (stats recorded)
	numPreemptions   int
	scheduled        int // tokens scheduled in the running batch (0 if none)
	inBatch          bool
}

// Engine is one simulated vLLM engine as a pure state machine: no goroutines, no
// clock. Not safe for concurrent use; the caller serialises Submit/Step/Abort.
//
// Driving it: Submit requests; when the engine is not Busy, call Step(now) to start
// a batch; while Busy, call Step(NextAt) to complete the batch and start the next.
// A Step called before NextAt changes nothing and reports no events.
type Engine struct {
	cfg  EngineConfig
	pool *blockPool

	reqs    map[string]*request
	running []*request
	waiting deque

	busy   bool
	nextAt time.Duration
	batch  []*request // requests scheduled in the running batch

	events []Event
	// slideGroups is the number of sliding-window KV groups (Profile.KVGroups), 0
	// for a full-attention model; window is the sliding window in tokens.
	slideGroups, window int
	stats               Stats
	liveCtx             int64
	// jitter draws the steps' lognormal factors (nil when StepTimeSigma is 0).
	jitter *rand.Rand
}

// NewEngine builds an engine. It fails when the profile leaves no KV cache (fewer than
// 2 blocks, since block 0 is reserved), when an explicit MaxModelLen exceeds the KV
// capacity (vLLM refuses to start then, and a request longer than the cache could
// only preempt itself forever), or when a setting is negative.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = ReferenceMaxNumSeqs
	}
	if cfg.MaxNumBatchedTokens == 0 {
		cfg.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.MaxNumSeqs < 0 || cfg.MaxNumBatchedTokens < 0 || cfg.BlockSize < 0 || cfg.MaxModelLen < 0 || cfg.NumGPUBlocks < 0 {
		return nil, fmt.Errorf("building engine: negative setting in %+v", cfg)
	}
	if cfg.NumGPUBlocks == 0 {
		if cfg.Profile.Name == "" {
			return nil, errors.New("building engine: no profile and no num_gpu_blocks")
		}
		cfg.NumGPUBlocks = cfg.Profile.NumGPUBlocks(cfg.BlockSize)
	}
	if p := cfg.Profile.StepTimeSigma; p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
		return nil, fmt.Errorf("building engine: profile %q: step_time_sigma %v must be a finite number >= 0", cfg.Profile.Name, p)
	}
	if cfg.NumGPUBlocks < 2 {
		return nil, fmt.Errorf("building engine: profile %q leaves no KV cache (%d blocks)", cfg.Profile.Name, cfg.NumGPUBlocks)
	}
	// vLLM refuses to start when one max_model_len sequence does not fit in the KV
	// cache (kv_cache_utils.py check_enough_kv_cache_memory). An explicit setting gets
	// the same error; the default is lowered to what fits, as vLLM's automatic
	// max_model_len does, so every profile starts with defaults.
	_, fullGroups, slideGroups := cfg.Profile.KVGroups()
	if slideGroups > 0 && fullGroups != 1 {
		return nil, fmt.Errorf("building engine: profile %q: %d full-attention KV groups beside sliding-window ones are not modelled (one is)", cfg.Profile.Name, fullGroups)
	}
	// With sliding-window groups, one sequence also needs their blocks:
	// cdiv(window-1+max_num_batched_tokens, block_size)+1 per group
	// (kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes).
	reserve := 0
	if slideGroups > 0 {
		reserve = slideGroups * ((cfg.Profile.SlidingWindow-1+cfg.MaxNumBatchedTokens+cfg.BlockSize-1)/cfg.BlockSize + 1)
	}
	capacity := (cfg.NumGPUBlocks - 1 - reserve) * cfg.BlockSize
	if capacity < cfg.BlockSize {
		return nil, fmt.Errorf("building engine: profile %q leaves no KV cache beyond the sliding-window reserve (%d blocks, %d reserved)", cfg.Profile.Name, cfg.NumGPUBlocks, reserve)
	}
	if cfg.MaxModelLen == 0 {
		def := DefaultMaxModelLen
		if cfg.Profile.MaxModelLen > 0 {
			def = cfg.Profile.MaxModelLen
		}
		cfg.MaxModelLen = min(def, capacity)
	} else if cfg.MaxModelLen > capacity {
		return nil, fmt.Errorf("building engine: max_model_len %d exceeds the KV cache's %d tokens", cfg.MaxModelLen, capacity)
	}
	e := &Engine{
		cfg:  cfg,
		pool: newBlockPool(cfg.NumGPUBlocks),
		reqs: make(map[string]*request),
	}
	if slideGroups > 0 {
		e.slideGroups, e.window = slideGroups, cfg.Profile.SlidingWindow
	}
	if cfg.Profile.StepTimeSigma > 0 {
		e.jitter = rand.New(rand.NewPCG(cfg.Seed, 0x5e9a7d1c3b2f4e61))
	}
	e.running = make([]*request, 0, cfg.MaxNumSeqs)
	e.batch = make([]*request, 0, cfg.MaxNumSeqs)
	e.stats.NumGPUBlocks = cfg.NumGPUBlocks
	e.stats.BlockSize = cfg.BlockSize
	e.stats.MaxNumSeqs = cfg.MaxNumSeqs
	e.stats.MaxModelLen = cfg.MaxModelLen
	return e, nil
}

// Config returns the effective configuration (defaults filled in).
func (e *Engine) Config() EngineConfig { return e.cfg }

// Submit queues a request at simulated instant now (FCFS). It returns
// ErrPromptTooLong without queueing when len(Prompt)+MaxTokens > MaxModelLen, and
// ErrInvalidRequest for an empty prompt, MaxTokens < 1 or a live duplicate id.
// The prompt is copied. If the engine is not Busy, the caller must call Step(now)
// to start work.
func (e *Engine) Submit(r *Request, now time.Duration) error {
	_ = now // admission order is submission order; the instant is not needed
	if len(r.Prompt) == 0 {
		return fmt.Errorf("submitting %q: empty prompt: %w", r.ID, ErrInvalidRequest)
	}
	if r.MaxTokens < 1 {
		return fmt.Errorf("submitting %q: max_tokens %d < 1: %w", r.ID, r.MaxTokens, ErrInvalidRequest)
	}
	if len(r.Prompt)+r.MaxTokens > e.cfg.MaxModelLen {
		return fmt.Errorf("submitting %q: %d prompt + %d max_tokens > %d: %w",
			r.ID, len(r.Prompt), r.MaxTokens, e.cfg.MaxModelLen, ErrPromptTooLong)
	}
	if _, dup := e.reqs[r.ID]; dup {
		return fmt.Errorf("submitting %q: id already live: %w", r.ID, ErrInvalidRequest)
	}
	total := len(r.Prompt) + r.MaxTokens
	q := &request{
		id:           r.ID,
		tokens:       make([]uint32, len(r.Prompt), total),
		promptLen:    len(r.Prompt),
		maxTokens:    r.MaxTokens,
		blocks:       make([]int32, 0, (total+e.cfg.BlockSize-1)/e.cfg.BlockSize),
		hashes:       make([]uint64, 0, total/e.cfg.BlockSize),
		cachedTokens: -1,
	}
	copy(q.tokens, r.Prompt)
	q.hashes = appendBlockHashes(q.hashes, q.tokens, e.cfg.BlockSize)
	q.seed = promptSeed(q.tokens, q.hashes, e.cfg.BlockSize)
	e.reqs[r.ID] = q
	e.waiting.pushBack(q)
	e.liveCtx += int64(len(q.tokens))
	return nil
}

// promptSeed hashes the whole prompt (the last full block's chained hash plus the
// tail), the seed of the request's generated tokens.
func promptSeed(toks []uint32, hashes []uint64, bs int) uint64 {
	h := hashSeed
	if len(hashes) > 0 {
		h = hashes[len(hashes)-1]
	}
	return blockHash(h, toks[len(hashes)*bs:])
}

// Abort removes a live request (client gone) and frees its blocks; unknown ids are
// ignored. Counted in RequestsAborted. A request in the running batch simply
// produces no event when the batch completes.
func (e *Engine) Abort(id string) {
	q, ok := e.reqs[id]
	if !ok {
		return
	}
	switch q.state {
	case stateWaiting:
		e.waiting.remove(q)
	case stateRunning:
		for i, r := range e.running {
			if r == q {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
	}
	e.release(q)
	e.stats.RequestsAborted++
}

// release frees a request's blocks (reverse order) and forgets it.
func (e *Engine) release(q *request) {
	e.freeBlocks(q)
	q.hitIDs = nil
	q.state = stateDone
	e.liveCtx -= int64(len(q.tokens))
	delete(e.reqs, q.id)
}

// freeBlocks frees every block a request holds: its sliding-window groups' blocks
// first, then its full-attention blocks, each list in reverse, as vLLM's coordinator
// frees group by group (sliding-window groups come first for Gemma 3, whose layer 0
// is a local layer) and each manager frees reversed(req_blocks).
func (e *Engine) freeBlocks(q *request) {
	e.pool.freeReversed(q.slide)
	q.slide = q.slide[:0]
	q.slideLo, q.slideHi = 0, 0
	e.pool.freeReversed(q.blocks)
	q.blocks = q.blocks[:0]
}

// Busy reports whether a batch is scheduled (the caller owes a Step at its NextAt).
func (e *Engine) Busy() bool { return e.busy }

// NextAt is the instant the scheduled batch completes (meaningful while Busy).
func (e *Engine) NextAt() time.Duration { return e.nextAt }

// Stats returns current state and counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Running = len(e.running)
	s.Waiting = e.waiting.len()
	s.KVUsage = e.pool.usage()
	s.LiveContextTokens = e.liveCtx
	return s
}

// ResetPrefixCache drops every cached block that no live request holds (vLLM's
// /reset_prefix_cache). It returns false if blocks are in use, like vLLM, which then
// refuses (vllm/v1/core/block_pool.py reset_prefix_cache) and drops nothing.
func (e *Engine) ResetPrefixCache() bool { return e.pool.reset() }

// Step completes the batch that ran until now (if any), then schedules the next one.
// Events are those of the completed batch plus EventPreempted for requests preempted
// while scheduling the next. The returned Events slice is reused by the next Step.
// A Step before NextAt of a running batch is a no-op (Busy, same NextAt, no events).
func (e *Engine) Step(now time.Duration) StepResult {
	e.events = e.events[:0]
	if e.busy {
		if now < e.nextAt {
			return StepResult{Busy: true, NextAt: e.nextAt}
		}
		e.complete()
	}
	cost := e.schedule()
	if len(e.batch) == 0 {
		e.busy = false
		return StepResult{Events: e.events}
	}
	e.busy = true
	e.nextAt = now + e.stepDuration(cost)
	if e.nextAt <= now { // a profile without timing still advances
		e.nextAt = now + 1
	}
	return StepResult{Events: e.events, Busy: true, NextAt: e.nextAt}
}

// stepDuration is the modelled step time (Profile.stepTime) times the step's
// lognormal factor exp(StepTimeSigma x Z), Z standard normal from the engine's
// seeded stream; exactly the modelled time when StepTimeSigma is 0.
func (e *Engine) stepDuration(c stepCost) time.Duration {
	d := e.cfg.Profile.stepTime(c)
	if e.jitter == nil {
		return d
	}
	return time.Duration(float64(d) * math.Exp(e.cfg.Profile.StepTimeSigma*e.jitter.NormFloat64()))
}

// complete ends the running batch: every request whose scheduled tokens reached the
// end of its known tokens samples one token (vLLM Scheduler.update_from_output);
// requests with MaxTokens outputs finish and free their blocks.
func (e *Engine) complete() {
	finished := false
	for _, q := range e.batch {
		q.inBatch = false
		n := q.scheduled
		q.scheduled = 0
		if q.state != stateRunning || n == 0 {
			continue // aborted while the batch ran
		}
		if q.computed < len(q.tokens) {
			continue // a prefill chunk that did not reach the end of the prompt
		}
		tok := genToken(q.seed, q.numOutput)
		q.tokens = append(q.tokens, tok)
		q.numOutput++
		e.liveCtx++
		e.stats.GenerationTokens++
		if len(q.tokens)%e.cfg.BlockSize == 0 {
			q.hashes = appendBlockHashes(q.hashes, q.tokens, e.cfg.BlockSize)
		}
		ev := Event{ReqID: q.id, Kind: EventToken, Token: tok, PromptTokens: q.promptLen,
			CachedTokens: q.cachedTokens, OutputTokens: q.numOutput}
		if q.numOutput == 1 {
			ev.Kind = EventFirstToken
			e.stats.PromptTokens += int64(q.promptLen)
			e.stats.PromptCached += int64(q.cachedTokens)
			e.stats.PromptComputed += int64(q.promptLen - q.cachedTokens)
			e.events = append(e.events, ev)
		} else if e.cfg.EmitTokens {
			e.events = append(e.events, ev)
		}
		if q.numOutput >= q.maxTokens {
			ev.Kind = EventFinished
			ev.Token = 0
			e.events = append(e.events, ev)
			e.release(q)
			e.stats.RequestsFinished++
			finished = true
		}
	}
	e.batch = e.batch[:0]
	if finished {
		live := e.running[:0]
		for _, q := range e.running {
			if q.state == stateRunning {
				live = append(live, q)
			}
		}
		clear(e.running[len(live):])
		e.running = live
	}
}
