package router

import (
	"hash/fnv"
	"time"
)

// SharedState is the state a Balancer shares with the Balancers of other routers
// in front of the same replicas (`state: redis://...` in routerhttp; the
// implementation is router/redisstate, never this package, which does
// no I/O): each session's home with its idle TTL, and every router's in-flight
// count and live working set per replica. Replicas are named by index into the
// Balancer's replicas; the implementation maps them to keys that do not depend
// on the order of a config file (URL + DP rank).
//
// The Balancer calls Home, Refresh, Claim and Forget outside its lock (they may wait on
// the network, at most the implementation's timeout; each returns the wall time
// it waited, which AdmitWait reports) and the other methods under it (they must
// not block: counters and an atomically swapped snapshot). A method that cannot
// reach the store says so (ok false) and the Balancer decides from its local
// view alone: routing never fails because of the store, and an implementation
// that stops calling the store after its first failure (redisstate's circuit)
// adds at most one timeout to a request while the store hangs.
type SharedState interface {
	// Home returns the session's home as the store holds it (SharedHome.Token ""
	// when it holds none). ok is false when the store cannot answer now.
	Home(sessionKey string) (h SharedHome, wait time.Duration, ok bool)
	// Claim writes the session's home atomically, first write wins: when the
	// store holds no home or still holds expect (a Token from Home, "" none), it
	// homes the session on cands[0], or with pickLeast on the candidate with the
	// fewest requests in flight summed over every live router (ties: the earlier
	// in cands), with the session TTL, and returns it with adopted false; when it
	// holds another home (another router wrote first), it returns that home with
	// adopted true. Either way it counts one request of this router in flight
	// on the returned replica in the same atomic step (the caller then calls
	// Claimed, not Acquired). cands are replica indices, at least one. ok is
	// false when the store cannot answer, or returned a replica this Balancer
	// does not have; nothing is then counted.
	//
	// With res (a new conversation the admission gate admitted), the same step
	// reserves room for it: only the candidates whose union of counted working
	// sets (res.Own, the other live routers' published gates and the unexpired
	// reservations, each conversation once) has room for res.Expected are
	// candidates, and the reservation is kept until the admitting router's gate
	// publishes the conversation (at most the store's key TTL). With none left
	// it writes nothing and returns Full (the caller holds the conversation).
	// res.Force reserves without the check (admitted at a limit).
	//
	// weak writes a home placed while the store did not answer (a write-back
	// after an outage): Home reports it Weak, so a router that held another
	// home from before the outage replaces it (Claim with expect = its Token).
	Claim(sessionKey, expect string, cands []int, pickLeast, weak bool, res *Reservation) (c ClaimResult, wait time.Duration, ok bool)
	// Refresh reads the other routers' in-flight counts from the store now, so
	// that Remote gives them as they are rather than as of the last exchange.
	// The Balancer calls it before a decision that may move a conversation for
	// load (its home over the overflow threshold in the view): a request that
	// just ended on another router must not count as one in flight there. ok is
	// false when the store cannot answer (Remote keeps what it had).
	Refresh() (wait time.Duration, ok bool)
	// Forget deletes the session's home in the store if it still holds replica
	// i (compare-and-delete: a home another router wrote since stays), for
	// Balancer.Unplace: the next request through any router then places the
	// session afresh. ok is false when the store cannot answer (the home then
	// lasts its TTL and the next request adopts it).
	Forget(sessionKey string, i int) (wait time.Duration, ok bool)
	// Acquired and Released tell that this router sent one request to replica i,
	// or that one ended; the store publishes the change soon after (not on the
	// request's path). Claimed tells that a request counted by a successful
	// Claim was sent to i.
	Acquired(i int)
	Released(i int)
	Claimed(i int)
	// Remote returns what the other live routers report for replica i: their
	// in-flight requests summed, and the largest live working set any of them
	// sees (RemoteLoad). Zero when the store is unavailable.
	Remote(i int) RemoteLoad
	// RemoteAdmission returns what the other live routers' admission gates
	// count and hold (their Balancer.AdmissionShare, as last exchanged), and
	// the estimates every router learns together (S, the idle window); nil
	// when none publishes or the store is unavailable.
	RemoteAdmission() *RemoteAdmission
	// ObserveFirstTurn adds one true first turn's cached tokens to the shared
	// S samples; Began and Ended tell that a request of the conversation with
	// SessionID id was sent (side: a side request, whose gap says nothing) or
	// ended, so the gap from a conversation's last end to its next request is
	// measured whatever router served either. All three are published off the
	// request path (they must not block).
	ObserveFirstTurn(cachedTokens int)
	Began(id uint64, side bool)
	Ended(id uint64)
	// Drain returns replica i's drain mode as the store holds it (the last
	// read, with this router's own writes applied at once); the drain in
	// force on every router sharing the store. Called under the lock: it
	// must not block.
	Drain(i int) DrainMode
	// SetDrain writes replica i's drain mode to the store (DrainNone ends the
	// drain), outside the lock; Drain gives it at once. ok false: the store
	// did not answer now, and the write is made when it does.
	SetDrain(i int, m DrainMode) (wait time.Duration, ok bool)
}

