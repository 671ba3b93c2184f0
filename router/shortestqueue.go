package router

import (
	"time"

	"github.com/lmwarden/warden/internal/vllmdp"
)

// DefaultSnapshotInterval is how often ShortestQueue refreshes its view of replica
// load: vLLM's DP coordinator (vllm/v1/engine/coordinator.py) publishes engine load
// snapshots to the API server about every 100 ms when they change
// (min_stats_update_interval_ms).
const DefaultSnapshotInterval = 100 * time.Millisecond

// ShortestQueue is the "affinity off" policy: it mimics the load balancer vLLM runs in
// front of its own data-parallel ranks (vllm/v1/engine/core_client.py,
// DPLBAsyncMPClient.get_core_engine_for_request, current main), so that "off" is the
// behaviour a user gets from vLLM itself.
//
// The score of replica i is vllmdp.Rank.Score:
//
//	score_i = max(inflight_i, waiting_i + running_i)
//	        + waiting_i * 6 * max(0, kv_i - 0.5)      (only when waiting_i > 0)
//
// where inflight_i (the router's in-flight count), waiting_i, running_i and kv_i come
// from a snapshot taken at most once per Interval, and every request this policy
// sends to i until the next snapshot adds one to both inflight_i and waiting_i
// (vllmdp.Rank.Sent: vLLM's own in-flight count and its optimistic +1 on waiting
// between stats updates). Scraped gauges enter the snapshot only when fresh; stale
// ones count as zero, so the score falls back to the router's own counts. The lowest
// score wins (the first one met on a tie); the scan starts at a position that rotates
// by one after every decision, so ties spread out and consecutive turns of one
// conversation scatter over the replicas as they do behind vLLM.
//
// Snapshots are aligned to a grid of Interval: a snapshot "taken at" k*Interval holds
// the state as it was at that instant. The Balancer calls Sync before every change of
// state, so the state it sees at the first call after a grid point is exactly the
// state at that point (state only changes at events). Working from such a snapshot,
// not exact instant counts, matters: exact counts send a conversation's next turn to
// the replica that just finished its previous one, which looks like affinity and
// flatters "off" (TestShortestQueueWorksFromSnapshotNotInstantCounts).
//
// The zero value is not usable; use NewShortestQueue.
type ShortestQueue struct {
	// Interval between snapshots (simulated time). Zero or less means every event
	// sees an exact snapshot.
	Interval time.Duration

	// Release selects an older vLLM release's rule (vllmdp.ReleaseV024,
	// ReleaseV026, ReleaseV026Dense) with one balancer per API-server process
	// (Processes, Request.Process); "" is current main's rule with one
	// balancer, as described above. Set before the first Pick.
	Release string
	// Processes is the number of vLLM API-server processes when Release is
	// set, each with its own scan start (vllmdp.StartIndex) and its own count
	// of what it sent since the last snapshot; 0 or 1 is one process.
	Processes int

	epoch int64         // grid index of the current snapshot; -1 before the first
	snap  []vllmdp.Rank // the snapshot, plus what was sent since
	start int           // scan start; rotates by one after every decision

	procs     []sqProcess // per API-server process, when Release is set
	procEpoch int64       // snapshot the procs' sent counts are relative to
}

// sqProcess is one API-server process's own balancer state under an older
// release's rule: its scan start and what it sent to each replica since the
// last snapshot (its local increments of lb_engines' waiting counts).
type sqProcess struct {
	start int
	sent  []int
}

// NewShortestQueue returns a ShortestQueue with the given snapshot interval
// (0 means DefaultSnapshotInterval).
func NewShortestQueue(interval time.Duration) *ShortestQueue {
	if interval == 0 {
		interval = DefaultSnapshotInterval
	}
	return &ShortestQueue{Interval: interval, epoch: -1}
}

// NeedsSync reports whether a new snapshot is due at now (a grid point has passed
// since the last one, or there is none yet).
func (q *ShortestQueue) NeedsSync(now time.Duration, n int) bool {
	return q.epoch < 0 || len(q.snap) != n || q.Interval <= 0 || q.epochOf(now) != q.epoch
}

