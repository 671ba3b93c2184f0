package sim

import (
	"math"
	"time"
)

// KVBytesPerElem is the size of one cached K or V element: vLLM's kv_cache_dtype
// "auto" stores the KV cache in the model's activation dtype, bf16 (2 bytes), also for
// weight-only quantized models. A profile overrides it with Profile.KVDtypeBytes
// (1 for kv_cache_dtype "fp8").
const KVBytesPerElem = 2

// kvElemBytes is the profile's KV element size: KVDtypeBytes, or KVBytesPerElem
// when it is 0.
func (p Profile) kvElemBytes() float64 {
	if p.KVDtypeBytes > 0 {
		return p.KVDtypeBytes
	}
	return KVBytesPerElem
}

// SeqWork is one request's share of a step: New tokens scheduled, the first at
// position Start (Start tokens of its context are already in the KV cache). A decode
// at context length c is {Start: c-1, New: 1}; a prefill chunk is
// {Start: tokens computed so far, New: chunk size}.
type SeqWork struct {
	Start, New int
}

// WeightBytes is the bytes of weights read per forward pass: Params x BytesPerParam.
func (p Profile) WeightBytes() float64 { return p.Params * p.BytesPerParam }

// KVBytesPerTokenLayer is the KV cache bytes of one token in one layer:
// 2 (K and V) x KVHeads x HeadDim x the KV element size (KVBytesPerElem, or
// Profile.KVDtypeBytes).
func (p Profile) KVBytesPerTokenLayer() float64 {
	return 2 * float64(p.KVHeads) * float64(p.HeadDim) * p.kvElemBytes()
}

// KVBytesPerToken is the KV cache bytes of one token over all layers, as if every
// layer kept it: Layers x KVBytesPerTokenLayer (vLLM FullAttentionSpec.page_size_bytes
// / block_size x layers). With sliding-window layers (SlidingLayers > 0) a token far
// behind the window is kept by the global layers only: see KVGroups.
func (p Profile) KVBytesPerToken() float64 {
	return float64(p.Layers) * p.KVBytesPerTokenLayer()
}

// FullLayers is the number of full-attention (global) layers.
func (p Profile) FullLayers() int { return p.Layers - p.SlidingLayers }

// KVGroups is how vLLM's hybrid KV cache manager lays out the cache
// (vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size): layers of
// one attention type are split into groups of groupLayers layers (the smaller layer
// count of the two types, or the larger one when it is under 1.5 times the smaller;
// the last group of a type is padded), every group has its own block table, and one
// block id stands for the same slot in groupLayers shared tensors. So one block costs
// blockSize x groupLayers x KVBytesPerTokenLayer bytes whichever group holds it, a
// full-attention group holds a block for every blockSize tokens of context, and a
// sliding-window group only those covering the window.
//
// Without sliding-window layers there is one group of all layers (the same numbers as
// a plain full-attention model). Gemma 3 27B (10 global, 52 local layers):
// groupLayers 10, fullGroups 1, slidingGroups cdiv(52, 10) = 6 (8 padding layers).
func (p Profile) KVGroups() (groupLayers, fullGroups, slidingGroups int) {
	full, sw := p.FullLayers(), p.SlidingLayers
	if sw <= 0 || p.SlidingWindow <= 0 {
		return p.Layers, 1, 0
	}
	if full <= 0 {
		return sw, 0, 1
	}
	lo, hi := min(full, sw), max(full, sw)
	groupLayers = lo
	if float64(hi) < 1.5*float64(lo) {
		groupLayers = hi
	}
	return groupLayers, ceilDiv(full, groupLayers), ceilDiv(sw, groupLayers)
}

// BlockBytes is the memory of one KV block id: blockSize x groupLayers x
// KVBytesPerTokenLayer (see KVGroups; for a full-attention model, blockSize x
// KVBytesPerToken).
func (p Profile) BlockBytes(blockSize int) float64 {
	g, _, _ := p.KVGroups()
	return float64(blockSize) * float64(g) * p.KVBytesPerTokenLayer()
}

// AvailableKVBytes is the memory vLLM's profiling leaves for the KV cache
// (vllm/v1/worker/gpu_worker.py determine_available_memory: requested memory
// minus weights, torch peak increase, non-torch increase and, since vLLM 0.21,
// the CUDA graph estimate), in bytes:
//
//	GPUMemoryBytes x GPUMemoryUtil - weights - ActivationBytes
//	  - PeakActivationBytes - CUDAGraphBytes - NonTorchBytes
//
// where weights is LoadedWeightBytes, or WeightBytes() when it is 0. A profile
// gives either the lumped ActivationBytes or the three terms (docs/simulator.md
// sections 3 and 10).
func (p Profile) AvailableKVBytes() float64 {
	w := p.LoadedWeightBytes
	if w <= 0 {
		w = p.WeightBytes()
	}
	return p.GPUMemoryBytes*p.GPUMemoryUtil - w - p.ActivationBytes -
		p.PeakActivationBytes - p.CUDAGraphBytes - p.NonTorchBytes
}

// NumGPUBlocks is the KV cache capacity in block ids of blockSize tokens, as vLLM's
// memory profiling derives it (kv_cache_utils.py get_num_blocks):
//
//	floor(AvailableKVBytes / BlockBytes(blockSize))
//
// It is 0 or negative when nothing is left for the KV cache.
func (p Profile) NumGPUBlocks(blockSize int) int {
	return int(math.Floor(p.AvailableKVBytes() / p.BlockBytes(blockSize)))
}

