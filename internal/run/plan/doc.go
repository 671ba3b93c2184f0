// Package plan answers "how many agent sessions does this fleet serve under an
// SLO, with each routing policy?" by searching the virtual-time world
// (internal/run/virtual): galloping then bisection over session counts (or, the
// inverse, replica counts), several seeds per point, each point judged on the
// seeds' mean with report.ThresholdDelta's noise verdict. It owns the SLO terms
// and the one definition of goodput the planner uses (Goodput), reading a
// fleet's figures from a simulator profile or from real vLLM servers (/metrics
// cache_config_info, /v1/models), the KV-fit rule of thumb, and the answer's
// table, CSV and PNG. Verify runs a knee again over HTTP through internal/run/bench.
// It owns no policy, engine or workload: it configures and reads them.
// docs/planning.md describes the method and a worked example.
package plan
