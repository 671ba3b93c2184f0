package router

import (
	"slices"
	"testing"
)

func TestReplicaNames(t *testing.T) {
	if got := UpstreamNames("", 2, 0); !slices.Equal(got, []string{"r2"}) {
		t.Errorf("unnamed, no ranks: %v", got)
	}
	if got := UpstreamNames("gpu", 0, 2); !slices.Equal(got, []string{"gpu/rank0", "gpu/rank1"}) {
		t.Errorf("named, 2 ranks: %v", got)
	}
	for _, tc := range []struct {
		in, base string
		ranked   bool
	}{
		{"r0/rank1", "r0", true},
		{"r0", "r0", false},
		{"a/rankx", "a/rankx", false}, // not a rank number
	} {
		if base, ranked := RankBase(tc.in); base != tc.base || ranked != tc.ranked {
			t.Errorf("RankBase(%q) = %q, %v; want %q, %v", tc.in, base, ranked, tc.base, tc.ranked)
		}
	}
}