// SlidingBlocks is the number of block ids a sliding-window group holds for a request
// whose first computed tokens are computed when newTokens more are scheduled:
// the blocks from the first one still inside the window of the first new token,
// floor(max(0, computed - SlidingWindow + 1) / blockSize), to the last one written,
// cdiv(computed + newTokens, blockSize) - 1 (vllm/v1/core/single_type_kv_cache_manager.py
// SlidingWindowManager.remove_skipped_blocks and get_num_blocks_to_allocate). 0 for
// a profile without sliding-window layers.
func (p Profile) SlidingBlocks(computed, newTokens, blockSize int) int {
	if p.SlidingWindow <= 0 || p.SlidingLayers <= 0 {
		return 0
	}
	lo := max(0, computed-p.SlidingWindow+1) / blockSize
	return ceilDiv(computed+newTokens, blockSize) - lo
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// stepCost accumulates one step's work for the roofline step-time model.
type stepCost struct {
	window     float64 // sliding window in tokens (0: none)
	tokens     float64 // tokens scheduled (each a forward pass through all weights)
	attnPos    float64 // sum over scheduled tokens of the context positions each attends (global layers)
	attnPosWin float64 // the same for a sliding-window layer: each attends at most window positions
	ctxRead    float64 // KV tokens read by a global layer: each scheduled request's context (Start+New)
	ctxReadWin float64 // KV tokens read by a sliding-window layer
}

func (c *stepCost) add(w SeqWork) {
	n, s := float64(w.New), float64(w.Start)
	c.tokens += n
	// Token i (0-based) of the chunk sits at position s+i and attends s+i+1
	// positions (causal attention): sum = n*s + n(n+1)/2.
	c.attnPos += n*s + n*(n+1)/2
	c.ctxRead += s + n
	if c.window <= 0 {
		return
	}
	// A sliding-window layer attends min(s+i+1, window) positions and reads the KV
	// of positions max(0, s+1-window) .. s+n-1.
	c.attnPosWin += sumMin(s+1, s+n, c.window)
	c.ctxReadWin += min(s+n, c.window+n-1)
}

// sumMin is the sum of min(p, w) over the integers p in [a, b].
func sumMin(a, b, w float64) float64 {
	switch {
	case b <= w:
		return (a + b) * (b - a + 1) / 2
	case a > w:
		return (b - a + 1) * w
	}
	return (a+w)*(w-a+1)/2 + (b-w)*w
}

// time is StepOverhead + max(compute, memory), where
//
//	compute = (2 x Params x tokens
//	           + 4 x QHeads x HeadDim x (FullLayers x attnPos + SlidingLayers x attnPosWin))
//	          / (PeakFLOPS x MFU)
//	memory  = (WeightBytes + KVBytesPerTokenLayer x (FullLayers x ctxRead + SlidingLayers x ctxReadWin))
//	          / (MemBandwidth x BandwidthEff)
//
// 2 x Params FLOPs per token is the dense matmul count (one multiply-add per weight);
// attention is QK^T plus AV, 2 x HeadDim FLOPs each per query head, layer and
// attended position. The roofline max assumes compute and memory traffic overlap.
func (p Profile) stepTime(c stepCost) time.Duration {
	if c.tokens == 0 {
		return 0
	}
	full, sw := float64(p.FullLayers()), float64(p.SlidingLayers)
	if c.window <= 0 { // no window: every layer is global
		full, sw = float64(p.Layers), 0
	}
	attn := full*c.attnPos + sw*c.attnPosWin
	flops := 2*p.Params*c.tokens + 4*float64(p.QHeads)*float64(p.HeadDim)*attn
	compute := flops / (p.PeakFLOPS * p.MFU)
	bytes := p.WeightBytes() + p.KVBytesPerTokenLayer()*(full*c.ctxRead+sw*c.ctxReadWin)
	memory := bytes / (p.MemBandwidth * p.BandwidthEff)
	sec := math.Max(compute, memory)
	return p.StepOverhead + time.Duration(sec*float64(time.Second))
}

// newCost returns an empty step cost for the profile.
func (p Profile) newCost() stepCost {
	c := stepCost{}
	if p.SlidingLayers > 0 && p.SlidingWindow > 0 {
		c.window = float64(p.SlidingWindow)
	}
	return c
}

// StepTime is the duration of one engine step that runs work (see stepTime for the
// formula). An empty step takes 0.
func (p Profile) StepTime(work []SeqWork) time.Duration {
	c := p.newCost()
	for _, w := range work {
		c.add(w)
	}
	return p.stepTime(c)
}

// DecodeStepTime is the step time of seqs decoding requests at context tokens each.
func (p Profile) DecodeStepTime(seqs, context int) time.Duration {
	c := p.newCost()
	for range seqs {
		c.add(SeqWork{Start: context - 1, New: 1})
	}
	return p.stepTime(c)
}

// PrefillTime is the time a lone cold prompt of promptTokens takes to reach its first
// token with a per-step budget of chunk tokens (chunked prefill, nothing else running).
func (p Profile) PrefillTime(promptTokens, chunk int) time.Duration {
	var d time.Duration
	for start := 0; start < promptTokens; start += chunk {
		n := min(chunk, promptTokens-start)
		c := p.newCost()
		c.add(SeqWork{Start: start, New: n})
		d += p.stepTime(c)
	}
	return d
}
