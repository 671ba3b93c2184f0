package router

import (
	"hash/fnv"
	"time"
)

// SessionHash places a conversation by a hash of its session key: replica
// FNV-1a-64(key) mod n, the placement of the reference router's earlier version
// (docs/measurements.md, "The reference measurement"). It is stable (the same key always maps
// to the same replica while the replica count is unchanged, across router
// restarts) and blind to load: it is kept as a baseline, not as a recommendation.
//
//   - No session key: shortest-queue placement by NoKey (ReasonNoKey).
//   - The hashed replica healthy: it (ReasonSticky when it is already the session's
//     home, else ReasonPlaced).
//   - The hashed replica unhealthy: the next healthy replica in index order
//     (ReasonRehome when the session had another home, else ReasonPlaced).
//
// Adding a replica changes n and so remaps most sessions, the defect of hash
// placement that docs/router.md failure case 8 names; the Balancer's session table does
// not protect against it here because the hash, not the table, decides.
type SessionHash struct {
	NoKey *ShortestQueue // placement of keyless requests; required
}

// HashReplica returns the replica index key hashes to among n replicas (n > 0).
func HashReplica(key string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(n))
}

// Pick applies the rules above. It returns ErrNoReplica when no replica is healthy.
func (p *SessionHash) Pick(now time.Duration, req Request, reps []ReplicaState) (Decision, error) {
	if req.Key == "" {
		d, err := p.NoKey.Pick(now, req, reps)
		d.Reason = ReasonNoKey
		return d, err
	}
	n := len(reps)
	if n == 0 {
		return Decision{}, ErrNoReplica
	}
	start := HashReplica(req.Key, n)
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if !reps[i].Healthy {
			continue
		}
		switch {
		case i == req.Home:
			return Decision{Replica: i, Reason: ReasonSticky}, nil
		case req.Home >= 0:
			return Decision{Replica: i, Reason: ReasonRehome}, nil
		}
		return Decision{Replica: i, Reason: ReasonPlaced}, nil
	}
	return Decision{}, ErrNoReplica
}
