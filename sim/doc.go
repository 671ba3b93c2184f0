// Package sim simulates one vLLM engine (one data-parallel rank) closely enough that
// a router's effect on prefix caching, queueing and time to first token shows up as it
// would on real GPUs, without a GPU and without any model weights.
//
// It owns:
//   - a deterministic tokenizer and a ChatML (Qwen-style) chat template working at
//     token level (tokenize.go), so that a conversation's turn n+1 prompt starts with
//     turn n's prompt plus its reply, exactly as with a real template;
//   - the KV block pool with vLLM's prefix cache (blocks.go): block 0 reserved as the
//     null block, full blocks of 16 tokens hashed by chaining the parent hash with the
//     block's token ids, a hash -> block map, reference counts and an LRU free queue
//     with O(1) removal from the middle (vllm/v1/core/block_pool.py,
//     kv_cache_utils.py FreeKVCacheBlockQueue);
//   - the scheduler (scheduler.go), vLLM V1's Scheduler.schedule() for FCFS with
//     chunked prefill: one token budget per step shared by decodes and prefill chunks,
//     running requests first, preemption by recompute of the newest running request
//     when blocks run out, FCFS admission up to max_num_seqs;
//   - the engine state machine (engine.go): Submit, Step, Abort, Stats,
//     ResetPrefixCache; it has no goroutines and no clock, the caller passes
//     simulated instants, so the same engine runs under a scaled wall clock (HTTP
//     mode, package sim/simhttp) or a discrete-event loop (virtual mode);
//   - the step-time model (steptime.go) and the GPU + model profiles it reads
//     (profile.go).
//
// It does not own HTTP (sim/simhttp), data-parallel balancing across engines, or any
// routing.
//
// # Model and assumptions
//
// Tokens: text splits on white space into words, words into pieces of at most
// PieceLen bytes; each piece is one token whose id is a hash of the piece. Real
// tokenizers give different counts; only ids and counts matter to the engine. Output
// tokens are drawn from a fixed list of short words by a hash of (prompt hash, output
// index), so a reply is a deterministic function of the prompt.
//
// Generation: a request generates exactly MaxTokens tokens (no EOS), like a benchmark
// run with ignore_eos. The step in which a request's prefill completes samples its
// first token; each later step samples one more.
//
// Prefix cache: lookup at admission finds the longest run of cached full blocks from
// the start, capped at len(prompt)-1 tokens, so hits are block-aligned and at least
// one token is computed. Full blocks of prompt and generated tokens are cached when
// they are scheduled (vLLM caches at allocate_slots time, so a request admitted later
// in the same step can already hit them). Freed blocks keep their hashes and stay
// reusable until popped for a new allocation; a freed request's blocks go to the
// queue tail in reverse order, so its deepest block is evicted first. Stats are
// recorded once per request at its first admission (vLLM records at admission and
// keeps preempted re-admissions out of the exported counters); the option
// CountPrefixStatsPerAttempt reproduces older releases that counted every attempt.
// When two running requests compute the same block at once, only the first copy is
// registered under the hash (vLLM keeps both; a lookup returns one). A waiting
// request is looked up again at every step, as in vLLM; the engine memoises its last
// hit run and re-checks it against the blocks' hashes (blockPool.lookupAgain), which
// gives the same answer as a fresh lookup at a fraction of the cost.
//
// Sliding-window layers (Profile.SlidingWindow, SlidingLayers; Gemma 3): KV capacity
// follows vLLM's hybrid KV cache manager (Profile.KVGroups): the global layers form
// one full-attention group whose blocks are managed and prefix-cached as above, and
// the local layers form sliding-window groups in which a request holds only the
// blocks covering its window (Profile.SlidingBlocks); those blocks come from the same
// pool, are freed as the window moves (SlidingWindowManager.remove_skipped_blocks)
// and count in KV usage. Simplification: sliding-window blocks carry no prefix-cache
// hash, and a hit on the global layers is taken as a hit on the local ones. vLLM
// caches them per group and requires the window before the hit point to be cached
// too (kv_cache_coordinator.py HybridKVCacheCoordinator.find_longest_cache_hit), so
// when a conversation's window blocks were evicted but its global blocks survive,
// vLLM recomputes the prompt and the simulator does not: its prefix hits are an upper
// bound under memory pressure. Free-queue occupancy and eviction of the global
// blocks are the same in both.
//
// Step time: physics, not fitting. A step takes StepOverhead + max(compute, memory),
// compute = dense FLOPs (2 x params per token) + attention FLOPs
// (4 x layers x q_heads x head_dim per token per attended position) over
// PeakFLOPS x MFU, memory = weight bytes + KV bytes of every scheduled request's
// context over MemBandwidth x BandwidthEff. KV capacity comes from vLLM's memory
// profiling arithmetic (Profile.NumGPUBlocks). MFU, bandwidth efficiency, step
// overhead and the activation reserve are stated assumptions in profile.go; none is
// fitted to a benchmark result. A sliding-window layer attends and reads at most
// SlidingWindow positions. Not modelled: CPU-side tokenisation, detokenisation and
// HTTP latency, CUDA graph batch-size padding, speculative decoding, LoRA, and the
// asynchronous scheduling overlap of recent vLLM releases. docs/simulator.md has the
// whole model, its sources and its sensitivity to the uncertain parameters.
//
// # Cost
//
// Step allocates nothing in steady state (the event slice and batch are reused; the
// Events slice is valid until the next Step). Submit copies the prompt (unless
// Request.Keep) and hashes its full blocks (those not in Request.Hashes), O(prompt
// tokens). See the benchmarks in engine_bench_test.go.
package sim