func (q *ShortestQueue) epochOf(now time.Duration) int64 {
	if q.Interval <= 0 {
		return int64(now)
	}
	return int64(now / q.Interval)
}

// Sync takes a new snapshot from reps when one is due at now, which drops what was
// sent since the last one. reps must describe the state as it has been since the
// last change (the caller syncs before changing it).
func (q *ShortestQueue) Sync(now time.Duration, reps []ReplicaState) {
	if !q.NeedsSync(now, len(reps)) {
		return
	}
	q.epoch = q.epochOf(now)
	if len(q.snap) != len(reps) {
		q.snap = make([]vllmdp.Rank, len(reps))
		if q.start >= len(reps) {
			q.start = 0
		}
	}
	for i := range reps {
		r := &reps[i]
		s := vllmdp.Rank{InFlight: r.InFlight}
		if r.Fresh {
			s.Waiting, s.Running, s.KVUsage = r.Waiting, r.Running, r.KVUsage
		}
		q.snap[i] = s
	}
}

// Score returns replica i's current score (see the type's doc). It is valid after
// Sync.
func (q *ShortestQueue) Score(i int) float64 {
	return q.snap[i].Score()
}

// Pick chooses the healthy replica with the lowest score, counts one request sent to
// it, and rotates the scan start. req is ignored: shortest-queue has no affinity.
// Reason is ReasonBalanced.
func (q *ShortestQueue) Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	if q.Release != "" {
		return q.pickRelease(now, req, reps)
	}
	q.Sync(now, reps)
	n := len(reps)
	if n == 0 {
		return Decision{}, ErrNoReplica
	}
	best, bestScore := -1, 0.0
	for k := 0; k < n; k++ {
		i := q.start + k
		if i >= n {
			i -= n
		}
		if !reps[i].Healthy {
			continue
		}
		if s := q.Score(i); best < 0 || s < bestScore {
			best, bestScore = i, s
		}
	}
	q.start++
	if q.start >= n {
		q.start = 0
	}
	if best < 0 {
		return Decision{}, ErrNoReplica
	}
	q.snap[best].Sent()
	return Decision{Replica: best, Reason: ReasonBalanced}, nil
}

// pickRelease is Pick under an older release's rule (Release): the process
// req.Process (clamped to the processes) scans from its own start, scores
// each healthy replica with vllmdp.LegacyScore from the snapshot's waiting
// and running counts (none when the release publishes none) and its own sends
// since the snapshot, keeps the first strictly lowest, counts the send, and
// rotates its start when the release does. A new snapshot clears every
// process's sends, as a coordinator publication replaces each client's
// lb_engines.
func (q *ShortestQueue) pickRelease(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	q.Sync(now, reps)
	n := len(reps)
	if n == 0 {
		return Decision{}, ErrNoReplica
	}
	procs := max(q.Processes, 1)
	if len(q.procs) != procs || len(q.procs[0].sent) != n {
		q.procs = make([]sqProcess, procs)
		for k := range q.procs {
			q.procs[k] = sqProcess{start: vllmdp.StartIndex(n, k, procs), sent: make([]int, n)}
		}
		q.procEpoch = q.epoch
	}
	if q.procEpoch != q.epoch {
		for k := range q.procs {
			clear(q.procs[k].sent)
		}
		q.procEpoch = q.epoch
	}
	p := &q.procs[min(max(req.Process, 0), procs-1)]
	counts := vllmdp.PublishesCounts(q.Release)
	best, bestScore := -1, 0
	for k := 0; k < n; k++ {
		i := (p.start + k) % n
		if !reps[i].Healthy {
			continue
		}
		w, r := 0, 0
		if counts {
			w, r = q.snap[i].Waiting, q.snap[i].Running
		}
		if s := vllmdp.LegacyScore(w, r, p.sent[i], procs); best < 0 || s < bestScore {
			best, bestScore = i, s
		}
	}
	if vllmdp.RotatesStart(q.Release) {
		p.start = (p.start + 1) % n
	}
	if best < 0 {
		return Decision{}, ErrNoReplica
	}
	p.sent[best]++
	return Decision{Replica: best, Reason: ReasonBalanced}, nil
}
