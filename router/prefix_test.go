package router

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func tokens(n int, start uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)
	}
	return out
}

func TestPrefixHashesChain(t *testing.T) {
	a := PrefixHashes(nil, tokens(50, 0), 16, 0)
	if len(a) != 3 {
		t.Fatalf("50 tokens in pieces of 16: %d hashes, want 3 (the 2-token tail is not hashed)", len(a))
	}
	// An extension keeps the hashes of the shared prefix.
	b := PrefixHashes(nil, append(tokens(48, 0), tokens(40, 900)...), 16, 0)
	if !slices.Equal(a, b[:3]) {
		t.Errorf("extension changed the prefix hashes: %v vs %v", a, b[:3])
	}
	// Chained: the same second piece after a different first one hashes differently.
	c := PrefixHashes(nil, append(tokens(16, 500), tokens(48, 0)[16:]...), 16, 0)
	if c[1] == a[1] || c[2] == a[2] {
		t.Errorf("later pieces matched after a different first piece: %v vs %v", c, a)
	}
	if got := PrefixHashes(nil, tokens(200, 0), 16, 4); len(got) != 4 {
		t.Errorf("maxPieces 4: %d hashes", len(got))
	}
	if got := PrefixHashes(nil, []byte("abcdefgh"), 4, 0); len(got) != 2 || got[0] == got[1] {
		t.Errorf("bytes: %v", got)
	}
	body := []byte(strings.Repeat("0123456789abcdef", 20)) // 320 bytes
	x := PrefixHashesBytes(nil, body, 64, 0)
	y := PrefixHashesBytes(nil, append(append([]byte(nil), body[:128]...), []byte(strings.Repeat("z", 200))...), 64, 0)
	if len(x) != 5 || !slices.Equal(x[:2], y[:2]) || x[2] == y[2] {
		t.Errorf("PrefixHashesBytes: %v vs %v", x, y)
	}
	if got := PrefixHashesBytes(nil, body, 60, 0); !slices.Equal(got, PrefixHashes(nil, body, 60, 0)) {
		t.Errorf("piece 60 (not a multiple of 8) does not fall back to PrefixHashes")
	}
}

func TestPrefixIndexPick(t *testing.T) {
	long := PrefixHashes(nil, tokens(160, 0), 16, 0) // 10 pieces
	short := long[:4]
	healthy := func(inflight ...int) []ReplicaState {
		reps := make([]ReplicaState, len(inflight))
		for i, n := range inflight {
			reps[i] = ReplicaState{Healthy: true, InFlight: n}
		}
		return reps
	}
	tests := []struct {
		name      string
		reps      []ReplicaState
		threshold int
		want, n   int
	}{
		{name: "longest wins", reps: healthy(0, 0, 0), threshold: 8, want: 1, n: 10},
		// Replica 1 is over the threshold: the next longest match under it.
		// Replica 0 holds 4 of 10 pieces, under PrefixMinMatch: no pick.
		{name: "over threshold skipped", reps: healthy(0, 9, 0), threshold: 8, want: -1, n: 4},
		{name: "none under threshold", reps: healthy(9, 9, 9), threshold: 8, want: -1, n: 0},
		{name: "unhealthy skipped", reps: []ReplicaState{{Healthy: true}, {Healthy: false}, {Healthy: true}}, threshold: 8, want: -1, n: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := NewPrefixIndex(3, 16)
			x.Record(0, short, 0)
			x.Record(1, long, 0)
			got, n := x.Pick(tc.reps, long, tc.threshold)
			if got != tc.want || n != tc.n {
				t.Errorf("Pick = %d, %d pieces; want %d, %d", got, n, tc.want, tc.n)
			}
		})
	}
	// A tie on the match goes to fewer in flight.
	x := NewPrefixIndex(2, 16)
	x.Record(0, long[:6], 0)
	x.Record(1, long[:6], 0)
	if got, _ := x.Pick(healthy(3, 1), long, 8); got != 1 {
		t.Errorf("tie: Pick = %d, want the less loaded 1", got)
	}
}

// TestPrefixIndexBound: a replica holds at most its KV capacity in pieces, and the
// least recently sent prefix goes first, tail pieces before leading ones.
func TestPrefixIndexBound(t *testing.T) {
	x := NewPrefixIndex(1, 16)
	a := PrefixHashes(nil, tokens(160, 0), 16, 0)     // 10 pieces
	b := PrefixHashes(nil, tokens(160, 10000), 16, 0) // 10 other pieces
	const capacity = 15 * 16                          // 15 pieces
	x.Record(0, a, capacity)
	x.Record(0, b, capacity)
	if x.Len(0) != 15 {
		t.Fatalf("Len = %d, want the bound 15", x.Len(0))
	}
	if n := x.Match(0, b); n != 10 {
		t.Errorf("the latest prefix matches %d pieces, want all 10", n)
	}
	// a lost its 5 tail pieces, kept its head.
	if n := x.Match(0, a); n != 5 {
		t.Errorf("the older prefix matches %d pieces, want its first 5", n)
	}
}

