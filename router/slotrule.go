package router

// SetSlotBased switches the rule of the auto overflow threshold while the
// Balancer runs, for a model whose engine is known only once its replicas
// were read (routerhttp's `engine: auto`, the default). On: the replicas are
// slot-based (llama.cpp -np slots) and the auto threshold is
// SlotOverflowThreshold(max_num_seqs), as BalancerConfig.SlotBased; with learn
// (BalancerConfig.LearnSlots: max_num_seqs was not configured) max_num_seqs is
// the fewest slots a replica has reported (ObserveSlots, also the reports made
// before this call). Off: vLLM's rule, AutoOverflowThreshold of the configured
// max_num_seqs. A configured (non-auto) threshold is unaffected. It reports
// whether the rule changed.
func (b *Balancer) SetSlotBased(on, learn bool) (changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	learn = on && learn
	changed = b.slotBased != on || b.learnSlots != learn
	b.slotBased, b.learnSlots = on, learn
	b.maxNumSeqs = b.configSeqs
	if !learn {
		return changed
	}
	fewest := 0
	for j := range b.reps {
		if s := b.reps[j].slots; s > 0 && (fewest == 0 || s < fewest) {
			fewest = s
		}
	}
	if fewest > 0 {
		b.maxNumSeqs = fewest
	}
	return changed
}

// SlotBased reports whether the auto threshold follows the slot rule
// (BalancerConfig.SlotBased, SetSlotBased).
func (b *Balancer) SlotBased() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slotBased
}
