package vllmdp

import "testing"

func TestScore(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rank
		want float64
	}{
		{"idle", Rank{}, 0},
		{"in flight above the snapshot", Rank{InFlight: 5, Waiting: 1, Running: 2}, 5},
		{"snapshot above in flight", Rank{InFlight: 1, Waiting: 2, Running: 4, KVUsage: 0.4}, 6}, // KV under 0.5: no penalty
		{"KV pressure", Rank{Waiting: 2, Running: 4, KVUsage: 0.75}, 6 + 2*6*0.25},
		{"full cache, nothing waiting", Rank{Running: 8, KVUsage: 1}, 8}, // the term needs a queue
		{"full cache, queue", Rank{Waiting: 4, Running: 8, KVUsage: 1}, 12 + 4*3},
	} {
		if got := tc.r.Score(); got != tc.want {
			t.Errorf("%s: Score = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A send raises the in-flight count and the snapshot's waiting count, so the
// KV term applies from the first send to a rank over half full.
func TestSentRaisesBothTerms(t *testing.T) {
	r := Rank{InFlight: 2, Running: 2, KVUsage: 0.75}
	if got := r.Score(); got != 2 {
		t.Fatalf("before: %v", got)
	}
	r.Sent()
	if r.InFlight != 3 || r.Waiting != 1 {
		t.Fatalf("after Sent: %+v", r)
	}
	if got, want := r.Score(), 3+1*6*0.25; got != want {
		t.Errorf("after Sent: Score = %v, want %v", got, want)
	}
}