// ClaimResult is what SharedState.Claim did.
type ClaimResult struct {
	// Replica: the session's home (index in this Balancer); Adopted: another
	// router wrote it first; Full: a reservation found no candidate with room
	// (nothing written, Replica -1).
	Replica int
	Adopted bool
	Full    bool
}

// Reservation is the room a Claim reserves for a new conversation, or one a
// policy moves (admission.go's rule, evaluated in the store over every
// router's gate).
type Reservation struct {
	ID     uint64 // SessionID
	Tokens int64  // its context estimate now (a new one's first prompt), tokens
	First  int64  // the first context its gate saw (the prior's base), tokens
	// Expected is its growth target G (a new one's: the learned quantile or
	// its prior; a move's: M or its prior), Shared S and Running M (0 until
	// learned), tokens. On candidate k it is counted at max(Tokens,
	// min(Expected, Fit[k])), every other conversation at its P there (the
	// rule in admission.go, from its context, first context, S and M); the
	// reservation is kept with Tokens and First, counted like the others.
	Expected, Shared, Running int64
	// Fit[k] is cands[k]'s KVCapacityTokens x FillTarget, tokens.
	Fit []int64
	// Own: this gate's counted conversations (without this one).
	Own []SharedConv
	// Force: reserve without the check (AdmitLimit).
	Force bool
}

// RemoteAdmission is the other routers' admission gates (SharedState.RemoteAdmission).
type RemoteAdmission struct {
	// Convs: the conversations their gates count, by SessionID; a conversation
	// more than one counts appears once (the largest size).
	Convs map[uint64]RemoteConv
	// Waiting: their waiters, summed; OldestHeld: the longest any has waited.
	Waiting    int
	OldestHeld time.Duration
	// SharedPrefix is S learned from every router's true first turns
	// (ObserveFirstTurn; the median of the last prefixSamples), PrefixSamples
	// how many there are (S is used from MinSharedPrefixSamples).
	SharedPrefix  int64
	PrefixSamples int
	// GapP90 is the 90th percentile of the last idleSamples end-to-next-request
	// gaps of every conversation whatever router served it (Began, Ended), on
	// the Balancer's clock; GapSamples how many there are (used from
	// minIdleGaps).
	GapP90     time.Duration
	GapSamples int
}

// RemoteConv is one conversation another router's gate counts: its replica
// (index in this Balancer), its context estimate and the first context that
// gate saw of it, in tokens (more than one gate: the largest context, the
// smallest first; First 0 unknown).
type RemoteConv struct {
	Replica int
	Tokens  int64
	First   int64
}

// AdmissionShare is what this router's gate publishes for the others
// (Balancer.AdmissionShare): the conversations it counts and its queue.
type AdmissionShare struct {
	On         bool // the gate is on (nothing to publish otherwise)
	Convs      []SharedConv
	Waiting    int
	OldestHeld time.Duration
}

// SharedConv is one counted conversation: SessionID, replica index, context
// estimate and the first context its gate saw (the prior's base), in tokens:
// what every router and the store count its expected peak P from.
type SharedConv struct {
	ID      uint64
	Replica int
	Tokens  int64
	First   int64
}

// SessionID is a session key's id as every router computes it (FNV-1a, 64 bits;
// the session table's own hash is seeded per process), so admission gates can
// tell a conversation they both count from two.
func SessionID(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// SharedHome is a session's home as a SharedState holds it.
type SharedHome struct {
	// Replica is the home's index in this Balancer, -1 when the store holds no
	// home or one on a replica this Balancer does not have.
	Replica int
	// Token is the store's value for the home ("" none), given back to Claim as
	// the home a move expects to replace.
	Token string
	// Weak: the home was written by a router that placed it while the store did
	// not answer (Claim's weak).
	Weak bool
}

// RemoteLoad is the load other routers report for one replica (SharedState.Remote).
type RemoteLoad struct {
	// InFlight: requests the other routers have in flight on the replica, summed.
	InFlight int
	// Live and LiveTokens: the largest live-conversation count and live working
	// set in tokens that any other router's session table holds for the replica.
	// The largest, not the sum: routers behind a balancer that spreads turns see
	// the same conversations, and a sum would count each once per router; with
	// conversations pinned to one router it underestimates, as one router's own
	// view does today.
	Live       int
	LiveTokens int64
}

// LiveSet is one replica's live working set in this Balancer's session table
// (Balancer.LiveSets): what a SharedState publishes for the other routers.
type LiveSet struct {
	Live       int
	LiveTokens int64
}
