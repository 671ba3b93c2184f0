// Package router routes Claude Code-style agent conversations across vLLM replicas
// (separate servers, or data-parallel ranks behind one endpoint) so that each
// conversation keeps its prefix cache, and serves the same routing decisions to the
// virtual-time world without any I/O.
//
// # Layers
//
//   - Balancer (balancer.go): one model's replica pool: the router's exact
//     in-flight count per replica (changed atomically with each decision), scraped
//     engine gauges with their age, health, and the SessionTable of session homes.
//     Acquire/Release are the whole contract; no I/O, time from an injected clock.
//     internal/virtual drives it directly.
//   - Policy (policy.go): Pick(now, request, replica states) -> Decision, selected
//     per model (`policy:`). WorkingSet (workingset.go, the default with affinity
//     on) places by the router's exact in-flight count then the live working set
//     and moves a conversation only for good; Sticky (sticky.go) is the reference
//     rule; SessionHash (sessionhash.go) the hash placement; ShortestQueue
//     (affinity off, shortestqueue.go) mimics vLLM's own DP balancer, including its
//     ~100 ms stale snapshots and rotating scan start, so "off" is what vLLM does.
//     docs/routing.md measures them.
//   - SessionTable (sessions.go): key hash -> home replica, idle TTL, LRU bound,
//     counts of homed, active and live sessions per replica and the live sessions'
//     context tokens; O(1) amortized, no allocation on a hit.
//   - ExtractKey (keys.go): model and session key from headers and a partly decoded
//     JSON body (X-Claude-Code-Session-Id, metadata.user_id, X-Session-ID, ...).
//   - Proxy (proxy.go): http.Handler on httputil.ReverseProxy: body limit, key
//     extraction, Acquire, forward with SSE flushed event by event, Release exactly
//     once, retry before the first byte, error shapes per API, status mapping
//     (StatusFor in errors.go).
//   - Router (router.go): Config (config.go, strict YAML) -> one Balancer per model,
//     the Proxy, the admin API (admin.go), Prometheus metrics (metrics.go) and the
//     background health checks and /metrics scrapes (Run).
//
// # Using it
//
// From a list of URLs (what `warden route --replica URL...` and the benchmark do):
//
//	rt, err := router.NewFromURLs([]string{"http://h:8001", "http://h:8002"},
//		true /* affinity */, 32 /* max_num_seqs */, clock /* nil: wall time */)
//	go rt.Run(ctx)                 // health checks + scrapes
//	http.ListenAndServe(addr, rt.Handler())
//	// or: rt.ListenAndServe(ctx, 10*time.Second) for both listeners
//
// Switching affinity at run time: rt.SetAffinity(model, on) ("" or "*" = every
// model), or over HTTP on the admin listener:
//
//	curl -X PUT -H 'Authorization: Bearer TOKEN' -d '{"enabled":false}' \
//	     http://127.0.0.1:8081/admin/models/*/affinity
//
// Every proxied response carries X-Warden-Replica (replica name: r0, r1, ... or a
// configured name; "<name>/rank<k>" for a DP rank) and X-Warden-Decision (sticky,
// placed, overflow, rehome, no-key, balanced).
//
// # Not here
//
// The simulator (package sim), the load generator (loadgen) and reports (report)
// are separate; this package imports none of them. Admission control, queueing in
// the router, prefix-aware (KV-event) routing and TLS termination are not done.
package router
