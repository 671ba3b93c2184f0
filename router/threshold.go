package router

import (
	"fmt"
	"strconv"
	"strings"
)

// Overflow defaults.
const (
	// VLLMDefaultMaxNumSeqs is the --max-num-seqs the router assumes a real server
	// runs when not told: vLLM's default for `vllm serve` on GPUs under 70 GiB
	// (vllm/engine/arg_utils.py). `warden route`
	// and `warden bench --replicas` default to it. It differs on purpose from
	// sim.ReferenceMaxNumSeqs (32), the reference server the simulator models:
	// with the embedded simulator the router is told the engines' value.
	// Configure max_num_seqs per model to match the server.
	VLLMDefaultMaxNumSeqs = 256
	// DefaultOverflowDivisor gives the auto overflow threshold: a request leaves its
	// home when the home has more than max_num_seqs / 4 requests in flight
	// (the reference router's rule, docs/measurements.md "The reference
	// measurement"; 8 at max_num_seqs 32).
	DefaultOverflowDivisor = 4
	// DefaultOverflowMargin: an overflowing request only moves to a replica with at
	// least this many fewer requests in flight than its home, so two loaded
	// replicas do not trade requests back and forth.
	DefaultOverflowMargin = 2
)

// AutoOverflowThreshold returns the auto threshold for maxNumSeqs sequences per
// replica: maxNumSeqs / DefaultOverflowDivisor, at least 1.
func AutoOverflowThreshold(maxNumSeqs int) int {
	if maxNumSeqs <= 0 {
		maxNumSeqs = VLLMDefaultMaxNumSeqs
	}
	return max(1, maxNumSeqs/DefaultOverflowDivisor)
}

// SlotOverflowThreshold is the auto threshold for a slot-based engine
// (llama.cpp: -np slots, each running one sequence; beyond them the server
// defers a request until a slot frees): slots - 1, at least 1. A request stays
// home while one of the home's slots is free for it (in-flight <= slots - 1)
// and overflows only when it would wait for a slot. vLLM's max_num_seqs / 4
// (AutoOverflowThreshold) is a rule for a batch scheduler whose hundreds of
// sequences share one KV cache; with 4 slots it would give 1 and move a
// conversation as soon as two share a server.
func SlotOverflowThreshold(slots int) int {
	return max(1, slots-1)
}

// ParseThreshold parses an overflow threshold as the YAML file
// (overflow_threshold) and the admin API (PUT .../threshold) take it: "auto" (any
// case) or 0, both meaning auto (AutoOverflowThreshold), or a positive integer of
// in-flight requests. It returns 0 for auto. Errors: anything else ("-2", "4.5",
// "lots", "").
func ParseThreshold(s string) (int, error) {
	if strings.EqualFold(s, "auto") {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf(`%q: want "auto", 0 (auto) or a positive integer`, s)
	}
	return n, nil
}
