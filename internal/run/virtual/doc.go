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
// accounting, and the router's admission gate (a held turn asks again every
// HoldRetry). The network and vLLM's API-server processes are modelled when the
// scenario sets them (Scenario.RTT and RTTSpread: half an RTT each way;
// Scenario.APIServers: sim.Frontend); without them a turn reaches the engine the
// instant it is sent and its first token is seen the instant the engine emits it.
// What it leaves out is the processes' own CPU time (client, proxy, HTTP server),
// so TTFB here is a lower bound of the HTTP world's by that overhead.
//
// It does not own the policies, the engine or the workload: it only wires them.
package virtual
