package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Profile describes a GPU + model pair: what the step-time model and the KV capacity
// are derived from (see steptime.go for the formulas).
type Profile struct {
	Name string
	// Model and GPU figures from public sources (see the profile's doc comment).
	ModelName       string
	Params          float64 // parameters multiplied per token (2 FLOPs each per token)
	Layers          int
	QHeads, KVHeads int
	HeadDim         int
	BytesPerParam   float64 // 2 for bf16; Params x BytesPerParam = weight bytes read per step
	GPUMemoryBytes  float64
	PeakFLOPS       float64 // dense bf16 tensor FLOP/s
	MemBandwidth    float64 // bytes/s
	MFU             float64 // fraction of PeakFLOPS reached by prefill
	BandwidthEff    float64 // fraction of MemBandwidth reached by decode
	StepOverhead    time.Duration
	GPUMemoryUtil   float64 // vLLM gpu_memory_utilization
	ActivationBytes float64 // lumped reserve for activations, CUDA graphs, etc. (profiles without the terms below)
	// vLLM's start-up memory terms (determine_available_memory; see
	// AvailableKVBytes), in bytes. LoadedWeightBytes 0 means WeightBytes().
	LoadedWeightBytes   float64 // weights as loaded (model_memory_usage)
	PeakActivationBytes float64 // profile run's torch peak increase at max_num_batched_tokens
	CUDAGraphBytes      float64 // CUDA graph memory estimate (subtracted since vLLM 0.21)
	NonTorchBytes       float64 // profile run's non-torch increase
	// StepTimeSigma is the log-space standard deviation of a step's duration:
	// each step takes the modelled time times exp(StepTimeSigma x Z), Z drawn
	// from the engine's seeded stream (EngineConfig.Seed). 0: every step takes
	// exactly the modelled time.
	StepTimeSigma    float64
	DefaultModelName string // served model name used by `warden sim` by default
	// Sliding-window attention: SlidingLayers of the Layers attend only the last
	// SlidingWindow positions (0, 0: every layer is full attention). KV capacity and
	// step time follow vLLM's hybrid KV cache manager (see KVGroups).
	SlidingWindow int
	SlidingLayers int
	// KVDtypeBytes is the size of one cached K or V element in bytes: 0 means
	// KVBytesPerElem (bf16, vLLM's kv_cache_dtype "auto"); 1 for "fp8".
	KVDtypeBytes float64
	// MaxModelLen is the max_model_len an engine gets by default (the model's
	// context length, or what the server is assumed to set), lowered to what the KV
	// cache holds; 0 means DefaultMaxModelLen.
	MaxModelLen int
	// Frontend is the API server's CPU work per request and per step
	// (FrontendCosts). It applies only where a scenario models the API-server
	// processes (loadgen.Scenario.APIServers > 0).
	Frontend FrontendCosts
}

// VLLMFrontendCosts is the API-server work of `vllm serve` on the reference's
// kind of host, from public measurements (docs/simulator.md section 9):
//   - TokenizePerToken 1 us: Hugging Face tokenizers (the fast tokenizer vLLM
//     uses) encodes a byte-level BPE with a regex pre-tokenizer (llama-3) at
//     4.1-4.2 MB/s on one thread (huggingface/tokenizers#1584, 10,000
//     documents of ~1,660 or ~116 bytes); Qwen3's tokenizer is the same kind.
//     At ~4 bytes per token that is ~1 us per token (13 ms for a 13k-token
//     prompt). An earlier run of the same benchmark read 1.3-2.1 MB/s
//     (huggingface/tokenizers#1582: 2-3 us per token). vLLM tokenizes on one
//     thread per API-server
//     process (serving_engine.py: ThreadPoolExecutor(max_workers=1);
//     vllm-project/vllm#25301), so requests queue for it.
//   - ChatTemplate 1 ms: rendering a chat template with transformers' Jinja
//     takes ~53 us for a short conversation (llm-d/llm-d-kv-cache#79,
//     BenchmarkRenderJinjaTemplate, Apple M1 Max); a 12-message, ~55 KB
//     conversation plus parsing and validating the request body and the
//     messages' content format (vllm-project/vllm#19735 calls that auto-detection
//     time-consuming: skipping it tripled the request rate of Qwen3-0.6B at
//     max_tokens 1) is taken as 1 ms, an estimate.
//   - EngineCoreHop 0.1 ms per step: the engine core's outputs are msgpack-encoded,
//     sent over a ZMQ IPC socket and decoded in the API server (vllm-project/vllm#46121
//     describes the path; no published figure was found): an estimate of a few
//     tens of microseconds per side.
//   - DetokenizePerToken 50 us per output token: incremental detokenization plus
//     building, serializing and writing the OpenAI chunk in Python; vllm-project/vllm#8335
//     measured streaming at 6% of a 26 ms TPOT (~1.6 ms per step for a large
//     batch), consistent with tens of microseconds per token: an estimate.
var VLLMFrontendCosts = FrontendCosts{
	ChatTemplate:       time.Millisecond,
	TokenizePerToken:   time.Microsecond,
	EngineCoreHop:      100 * time.Microsecond,
	DetokenizePerToken: 50 * time.Microsecond,
}

