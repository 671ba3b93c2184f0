// Package router is the pure routing core: it decides which replica (a vLLM server,
// or one data-parallel rank behind one endpoint) serves each request of a Claude
// Code-style conversation so that the conversation keeps its prefix cache. It does
// no I/O and links no net/http (internal/layout's test checks), so the HTTP proxy
// (router/routerhttp) and the virtual-time world (internal/run/virtual) run the same
// decisions.
//
// # Layers
//
//   - Balancer (balancer.go): one model's replica pool: the router's exact
//     in-flight count per replica (changed atomically with each decision), scraped
//     engine gauges with their age, health, and the SessionTable of session homes.
//     Acquire/Release are the whole contract; time from an injected clock.
//   - Policy (policy.go): Pick(now, request, replica states) -> Decision, selected
//     per model (`policy:`). WorkingSet (workingset.go, the default with affinity
//     on) places by the router's exact in-flight count then the live working set
//     and moves a conversation only for good; Sticky (sticky.go) is the reference
//     rule; SessionHash (sessionhash.go) the hash placement; ColdMove
//     (coldmove.go) WorkingSet plus moves of conversations a cache model calls
//     evicted; ShortestQueue (affinity off, shortestqueue.go) mimics vLLM's own DP
//     balancer, including its ~100 ms stale snapshots and rotating scan start, so
//     "off" is what vLLM does. docs/routing.md measures them.
//   - Thresholds (threshold.go): the Balancer-level overflow rules every policy
//     shares (VLLMDefaultMaxNumSeqs, AutoOverflowThreshold, SlotOverflowThreshold,
//     ParseThreshold); the prompt-size estimate from body bytes (estimate.go).
//   - SessionTable (sessions.go): key hash -> home replica, idle TTL, LRU bound,
//     counts of homed, active and live sessions per replica and the live sessions'
//     context tokens; O(1) amortized, no allocation on a hit.
//   - Keyless placement (prefix.go): PrefixIndex, the approximate map of prompt
//     prefixes (chained piece hashes, PrefixHashes) to the replicas sent them,
//     LRU-bounded by each replica's KV capacity; BalancerConfig.Keyless prefix
//     (the default) places a request without a session key on its longest match.
//   - Responses API continuations (responsehome.go): the replica that produced a
//     response id (LearnResponse) serves a request naming it in
//     previous_response_id (Facts.ResponseID), whatever its load.
//   - SharedState (shared.go): the interface to state shared with other routers
//     (homes claimed first write wins, every router's in-flight count and live
//     working set); BalancerConfig.Shared, nil in the virtual world. The Redis
//     implementation is router/redisstate; this package only calls it,
//     outside its lock for the calls that may wait.
//   - Admission (admission.go): with `admission: fit` a new conversation whose
//     expected working set fits no replica's KV cache waits in a FIFO queue at
//     the router before its first request (Balancer.Admit, ErrHold tickets);
//     docs/routing.md "Admission" measures it.
//
// One home per rule: the overflow threshold is held by the Balancer and handed to
// the policy in Request.Threshold (one parser: ParseThreshold); vLLM's DP balancer
// score lives in internal/vllmdp; replica names come from ReplicaName and
// RankName (names.go).
//
// Using it without HTTP (what internal/run/virtual does):
//
//	b, err := router.NewBalancer(router.BalancerConfig{
//		Replicas: []string{"r0", "r1"}, Affinity: true, MaxNumSeqs: 32, Now: clock.Now})
//	d, err := b.Acquire(router.Facts{SessionKey: key, PromptTokens: n})
//	// ... forward to replica d.Replica ...
//	b.Release(d.Replica)
//
// # Not here
//
// The proxy, config, session-key extraction, admin API, metrics, status card,
// health checks and scraping are router/routerhttp. The simulator (sim), the load
// generator (loadgen) and reports (report) are separate; this package imports none
// of them. Routing from the engines' own KV events (vLLM --kv-events-config) is not done:
// the prefix index models the caches from the outside.
package router
