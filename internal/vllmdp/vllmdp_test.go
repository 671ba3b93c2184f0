package vllmdp

import "testing"

func TestScore(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		inflight, waiting, running int
		kv                         float64
		want                       float64
	}{
		{"idle", 0, 0, 0, 0, 0},
		{"in flight above the snapshot", 5, 1, 2, 0, 5},
		{"snapshot above in flight", 1, 2, 4, 0.4, 6},    // KV under 0.5: no penalty
		{"KV pressure", 0, 2, 4, 0.75, 6 + 2*6*0.25},     // 6 + 3
		{"full cache, nothing waiting", 0, 0, 8, 1.0, 8}, // the term needs a queue
		{"full cache, queue", 0, 4, 8, 1.0, 12 + 4*3},
	} {
		if got := Score(tc.inflight, tc.waiting, tc.running, tc.kv); got != tc.want {
			t.Errorf("%s: Score = %v, want %v", tc.name, got, tc.want)
		}
	}
}
