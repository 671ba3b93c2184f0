// Package virtual runs the benchmark in virtual time: the harness's closed loop
// (loadgen.Loop and its sessions), the router's decisions (router.Balancer) and the
// simulated engines (sim.Engine) in one process, advanced by a discrete-event clock
// with no HTTP and no goroutines. A simulated hour takes seconds, and the same seed
// gives byte-identical results.
//
// What it reproduces of the HTTP world: the same prompts (the chat template renders
// the same token ids the simulator's HTTP front would), the same policy code with the
// same staleness (the balancer reads engine gauges at the router's scrape interval,
// and the shortest-queue policy its 100 ms snapshots), and the same stage rule and
// accounting. What it leaves out: network and client time (a turn is sent at its
// intended instant and its first token is seen the instant the engine emits it), so
// TTFB here is a lower bound of the HTTP world's by the proxy and client overhead.
//
// It does not own the policies, the engine or the workload: it only wires them.
package virtual
