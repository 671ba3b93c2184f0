// Package routerhttp is the router's HTTP shell around the pure core in package
// router: `warden route` is a Router from this package.
//
//   - ExtractKey (keys.go): model and session key from headers and a partly decoded
//     JSON body (X-Claude-Code-Session-Id, metadata.user_id, X-Session-ID, ...),
//     read by the JSON scanner of jsonscan.go.
//   - Proxy (proxy.go): http.Handler on httputil.ReverseProxy: per-model pools
//     (pool.go), body limit and read timeout (body.go), key extraction,
//     Balancer.Acquire and Release exactly once (call.go), forward with SSE
//     flushed event by event (forward.go), retry before the first byte
//     (retry.go), the upstream transport (transport.go), the router's own
//     /health, /ready and /v1/models (endpoints.go), error shapes per API, status
//     mapping (StatusFor in errors.go), usage read from responses (usage.go)
//     and fed back to the policy.
//   - Router (router.go): Config (config.go, strict YAML) -> one router.Balancer per
//     model, the Proxy, the admin API (admin.go), Status (status.go),
//     Prometheus metrics (metrics.go), the status card (status_page.go,
//     card_window.go), the DP pinning check (dppin.go) and the background
//     health checks (health.go) and /metrics scrapes (scrape.go, internal/scrape)
//     started by Run; the two listeners and the shutdown in order: /ready,
//     drain_delay, drain_timeout (listen.go, drain.go).
//   - Shared state (state.go, `state: redis://...`): router/redisstate, the Redis store of
//     router.SharedState shared by several routers (docs/router.md §13), its
//     heartbeat run by Run, its warden_state_* metrics and the X-Warden-State-Ms
//     header (how long each request waited on it).
//
// From a list of URLs (what `warden route --replica URL...` and the benchmark do):
//
//	rt, err := routerhttp.NewFromURLs([]string{"http://h:8001", "http://h:8002"},
//		true /* affinity */, 32 /* max_num_seqs */, clock /* nil: wall time */)
//	go rt.Run(ctx)                 // health checks + scrapes
//	http.ListenAndServe(addr, rt.Handler())
//	// or: rt.ListenAndServe(ctx) for both listeners, with the ordered shutdown (drain.go)
//
// Switching affinity at run time: rt.SetAffinity(model, on) ("" or "*" = every
// model), or over HTTP on the admin listener:
//
//	curl -X PUT -H 'Authorization: Bearer TOKEN' -d '{"enabled":false}' \
//	     http://127.0.0.1:8081/admin/models/*/affinity
//
// Every proxied response carries X-Warden-Replica (replica name: r0, r1, ... or a
// configured name; "<name>/rank<k>" for a DP rank) and X-Warden-Decision, why
// that replica: one value per router.Reason, in router.Reasons order
// (TestDocListsEveryDecision checks this list against them):
//
//   - sticky: the session's home, under the overflow threshold
//   - placed: a new session placed on the least-loaded replica
//   - overflow: the home over the threshold; served elsewhere this once
//   - rehome: the home unhealthy or gone; the session moved for good
//   - no-key: no session key; shortest-queue placement
//   - balanced: affinity off; vLLM-style shortest queue
//   - moved: the home over the threshold; the conversation moved for good to a
//     clearly less loaded replica (working-set)
//   - prefix: no session key; the replica sent the longest part of the prompt's
//     prefix (keyless: prefix)
//   - response: a Responses API continuation (previous_response_id) on the
//     replica that produced the response
//   - parent: a subagent's first call on its parent's home (follow_subagents)
//   - drain-move: the home drains in move mode; the conversation moved for good
//     and its next prefill is cold (docs/router.md, "Draining a replica")
package routerhttp