const gib = 1 << 30

// Sourced figures for the step-time spread and vLLM's start-up memory
// accounting (docs/simulator.md section 10, "Constants and sources"). They were
// committed before any comparison with the reference table.
const (
	// VLLMStepTimeSigma is the log-space standard deviation of one engine
	// step's duration around the modelled one (a lognormal with median 1):
	// ln(p99/median) / 2.326 of the inter-token latency of a vLLM serving
	// benchmark at max concurrency 1 (steady decode of one sequence, so every
	// ITL is one decode step plus its output handling): median 4.62 ms, p99
	// 5.84 ms (vllm-project/vllm PR #51349, `vllm bench serve`, 2026), so
	// ln(1.264) / 2.326 = 0.10. SGLang at concurrency 1 reads median 8.47,
	// p95 8.66 ms (sgl-project/sglang PR #8552): 0.013, a quieter bound. The
	// lognormal shape is an assumption: the sources give percentiles only.
	VLLMStepTimeSigma = 0.10

	// Qwen3_4BLoadedWeightBytes is vLLM's "Model loading took 7.56 GiB" for
	// Qwen3-4B in bf16 (vLLM 0.25.0 on an RTX 5080 16 GB; 7.56 GiB on vLLM
	// 0.20.1 XPU; 7.5552 GiB on a V0 release of May 2025, fp16): the weights term of
	// determine_available_memory (model_memory_usage), a little above
	// Params x 2 B = 7.49 GiB. Qwen3-4B-Instruct-2507 has the same config.
	Qwen3_4BLoadedWeightBytes = 7.56 * gib

	// Qwen3_4BPeakActivationBytes is the profile run's torch peak increase at
	// max_num_batched_tokens 2048: a published vLLM V0 start-up log of
	// Qwen3-4B (fp16, RTX 2060 12 GB, max_model_len 10,000, max_num_seqs 1, so
	// a 10,000-token profile batch) reads "PyTorch activation peak memory
	// takes 0.74GiB"; scaled linearly to 2,048 tokens, 0.15 GiB (an estimate:
	// the MLP intermediates that dominate scale with the batch's tokens).
	Qwen3_4BPeakActivationBytes = 0.15 * gib

	// Qwen3_4BNonTorchBytes is the profile run's non-torch increase: the same
	// V0 log reads "non_torch_memory takes 0.04GiB" (one GPU, no NCCL
	// communicator in the forward pass).
	Qwen3_4BNonTorchBytes = 0.04 * gib

	// Qwen3_4BCUDAGraphBytes is vLLM's CUDA-graph memory estimate, subtracted
	// before sizing the KV cache since vLLM 0.21 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
	// default 1, gpu_worker.py determine_available_memory): a published
	// vLLM 0.19.1 start-up log of a 7.52 GiB bf16 model reads "Estimated CUDA
	// graph memory: 0.61 GiB total" (the pool then captured 0.69 GiB).
	Qwen3_4BCUDAGraphBytes = 0.61 * gib

	// Reported16GBCardBytes is the total memory CUDA reports for a 16 GB
	// NVIDIA card (vLLM's "15.92 GiB" total, RTX 5080, vLLM 0.25.0): less than
	// the nominal 16 GiB. No published A4000 figure was found; an estimate.
	Reported16GBCardBytes = 15.92 * gib
)

