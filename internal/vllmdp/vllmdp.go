// Package vllmdp is vLLM's internal data-parallel load balancer rule, defined
// once for the router's "affinity off" policy (router.ShortestQueue), the
// study's score-based diagnostics (router.VLLMScore) and the simulator's DP
// front (sim/simhttp): the score and the optimistic bookkeeping between two
// snapshots. When a snapshot is taken, and of what, stays with each balancer.
// Pure: no I/O.
//
// Source: vllm/v1/engine/core_client.py, DPLBAsyncMPClient.
// get_core_engine_for_request (current main).
package vllmdp

// The KV-pressure term's constants: waiting x KVPenaltyFactor x max(0, kv_usage -
// KVPenaltyFrom), "from 0 at <=50% usage to 3x waiting at 100%".
const (
	KVPenaltyFactor = 6.0
	KVPenaltyFrom   = 0.5
)

// Rank is one engine (DP rank) as vLLM's balancer scores it between two
// snapshots of the DP coordinator (published about every 100 ms).
type Rank struct {
	// InFlight is the API server's own count of requests sent to the rank and
	// not yet finished (engine_inflight; one API server, so client_count 1).
	InFlight int
	// Waiting, Running (requests) and KVUsage (fraction 0..1) are the last
	// snapshot's (lb_engines), Waiting raised by Sent since.
	Waiting, Running int
	KVUsage          float64
}

// Score is the rank's load score for the next request:
//
//	max(InFlight, Waiting + Running) + Waiting x 6 x max(0, KVUsage - 0.5)
//
// with the KV term only when Waiting > 0. The unit is requests; the lowest
// score wins.
func (r Rank) Score() float64 {
	s := float64(max(r.InFlight, r.Waiting+r.Running))
	if r.Waiting > 0 {
		s += float64(r.Waiting) * KVPenaltyFactor * max(0, r.KVUsage-KVPenaltyFrom)
	}
	return s
}

// Sent records one request sent to the rank, as vLLM does: its own in-flight
// count rises by one (engine_inflight[chosen] += 1) and, optimistically until
// the next snapshot, so does the snapshot's waiting count
// (current_counts[eng_index][0] += client_count). A send thus raises both
// terms of Score, and the KV term applies from the first request sent to a
// rank over half full.
func (r *Rank) Sent() {
	r.InFlight++
	r.Waiting++
}