// TestBalancerKeylessPrefix: with keyless prefix placement, requests without a key
// that extend one another's prompts go to the replica that accepted the earlier
// ones (RecordPrefix); keyed requests never take
// the prefix path; an over-threshold replica gives way to the shortest queue.
func TestBalancerKeylessPrefix(t *testing.T) {
	b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.Keyless = KeylessPrefix; c.OverflowThreshold = 2 })
	conv := tokens(64, 7)
	first, err := b.Acquire(Facts{Prefix: PrefixHashes(nil, conv, 16, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if first.Reason != ReasonNoKey {
		t.Errorf("first keyless request: reason %v, want no-key (nothing indexed yet)", first.Reason)
	}
	// Not accepted yet (no RecordPrefix): the decision alone indexes nothing.
	if d, _ := b.Acquire(Facts{Prefix: PrefixHashes(nil, conv, 16, 0)}); d.Reason != ReasonNoKey {
		t.Errorf("before the replica accepted the first: %+v, want no-key", d)
	} else {
		b.Release(d.Replica)
	}
	b.RecordPrefix(first.Replica, PrefixHashes(nil, conv, 16, 0))
	for turn := 1; turn <= 2; turn++ {
		conv = append(conv, tokens(32, uint32(1000*turn))...)
		d, err := b.Acquire(Facts{Prefix: PrefixHashes(nil, conv, 16, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Replica != first.Replica || d.Reason != ReasonPrefix {
			t.Errorf("turn %d: %+v, want replica %d by prefix", turn, d, first.Replica)
		}
		b.RecordPrefix(d.Replica, PrefixHashes(nil, conv, 16, 0))
	}
	// first.Replica now has 3 in flight > threshold 2: the next goes elsewhere.
	d, err := b.Acquire(Facts{Prefix: PrefixHashes(nil, conv, 16, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if d.Replica == first.Replica || d.Reason != ReasonNoKey {
		t.Errorf("over threshold: %+v, want another replica by shortest queue", d)
	}
	k, err := b.Acquire(Facts{SessionKey: "s1", Prefix: PrefixHashes(nil, conv, 16, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if k.Reason == ReasonPrefix {
		t.Errorf("keyed request placed by prefix: %+v", k)
	}
	if d, _ := newTestBalancer(t, 2, true, nil); !d.KeylessPrefix() {
		t.Error("the default keyless placement is not prefix")
	}
	if d, _ := newTestBalancer(t, 2, true, func(c *BalancerConfig) { c.Keyless = KeylessShortestQueue }); d.KeylessPrefix() {
		t.Error("keyless shortest-queue builds a prefix index")
	}
	if _, err := NewBalancer(BalancerConfig{Replicas: []string{"r0"}, Keyless: "radix", Now: func() time.Duration { return 0 }}); err == nil {
		t.Error("Keyless \"radix\" accepted")
	}
}

// BenchmarkPrefixHashesBytes: the proxy's cost per keyless request, a 40 KB body
// (a Codex CLI request's size) in 64-byte pieces.
func BenchmarkPrefixHashesBytes(b *testing.B) {
	body := []byte(strings.Repeat("a conversation of forty kilobytes ", 1200))[:40_000]
	dst := make([]uint64, 0, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		dst = PrefixHashesBytes(dst, body, 64, 0)
	}
}

// BenchmarkPrefixIndexPick: one keyless decision's index work on 8 replicas, each
// holding 4 conversations of 625 pieces, the request matching one of them.
func BenchmarkPrefixIndexPick(b *testing.B) {
	x := NewPrefixIndex(8, 16)
	var want []uint64
	for i := range 8 {
		for c := range 4 {
			p := PrefixHashes(nil, tokens(10_000, uint32(100_000*(4*i+c))), 16, 0)
			x.Record(i, p, 0)
			if i == 5 && c == 2 {
				want = p
			}
		}
	}
	reps := make([]ReplicaState, 8)
	for i := range reps {
		reps[i].Healthy = true
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := x.Pick(reps, want, 8); r != 5 {
			b.Fatal(r)
		}
		x.Record(5, want, 0)
	}
}
