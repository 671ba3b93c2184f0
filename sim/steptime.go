package sim

import (
	"math"
	"time"
)

// KVBytesPerElem is the size of one cached K or V element: vLLM's kv_cache_dtype
// "auto" stores the KV cache in the model's activation dtype, bf16 (2 bytes), also for
// weight-only quantized models.
const KVBytesPerElem = 2

// SeqWork is one request's share of a step: New tokens scheduled, the first at
// position Start (Start tokens of its context are already in the KV cache). A decode
// at context length c is {Start: c-1, New: 1}; a prefill chunk is
// {Start: tokens computed so far, New: chunk size}.
type SeqWork struct {
	Start, New int
}

// WeightBytes is the bytes of weights read per forward pass: Params x BytesPerParam.
func (p Profile) WeightBytes() float64 { return p.Params * p.BytesPerParam }

// KVBytesPerToken is the KV cache bytes of one token over all layers:
// 2 (K and V) x Layers x KVHeads x HeadDim x KVBytesPerElem
// (vLLM FullAttentionSpec.page_size_bytes / block_size).
func (p Profile) KVBytesPerToken() float64 {
	return 2 * float64(p.Layers) * float64(p.KVHeads) * float64(p.HeadDim) * KVBytesPerElem
}

// NumGPUBlocks is the KV cache capacity in blocks of blockSize tokens, as vLLM's
// memory profiling derives it (vllm/v1/worker/gpu_worker.py determine_available_memory,
// kv_cache_utils.py get_num_blocks):
//
//	floor((GPUMemoryBytes x GPUMemoryUtil - WeightBytes - ActivationBytes) /
//	      (KVBytesPerToken x blockSize))
//
// It is 0 or negative when nothing is left for the KV cache.
func (p Profile) NumGPUBlocks(blockSize int) int {
	avail := p.GPUMemoryBytes*p.GPUMemoryUtil - p.WeightBytes() - p.ActivationBytes
	return int(math.Floor(avail / (p.KVBytesPerToken() * float64(blockSize))))
}

// stepCost accumulates one step's work for the roofline step-time model.
type stepCost struct {
	tokens  float64 // tokens scheduled (each a forward pass through all weights)
	attnPos float64 // sum over scheduled tokens of the context positions each attends
	ctxRead float64 // KV tokens read: each scheduled request's context (Start+New)
}

func (c *stepCost) add(w SeqWork) {
	n, s := float64(w.New), float64(w.Start)
	c.tokens += n
	// Token i (0-based) of the chunk sits at position s+i and attends s+i+1
	// positions (causal attention): sum = n*s + n(n+1)/2.
	c.attnPos += n*s + n*(n+1)/2
	c.ctxRead += s + n
}

// time is StepOverhead + max(compute, memory), where
//
//	compute = (2 x Params x tokens + 4 x Layers x QHeads x HeadDim x attnPos) / (PeakFLOPS x MFU)
//	memory  = (WeightBytes + ctxRead x KVBytesPerToken) / (MemBandwidth x BandwidthEff)
//
// 2 x Params FLOPs per token is the dense matmul count (one multiply-add per weight);
// attention is QK^T plus AV, 2 x HeadDim FLOPs each per query head, layer and
// attended position. The roofline max assumes compute and memory traffic overlap.
func (p Profile) stepTime(c stepCost) time.Duration {
	if c.tokens == 0 {
		return 0
	}
	flops := 2*p.Params*c.tokens + 4*float64(p.Layers)*float64(p.QHeads)*float64(p.HeadDim)*c.attnPos
	compute := flops / (p.PeakFLOPS * p.MFU)
	bytes := p.WeightBytes() + c.ctxRead*p.KVBytesPerToken()
	memory := bytes / (p.MemBandwidth * p.BandwidthEff)
	sec := math.Max(compute, memory)
	return p.StepOverhead + time.Duration(sec*float64(time.Second))
}

// StepTime is the duration of one engine step that runs work (see stepTime for the
// formula). An empty step takes 0.
func (p Profile) StepTime(work []SeqWork) time.Duration {
	var c stepCost
	for _, w := range work {
		c.add(w)
	}
	return p.stepTime(c)
}

// DecodeStepTime is the step time of seqs decoding requests at context tokens each.
func (p Profile) DecodeStepTime(seqs, context int) time.Duration {
	var c stepCost
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
		var c stepCost
		c.add(SeqWork{Start: start, New: n})
		d += p.stepTime(c)
	}
	return d
}
