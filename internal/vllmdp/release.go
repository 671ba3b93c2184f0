package vllmdp

import (
	"fmt"
	"time"
)

// Releases of vLLM's internal DP balancer that differ in a way the simulator
// models (docs/simulator.md section 11). The zero value "" is current main's
// rule with one API-server process (Rank.Score, rotating scan start), the
// simulator's default.
const (
	// ReleaseV024 is the rule before vllm-project/vllm#47420 (merged
	// 2026-07-06, first released in v0.25.0): score waiting x 4 + running,
	// and a scan that starts at the same rank for every decision of one
	// API-server process, eng_start_index = ranks x client_index /
	// client_count, so a tie goes to that rank.
	ReleaseV024 = "v0.24"
	// ReleaseV026 is v0.26.0 as its release notes and merge dates imply
	// (vllm-project/vllm#47420 in, vllm-project/vllm#49204 not yet): score waiting x 4 + running, and a
	// scan start that rotates by one after every decision of the process.
	ReleaseV026 = "v0.26"
	// ReleaseV026Dense is ReleaseV026 for a dense model with DP and no EP,
	// whose engines did not publish their queue counts between vllm-project/vllm#30739 and
	// vllm-project/vllm#49204 (vllm-project/vllm#49204's description): the coordinator's publications
	// carry no engine counts, so each process balances on what it sent since
	// the last publication alone. With no counts changing, the coordinator
	// publishes every IdlePublishInterval.
	ReleaseV026Dense = "v0.26-dense"
)

// LegacyWaitingWeight is the weight of a waiting request in the score of
// releases before vllm-project/vllm#49204: score = waiting x 4 + running
// (vllm/v1/engine/core_client.py, DPLBAsyncMPClient.get_core_engine_for_request,
// as the description of vllm-project/vllm#47420 and the code of that period
// have it).
const LegacyWaitingWeight = 4

// IdlePublishInterval is how often vLLM's DP coordinator publishes when no
// stats changed since its last publication (vllm/v1/engine/coordinator.py,
// process_input_socket: "every 4 seconds"); while they change it publishes
// after min_stats_update_interval_ms, 100 ms.
const IdlePublishInterval = 4 * time.Second

// Releases lists the release names ValidRelease accepts, "" (current main)
// first.
func Releases() []string { return []string{"", ReleaseV024, ReleaseV026, ReleaseV026Dense} }

// ValidRelease reports an error for a release name this package does not model.
func ValidRelease(r string) error {
	for _, k := range Releases() {
		if r == k {
			return nil
		}
	}
	return fmt.Errorf("vLLM balancer release %q is not modelled (have %q, %q, %q, or empty for current main)", r, ReleaseV024, ReleaseV026, ReleaseV026Dense)
}

// RotatesStart reports whether the release rotates each process's scan start
// after every decision (vllm-project/vllm#47420).
func RotatesStart(r string) bool { return r != ReleaseV024 }

// PublishesCounts reports whether the coordinator's publications carry the
// engines' waiting and running counts in this release.
func PublishesCounts(r string) bool { return r != ReleaseV026Dense }

// StartIndex is a process's initial scan start: eng_start_index =
// (ranks x client_index) // client_count (DPLBAsyncMPClient.__init__), so
// with as many processes as ranks process k starts at rank k.
func StartIndex(ranks, process, processes int) int {
	if processes <= 1 || ranks <= 0 {
		return 0
	}
	return ranks * process / processes
}

// LegacyScore is the score of releases before vllm-project/vllm#49204 for a rank whose last
// published counts are waiting and running, after this process sent it sent
// requests since that publication: each send adds client_count (processes)
// to the process's local copy of waiting (current_counts[eng_index][0] +=
// self.client_count), so score = (waiting + processes x sent) x 4 + running.
func LegacyScore(waiting, running, sent, processes int) int {
	return (waiting+max(processes, 1)*sent)*LegacyWaitingWeight + running
}