// ProfileA4000Qwen3_4B is one RTX A4000 serving Qwen/Qwen3-4B-Instruct-2507 in bf16,
// one DP rank of the reference server (4 x A4000, data_parallel_size 4, served
// as "qwen3-4b-dp4": docs/measurements.md, "The reference measurement").
//
// Model, from the model card and config.json of Qwen/Qwen3-4B-Instruct-2507:
// 36 layers, hidden 2560, 32 query heads, 8 KV heads, head_dim 128, intermediate
// 9728, vocabulary 151936, tied embeddings, bf16. Parameters by the config:
// per layer q 2560x4096 + k,v 2x2560x1024 + o 4096x2560 + MLP 3x2560x9728
// = 10.49M + 5.24M + 10.49M + 74.71M = 100.93M; x36 = 3.633B; + embedding
// 151936x2560 = 0.389B; total 4.02B (the card says 4.0B, 3.6B non-embedding).
// Weights: 4.02e9 x 2 bytes = 8.04 GB, all read once per forward pass (the tied
// embedding is read as the LM head).
// KV per token: 2 x 36 x 8 x 128 x 2 bytes = 147,456 bytes (144 KiB).
//
// GPU, from NVIDIA's RTX A4000 datasheet: 16 GB GDDR6 (taken as 16 GiB =
// 17.18e9 bytes), 448 GB/s, 153.4 TFLOPS tensor with sparsity = 76.7 TFLOPS dense
// bf16 (FP32 accumulate runs at full rate on the professional Ampere cards).
//
// vLLM: gpu_memory_utilization 0.9 (vLLM's default).
//
// Assumptions (uncertain, not fitted to any measurement):
//   - MFU 0.45: cuBLAS GEMMs of a 2048-token chunk reach roughly 60-75% of tensor
//     peak on Ampere; attention kernels, norms, rotary embedding, sampling and the
//     140 W card's clock drop under sustained tensor load pull the whole step lower.
//   - BandwidthEff 0.8: weight-streaming GEMV kernels typically sustain 75-85% of
//     the advertised DRAM bandwidth.
//   - StepOverhead 3 ms: vLLM V1's per-step CPU work (scheduling, input
//     preparation, sampling, output handling) with CUDA graphs for decode is a few
//     milliseconds for a small model.
//
// Memory, from vLLM's start-up accounting (constants above, docs/simulator.md
// section 10): total 15.92 GiB as CUDA reports a 16 GB card, weights as loaded
// 7.56 GiB, peak activation 0.15 GiB, CUDA graphs 0.61 GiB, non-torch 0.04 GiB.
// Step times vary by VLLMStepTimeSigma. (Before 2026-12-01 the profile used the
// nominal 16 GiB, Params x 2 B and one 1.5 GiB reserve, 2,463 blocks, and no
// variability: ProfileA4000Qwen3_4BLockstep.)
//
// Derived (steptime.go): available KV = 15.92 x 0.9 - 7.56 - 0.15 - 0.61 - 0.04
// = 5.97 GiB = 6.41e9 B; / (147,456 x 16 B per block) = 2716 blocks = 43,456
// tokens. Single-sequence decode
// at short context: 3 ms + 8.04e9 / (448e9 x 0.8) = 3 + 22.4 = 25.4 ms (~39 tokens/s).
// Prefill: 2 x 4.02e9 / (76.7e12 x 0.45) = 0.23 ms per token before attention.
var ProfileA4000Qwen3_4B = Profile{
	Name:             "a4000-qwen3-4b",
	ModelName:        "Qwen/Qwen3-4B-Instruct-2507",
	Params:           4.02e9,
	Layers:           36,
	QHeads:           32,
	KVHeads:          8,
	HeadDim:          128,
	BytesPerParam:    2,
	GPUMemoryBytes:   Reported16GBCardBytes,
	PeakFLOPS:        76.7e12,
	MemBandwidth:     448e9,
	MFU:              0.45,
	BandwidthEff:     0.8,
	StepOverhead:     3 * time.Millisecond,
	GPUMemoryUtil:    0.9,
	DefaultModelName: "qwen3-4b-dp4",
	Frontend:         VLLMFrontendCosts,

	LoadedWeightBytes:   Qwen3_4BLoadedWeightBytes,
	PeakActivationBytes: Qwen3_4BPeakActivationBytes,
	CUDAGraphBytes:      Qwen3_4BCUDAGraphBytes,
	NonTorchBytes:       Qwen3_4BNonTorchBytes,
	StepTimeSigma:       VLLMStepTimeSigma,
}

