// Package vllmdp is vLLM's internal data-parallel load balancer score, defined
// once for the router's "affinity off" policy (router.ShortestQueue), the
// study's score-based diagnostics (router.VLLMScore) and the simulator's DP
// front (sim/simhttp). It owns the formula and its constants, not the snapshot
// bookkeeping around it (each balancer keeps its own). Pure: no I/O.
package vllmdp

// The KV-pressure term's constants: waiting x KVPenaltyFactor x max(0, kv_usage -
// KVPenaltyFrom) (vllm/v1/engine/core_client.py, DPLBAsyncMPClient.
// get_core_engine_for_request, "ramps from 0 at <=50% usage to 3x waiting at
// 100%").
const (
	KVPenaltyFactor = 6.0
	KVPenaltyFrom   = 0.5
)

// Score is the load score vLLM's DP balancer gives an engine (one DP rank) for
// the next request (vllm/v1/engine/core_client.py,
// DPLBAsyncMPClient.get_core_engine_for_request, current main):
//
//	max(inflight, waiting + running) + waiting x 6 x max(0, kvUsage - 0.5)
//
// with the KV term only when waiting > 0. inflight is the API server's own
// count of requests sent to the engine and not yet finished, times the number of
// API servers (client_count; 1 for one server); waiting and running are request
// counts and kvUsage a fraction 0..1. The unit is requests; the lowest score
// wins.
func Score(inflight, waiting, running int, kvUsage float64) float64 {
	s := float64(max(inflight, waiting+running))
	if waiting > 0 {
		s += float64(waiting) * KVPenaltyFactor * max(0, kvUsage-KVPenaltyFrom)
	}
	return s
}
