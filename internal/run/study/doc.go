// Package study is the routing-policy research harness behind `warden study` and
// docs/routing.md. It runs the virtual-time world (internal/run/virtual) over a matrix
// of setups (workload + fleet), arms (a routing policy, or a reference such as an
// unlimited prefix cache) and seeds, and reduces every run to per-stage figures:
// the report package's stage summaries (TTFB p50/p95, output tokens/min, replicas
// busy, prefix hits from the counters and from per-request usage) plus what the
// research needs on top of them:
//
//   - ground-truth traces per replica over time (trace.go): live conversations and
//     the context they hold (their working set, in tokens), requests in flight,
//     engine waiting queue, KV usage and preemptions, and the live conversations
//     per replica at every placement, drawn as PNGs with gonum/plot;
//   - the unlimited-cache bound of the prefix hit rate, computed from the turns
//     themselves (bound.go);
//   - what each placement input said at each placement, against the truth
//     (signals.go).
//
// Setups (setups.go) are named workloads on named fleets; arms (arms.go) are the
// router's policies, variants that change one placement input at a time (the
// reproduction), and overload experiments that were measured and not adopted
// (experiments.go). Acceptance (acceptance.go) checks the new policy against the
// better baseline per stage within the seeds' noise.
//
// It owns no production policy (those live in package router) and no engine or
// workload: it only configures and reads them. Results are small files: CSV,
// Markdown, PNG.
package study