// ProfileA4000Qwen3_4BLockstep is ProfileA4000Qwen3_4B as it was before
// 2026-12-01: the nominal 16 GiB, weights Params x 2 B, one lumped 1.5 GiB
// reserve for activations, CUDA graphs and non-torch memory (2,463 blocks =
// 39,408 tokens), and deterministic step times. It reproduces older studies
// (`--profile a4000-qwen3-4b-lockstep`).
var ProfileA4000Qwen3_4BLockstep = func() Profile {
	p := ProfileA4000Qwen3_4B
	p.Name = "a4000-qwen3-4b-lockstep"
	p.GPUMemoryBytes = 16 * gib
	p.ActivationBytes = 1.5 * gib
	p.LoadedWeightBytes, p.PeakActivationBytes, p.CUDAGraphBytes, p.NonTorchBytes = 0, 0, 0, 0
	p.StepTimeSigma = 0
	return p
}()

// ProfileRTX5090Gemma3_27B is one RTX 5090 serving google/gemma-3-27b-it with 4-bit
// weights (w4a16: int4 weights with one bf16 scale per group of 128, as in the
// public GPTQ/AWQ-style w4a16 checkpoints vLLM serves with Marlin kernels), the
// embedding/LM head kept in bf16. Served as "gemma-3-27b".
//
// Model, from config.json of google/gemma-3-27b-it (text config): 62 layers, hidden
// 5376, 32 query heads, 16 KV heads, head_dim 128, intermediate 21504, vocabulary
// 262208, tied embeddings, sliding_window 1024, sliding_window_pattern 6 (every sixth
// layer is global, the others local: 10 global and 52 local layers), 131072-token
// context. Per layer q 5376x4096 + k,v 2x5376x2048 + o 4096x5376 +
// MLP 3x5376x21504 = 66.06M + 346.82M = 412.88M; x62 = 25.60B linear parameters;
// + embedding 262208x5376 = 1.41B; text model 27.0B (the ~0.4B SigLIP vision tower is
// not run for text and is counted in ActivationBytes as resident memory).
// Weights read per pass: 25.60e9 x (0.5 + 2/128) bytes = 13.20 GB + 1.41e9 x 2 =
// 2.82 GB = 16.02 GB, so BytesPerParam = 16.02e9 / 27.0e9 = 0.593.
// KV per token and layer (bf16): 2 x 16 x 128 x 2 = 8,192 bytes; over the 10 global
// layers 81,920 bytes (80 KiB); over all 62 layers 507,904 bytes (496 KiB).
//
// KV cache: vLLM's hybrid KV cache manager (the default since vLLM 0.10; vllm/v1/core/
// kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, kv_cache_coordinator.py,
// single_type_kv_cache_manager.py SlidingWindowManager) groups the layers 10 to a
// group: one full-attention group (the 10 global layers) and cdiv(52, 10) = 6
// sliding-window groups (8 padding layers). One block id costs 16 tokens x 10 layers
// x 8,192 B = 1,310,720 B in whichever group holds it. A request holds
// cdiv(context, 16) blocks in the full-attention group and, in each sliding-window
// group, only the blocks covering its last 1024 positions plus the tokens scheduled
// this step: 65 blocks when decoding, up to 193 during a 2048-token prefill chunk,
// so a decoding request costs 6 x 65 = 390 blocks (6,240 tokens' worth of global
// KV) beside its context. See KVGroups and SlidingBlocks, and the package doc for
// what is simplified (the sliding-window blocks' own prefix caching).
//
// GPU, from NVIDIA's GeForce RTX 5090 specifications: 32 GB GDDR7 (taken as 32 GiB),
// 1792 GB/s; dense FP16/bf16 tensor with FP32 accumulate taken as 209.5 TFLOPS
// (GeForce cards run FP32-accumulate at half the FP16-accumulate rate; uncertain).
//
// Assumptions (uncertain, not fitted to any measurement):
//   - MFU 0.4: int4 Marlin GEMMs dequantise on the fly and reach a little less of
//     the bf16 peak than plain bf16 GEMMs at prefill batch sizes.
//   - BandwidthEff 0.75: 4-bit weight GEMV kernels stream weights slightly less
//     efficiently than bf16 ones.
//   - StepOverhead 4 ms: like the A4000 profile, a little more for 62 layers.
//   - ActivationBytes 2.7e9: ~1.75 GiB activations, CUDA graphs and non-torch
//     memory for a 2048-token profiling batch of a 5376-hidden model with a 262k
//     vocabulary, plus the 0.84 GB bf16 vision tower.
//   - MaxModelLen 131072: the model's context (vLLM's default max_model_len),
//     lowered by the engine to what one sequence can hold (about 130k tokens).
//
// Derived: available KV = 34.36e9 x 0.9 - 16.02e9 - 2.7e9 = 12.20e9 B;
// / 1,310,720 B = 9,310 blocks = 148,960 tokens of global-layer context if nothing
// ran; each running request takes 390-1158 of those blocks for its windows, so 2
// decoding sequences of 58k tokens take 2 x (3,625 + 390) = 8,030 blocks, and a third
// does not fit. (Treating all 62 layers as full attention, as vLLM does with
// --disable-hybrid-kv-cache-manager, would give 12.20e9 / (507,904 x 16) = 1,501
// blocks = 24,016 tokens.) Single-sequence decode at short context: 4 ms +
// 16.02e9 / (1792e9 x 0.75) = 4 + 11.9 = 15.9 ms (~63 tokens/s).
var ProfileRTX5090Gemma3_27B = Profile{
	Name:             "rtx5090-27b",
	ModelName:        "google/gemma-3-27b-it (w4a16)",
	Params:           27.0e9,
	Layers:           62,
	QHeads:           32,
	KVHeads:          16,
	HeadDim:          128,
	BytesPerParam:    16.02e9 / 27.0e9,
	GPUMemoryBytes:   32 * gib,
	PeakFLOPS:        209.5e12,
	MemBandwidth:     1792e9,
	MFU:              0.4,
	BandwidthEff:     0.75,
	StepOverhead:     4 * time.Millisecond,
	GPUMemoryUtil:    0.9,
	ActivationBytes:  2.7e9,
	DefaultModelName: "gemma-3-27b",
	SlidingWindow:    1024,
	SlidingLayers:    52,
	MaxModelLen:      131072,
	Frontend:         VLLMFrontendCosts, // the same CPU-side work (Gemma's tokenizer is a fast BPE too)
}

