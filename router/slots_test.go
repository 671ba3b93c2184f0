package router

import (
	"errors"
	"fmt"
	"testing"
)

// Regression: admission counted a llama.cpp replica's KV as slots x n_ctx of
// tokens that any conversations could fill, but each slot holds one sequence
// (llama-server gives every slot llama_n_ctx_seq tokens, -c / -np, of its own
// KV stream): 4 slots of 8,192 tokens hold 4 conversations, not 32 of 1,000
// tokens. The fifth new conversation waits.
func TestAdmissionCountsALlamaCppConversationAsOneSlot(t *testing.T) {
	b, _ := admitBalancer(t, 1, 4*8192, AdmissionConfig{MaxHold: -1})
	b.ObserveSlots(0, 4, 8192)
	for i := range 4 {
		if _, info, err := b.Admit(Facts{SessionKey: fmt.Sprint("conv-", i), PromptTokens: 1000}); err != nil {
			t.Fatalf("conv-%d: %+v %v, want admitted (a free slot)", i, info, err)
		}
	}
	if _, info, err := b.Admit(Facts{SessionKey: "conv-4", PromptTokens: 1000}); !errors.Is(err, ErrHold) {
		t.Fatalf("conv-4 with every slot taken: %+v %v, want ErrHold", info, err)
	}
}

// Slots read again replace the old figures, and the learned max_num_seqs is the
// fewest slots any replica has now (a restarted server with fewer or more).
func TestObserveSlotsReplacesAndLearnsFewest(t *testing.T) {
	b, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.SlotBased, c.LearnSlots, c.MaxNumSeqs = true, true, 0 })
	threshold := func() int { n, _ := b.OverflowThreshold(); return n }
	b.ObserveSlots(0, 4, 8192)
	b.ObserveSlots(1, 8, 8192)
	if got, want := threshold(), SlotOverflowThreshold(4); got != want {
		t.Fatalf("threshold %d, want %d (4 slots)", got, want)
	}
	b.ObserveSlots(0, 2, 4096) // restarted with -np 2
	if got, want := threshold(), SlotOverflowThreshold(2); got != want {
		t.Fatalf("threshold %d after -np 2, want %d", got, want)
	}
	b.ObserveSlots(0, 16, 4096) // restarted with -np 16: replica 1's 8 are now the fewest
	if got, want := threshold(), SlotOverflowThreshold(8); got != want {
		t.Fatalf("threshold %d after -np 16, want %d", got, want)
	}
}
