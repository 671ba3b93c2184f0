package sim

import (
	"math"
	"testing"
	"time"
)

// unitProfile has round numbers so step times can be computed by hand.
var unitProfile = Profile{
	Name: "unit", Params: 1e9, BytesPerParam: 1, Layers: 1, QHeads: 1, KVHeads: 1, HeadDim: 1,
	PeakFLOPS: 1e12, MFU: 1, MemBandwidth: 1e9, BandwidthEff: 1, StepOverhead: time.Millisecond,
}

func TestStepTimeFormula(t *testing.T) {
	sec := func(s float64) time.Duration { return time.Millisecond + time.Duration(s*1e9) }
	tests := []struct {
		name string
		work []SeqWork
		want time.Duration
	}{
		{"empty step takes nothing", nil, 0},
		// compute (2e9 + 4*1000)/1e12 = 2 ms; memory (1e9 + 1000 ctx * 4 B)/1e9 = 1.000004 s.
		{"decode at 1000 context is memory bound", []SeqWork{{999, 1}}, sec(1.000004)},
		// compute (2e12 + 4 * 1000*1001/2)/1e12 = 2.000002 s; memory 1.000004 s.
		{"1000-token prefill is compute bound", []SeqWork{{0, 1000}}, sec(2.000002)},
		// a chunk of 1000 after 1000 computed: positions sum 1000*1000 + 500500.
		{"a later chunk attends the earlier context", []SeqWork{{1000, 1000}}, sec((2e12 + 4*(1e6+500500)) / 1e12)},
		// two decodes: memory (1e9 + (100+200)*4)/1e9; weights read once per step.
		{"decodes share one weight read", []SeqWork{{99, 1}, {199, 1}}, sec(1.0000012)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := unitProfile.StepTime(tc.work)
			if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("StepTime = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProfilesPhysicallySane checks each built-in profile's derived numbers against
// bounds that follow from the formulas and the hardware, and logs them.
func TestProfilesPhysicallySane(t *testing.T) {
	for _, name := range ProfileNames() {
		p, err := LookupProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			blocks := p.NumGPUBlocks(DefaultBlockSize)
			blockBytes := p.BlockBytes(DefaultBlockSize)
			budget := p.GPUMemoryBytes * p.GPUMemoryUtil
			w := p.LoadedWeightBytes
			if w == 0 {
				w = p.WeightBytes()
			}
			used := w + p.ActivationBytes + p.PeakActivationBytes + p.CUDAGraphBytes + p.NonTorchBytes + float64(blocks)*blockBytes
			// The KV cache fills what is left, to within one block.
			if blocks < 2 || used > budget || used+blockBytes <= budget {
				t.Errorf("num_gpu_blocks %d: weights+activations+KV %.3g B vs budget %.3g B", blocks, used, budget)
			}
			if p.WeightBytes() >= p.GPUMemoryBytes {
				t.Errorf("weights %.3g B do not fit in %.3g B", p.WeightBytes(), p.GPUMemoryBytes)
			}
			// Single-sequence decode is bounded below by streaming the weights at the
			// full advertised bandwidth and above by overhead + streaming weights and
			// KV at the stated efficiency (compute is far smaller for one token).
			ctx := 10000
			dec := p.DecodeStepTime(1, ctx)
			lower := time.Duration(p.WeightBytes() / p.MemBandwidth * 1e9)
			upper := p.StepOverhead + time.Duration((p.WeightBytes()+float64(ctx)*p.KVBytesPerToken())/(p.MemBandwidth*p.BandwidthEff)*1e9) + time.Microsecond
			if dec < lower || dec > upper {
				t.Errorf("decode step %v outside [%v, %v]", dec, lower, upper)
			}
			// Batching is the point of continuous batching: 4 sequences take less than
			// 4 times one, and more than one.
			dec4 := p.DecodeStepTime(4, ctx)
			if dec4 <= dec || dec4 >= 4*dec {
				t.Errorf("decode of 4 sequences %v vs 1 sequence %v", dec4, dec)
			}
			// Prefill cannot beat the dense FLOP count at peak.
			pre := p.PrefillTime(ctx, DefaultMaxNumBatchedTokens)
			if min := time.Duration(2 * p.Params * float64(ctx) / p.PeakFLOPS * 1e9); pre < min {
				t.Errorf("prefill %v faster than the peak-FLOPS bound %v", pre, min)
			}
			if p.MFU <= 0 || p.MFU > 1 || p.BandwidthEff <= 0 || p.BandwidthEff > 1 {
				t.Errorf("efficiencies MFU %v bandwidth %v outside (0, 1]", p.MFU, p.BandwidthEff)
			}
			t.Logf("%s: block %.0f B, num_gpu_blocks %d = %d tokens of full-attention context; decode 1 seq @10k %v (%.1f tok/s), 4 seqs @10k %v (%.1f tok/s); short-context decode %v; cold 10k prefill %v",
				p.Name, p.BlockBytes(DefaultBlockSize), blocks, blocks*DefaultBlockSize, dec, 1/dec.Seconds(),
				dec4, 4/dec4.Seconds(), p.DecodeStepTime(1, 100), pre)
		})
	}
}

func TestLookupProfile(t *testing.T) {
	tests := []struct {
		name, want string
		wantErr    bool
	}{
		{"a4000-qwen3-4b", "qwen3-4b-dp4", false},
		{"rtx5090-27b", "gemma-3-27b", false},
		{"rtx5090-27b-fp8kv", "gemma-3-27b", false},
		{"h100", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LookupProfile(tc.name)
			if (err != nil) != tc.wantErr || p.DefaultModelName != tc.want {
				t.Errorf("LookupProfile(%q) = %q, %v", tc.name, p.DefaultModelName, err)
			}
		})
	}
	// The documented KV size of Qwen3-4B: 144 KiB per token.
	if got := ProfileA4000Qwen3_4B.KVBytesPerToken(); got != 144*1024 {
		t.Errorf("Qwen3-4B KV bytes/token %v, want 147456", got)
	}
	if math.Abs(ProfileRTX5090Gemma3_27B.WeightBytes()-16.02e9) > 1e6 {
		t.Errorf("gemma weights %v", ProfileRTX5090Gemma3_27B.WeightBytes())
	}
}
