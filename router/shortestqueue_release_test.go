package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/vllmdp"
)

func idleReplicas(n int) []ReplicaState {
	reps := make([]ReplicaState, n)
	for i := range reps {
		reps[i] = ReplicaState{Healthy: true, Fresh: true}
	}
	return reps
}

func picks(t *testing.T, q *ShortestQueue, now time.Duration, reps []ReplicaState, procs ...int) string {
	t.Helper()
	var got []int
	for _, p := range procs {
		d, err := q.Pick(now, Request{Process: p}, reps)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Replica)
	}
	return fmt.Sprint(got)
}

// Two API-server processes, each with its own scan start and its own count of
// what it sent, send two idle-cluster requests to ranks 0 and 2; one balancer
// (or the same requests through one process) sends them to 0 and 1.
func TestShortestQueuePerProcessBalancers(t *testing.T) {
	reps := idleReplicas(4)
	two := NewShortestQueue(time.Hour)
	two.Release, two.Processes = vllmdp.ReleaseV026, 2
	if got := picks(t, two, 0, reps, 0, 1); got != "[0 2]" {
		t.Errorf("two processes: %s, want [0 2]", got)
	}
	one := NewShortestQueue(time.Hour)
	one.Release, one.Processes = vllmdp.ReleaseV026, 1
	if got := picks(t, one, 0, reps, 0, 0); got != "[0 1]" {
		t.Errorf("one process: %s, want [0 1]", got)
	}
	main := NewShortestQueue(time.Hour)
	if got := picks(t, main, 0, reps, 0, 1); got != "[0 1]" {
		t.Errorf("current main, one balancer: %s, want [0 1]", got)
	}
	// Neither process sees the other's sends: with 4 processes on 4 idle ranks,
	// process k's first request goes to rank k, and a second request of process
	// 0 avoids only its own rank 0.
	four := NewShortestQueue(time.Hour)
	four.Release, four.Processes = vllmdp.ReleaseV026, 4
	if got := picks(t, four, 0, reps, 0, 1, 2, 3, 0); got != "[0 1 2 3 1]" {
		t.Errorf("four processes: %s, want [0 1 2 3 1]", got)
	}
}

// At every new snapshot of an idle cluster all ranks tie again: before
// vllm-project/vllm#47420 a process's tie goes to its own fixed start each
// time, after it the start has rotated.
func TestShortestQueueReleaseTieRule(t *testing.T) {
	reps := idleReplicas(4)
	run := func(release string) string {
		q := NewShortestQueue(100 * time.Millisecond)
		q.Release, q.Processes = release, 1
		var s string
		for k := range 4 {
			s += picks(t, q, time.Duration(k)*100*time.Millisecond, reps, 0)
		}
		return s
	}
	if got := run(vllmdp.ReleaseV024); got != "[0][0][0][0]" {
		t.Errorf("v0.24: %s, want every tie on rank 0", got)
	}
	if got := run(vllmdp.ReleaseV026); got != "[0][1][2][3]" {
		t.Errorf("v0.26: %s, want the tie to rotate", got)
	}
}

// The legacy score weighs waiting 4 and takes the snapshot's counts, except in
// the dense release, whose publications carry none.
func TestShortestQueueReleaseCounts(t *testing.T) {
	reps := idleReplicas(2)
	reps[0].Waiting, reps[0].Running = 0, 3 // score 3
	reps[1].Waiting, reps[1].Running = 1, 0 // score 4
	q := NewShortestQueue(time.Hour)
	q.Release = vllmdp.ReleaseV026
	q.start = 1 // unused by the release rule: the process's own start is rank 0
	if got := picks(t, q, 0, reps, 0); got != "[0]" {
		t.Errorf("v0.26: %s, want the lower legacy score (rank 0)", got)
	}
	reps[0].Running = 5 // 5 > 4
	q = NewShortestQueue(time.Hour)
	q.Release = vllmdp.ReleaseV026
	if got := picks(t, q, 0, reps, 0); got != "[1]" {
		t.Errorf("v0.26: %s, want rank 1", got)
	}
	q = NewShortestQueue(time.Hour)
	q.Release = vllmdp.ReleaseV026Dense
	if got := picks(t, q, 0, reps, 0, 0, 0); got != "[0 1 0]" {
		t.Errorf("v0.26-dense: %s, want the counts ignored (round robin of its own sends)", got)
	}
}

func TestBalancerConfigVLLMRelease(t *testing.T) {
	b, _ := newTestBalancer(t, 4, false, func(c *BalancerConfig) {
		c.VLLMRelease, c.APIServerProcesses = vllmdp.ReleaseV026Dense, 4
	})
	if b.sq.Release != vllmdp.ReleaseV026Dense || b.sq.Processes != 4 || b.sq.Interval != vllmdp.IdlePublishInterval {
		t.Errorf("shortest queue = release %q, %d processes, interval %s", b.sq.Release, b.sq.Processes, b.sq.Interval)
	}
	_, err := NewBalancer(BalancerConfig{Replicas: []string{"a"}, Now: func() time.Duration { return 0 }, Policy: PolicyShortestQueue, VLLMRelease: "v9"})
	if err == nil {
		t.Error("an unknown release was accepted")
	}
}
