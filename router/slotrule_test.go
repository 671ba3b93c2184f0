package router

import "testing"

// A model whose engine is detected at run time (routerhttp's engine: auto)
// starts on vLLM's rule and switches to the slot rule once every replica is
// known to be llama.cpp: slots reported before the switch count, and
// switching back restores max_num_seqs / 4 of the configured value.
func TestSetSlotBasedSwitchesTheAutoRule(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.MaxNumSeqs = 0 })
	threshold := func() int { n, _ := b.OverflowThreshold(); return n }
	b.ObserveSlots(0, 4, 16384)
	b.ObserveSlots(1, 4, 16384)
	if got, want := threshold(), AutoOverflowThreshold(VLLMDefaultMaxNumSeqs); got != want || b.SlotBased() {
		t.Fatalf("before the switch: threshold %d (slot-based %v), want %d, vLLM's rule", got, b.SlotBased(), want)
	}
	if !b.SetSlotBased(true, true) {
		t.Error("SetSlotBased(true, true) reported no change")
	}
	if got, want := threshold(), SlotOverflowThreshold(4); got != want || !b.SlotBased() {
		t.Fatalf("slot-based, learning: threshold %d, want %d = 4 slots - 1", got, want)
	}
	if b.SetSlotBased(true, true) {
		t.Error("the same rule again reported a change")
	}
	b.ObserveSlots(1, 2, 16384)
	if got, want := threshold(), SlotOverflowThreshold(2); got != want {
		t.Fatalf("after a replica reports 2 slots: threshold %d, want %d", got, want)
	}
	b.SetSlotBased(true, false) // max_num_seqs configured: not learned
	if got, want := threshold(), SlotOverflowThreshold(VLLMDefaultMaxNumSeqs); got != want {
		t.Fatalf("slot-based, not learning: threshold %d, want %d", got, want)
	}
	b.SetSlotBased(false, true)
	if got, want := threshold(), AutoOverflowThreshold(VLLMDefaultMaxNumSeqs); got != want || b.SlotBased() {
		t.Fatalf("back to vLLM's rule: threshold %d, want %d", got, want)
	}
	b.SetOverflowThreshold(7)
	b.SetSlotBased(true, true)
	if got := threshold(); got != 7 {
		t.Fatalf("configured threshold 7 became %d under the slot rule", got)
	}
}
