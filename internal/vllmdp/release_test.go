package vllmdp

import "testing"

func TestStartIndex(t *testing.T) {
	for _, tc := range []struct{ ranks, proc, procs, want int }{
		{4, 0, 1, 0}, {4, 0, 4, 0}, {4, 1, 4, 1}, {4, 3, 4, 3}, // one process per rank
		{4, 1, 2, 2}, {4, 1, 3, 1}, {4, 2, 3, 2}, // (4 x k) // N
		{4, 0, 0, 0}, {0, 1, 2, 0},
	} {
		if got := StartIndex(tc.ranks, tc.proc, tc.procs); got != tc.want {
			t.Errorf("StartIndex(%d, %d, %d) = %d, want %d", tc.ranks, tc.proc, tc.procs, got, tc.want)
		}
	}
}

// Each send adds client_count to the process's copy of waiting, which weighs 4.
func TestLegacyScore(t *testing.T) {
	for _, tc := range []struct{ w, r, sent, procs, want int }{
		{0, 0, 0, 1, 0},
		{1, 2, 0, 1, 6},
		{0, 0, 1, 1, 4},
		{0, 0, 1, 4, 16},
		{2, 3, 1, 4, 27}, // (2 + 4) x 4 + 3
		{0, 0, 1, 0, 4},  // 0 processes counts as one
	} {
		if got := LegacyScore(tc.w, tc.r, tc.sent, tc.procs); got != tc.want {
			t.Errorf("LegacyScore(%d, %d, %d, %d) = %d, want %d", tc.w, tc.r, tc.sent, tc.procs, got, tc.want)
		}
	}
}

func TestValidRelease(t *testing.T) {
	for _, r := range Releases() {
		if err := ValidRelease(r); err != nil {
			t.Errorf("ValidRelease(%q) = %v", r, err)
		}
	}
	if ValidRelease("v0.99") == nil {
		t.Error("ValidRelease accepted an unknown release")
	}
	if RotatesStart(ReleaseV024) || !RotatesStart(ReleaseV026) || !RotatesStart(ReleaseV026Dense) {
		t.Error("only v0.24 keeps a fixed scan start")
	}
	if PublishesCounts(ReleaseV026Dense) || !PublishesCounts(ReleaseV026) {
		t.Error("only v0.26-dense publishes no counts")
	}
}