// ProfileRTX5090Gemma3_27BFP8KV is ProfileRTX5090Gemma3_27B served with
// `--kv-cache-dtype fp8` (vLLM stores K and V as fp8 e4m3 with per-tensor scales;
// vllm/config/cache.py CacheDType): 1 byte per element instead of 2, so the same
// 12.20e9 bytes hold 18,621 blocks = 297,936 tokens of global-layer context, and
// decode reads half the KV bytes per step. Everything else is unchanged.
//
// Why a second profile: the reference's 7-GPU anecdote (docs/measurements.md,
// "The reference measurement") saw 81 % of
// prompt tokens served from cache right after a restart with 26 sessions of about
// 58k tokens, which needs the fleet to hold about 26 x 58k = 1.5M tokens; the bf16
// profile's 7 x 148,960 = 1.04M cannot, under any placement. The anecdote does not
// say which KV dtype, quantization or context sizes it had, so this is a
// plausible deployment, not a measured one; docs/routing.md reports the fleet
// scenario on both profiles.
var ProfileRTX5090Gemma3_27BFP8KV = func() Profile {
	p := ProfileRTX5090Gemma3_27B
	p.Name = "rtx5090-27b-fp8kv"
	p.ModelName = "google/gemma-3-27b-it (w4a16, fp8 KV cache)"
	p.KVDtypeBytes = 1
	return p
}()

var builtinProfiles = []Profile{ProfileA4000Qwen3_4B, ProfileA4000Qwen3_4BLockstep, ProfileRTX5090Gemma3_27B, ProfileRTX5090Gemma3_27BFP8KV}

// LookupProfile returns a built-in profile by name ("a4000-qwen3-4b",
// "a4000-qwen3-4b-lockstep", "rtx5090-27b", "rtx5090-27b-fp8kv").
// Errors: unknown name.
func LookupProfile(name string) (Profile, error) {
	for _, p := range builtinProfiles {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("looking up profile %q: unknown (have %s)", name, strings.Join(ProfileNames(), ", "))
}

// ProfileNames lists the built-in profiles.
func ProfileNames() []string {
	names := make([]string, 0, len(builtinProfiles))
	for _, p := range builtinProfiles {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}
