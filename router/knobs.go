package router

import (
	"fmt"
	"strings"
	"time"
)

// setPolicy installs the named affinity-on policy (name valid; "" = default).
func (b *Balancer) setPolicy(name string) {
	if name == "" {
		name = DefaultAffinityPolicy
	}
	b.polName = name
	switch name {
	case PolicySticky:
		b.policy = b.sticky
	case PolicyShortestQueue:
		b.policy = b.sq
	case PolicySessionHash:
		b.policy = &SessionHash{NoKey: b.sq}
	case PolicyWorkingSet:
		b.policy = NewWorkingSet(b.margin, b.seed, b.sq)
	case PolicyColdMove:
		b.policy = NewColdMove(b.margin, b.seed, b.sq)
	}
}

// SetPolicy switches the affinity-on policy at run time (one of PolicyNames; ""
// means DefaultAffinityPolicy). Session homes are kept. Errors: unknown name.
func (b *Balancer) SetPolicy(name string) error {
	if !ValidPolicy(name) {
		return fmt.Errorf("setting policy: %q is unknown (have %s)", name, strings.Join(PolicyNames(), ", "))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setPolicy(name)
	return nil
}

// Policy returns the name of the policy used while affinity is on.
func (b *Balancer) Policy() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.polName
}

// SetAffinity switches session affinity at run time. Sessions homed before stay in
// the table (subject to the TTL); use ResetSessions to forget them.
func (b *Balancer) SetAffinity(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.affinity = on
}

// Affinity reports whether session affinity is on.
func (b *Balancer) Affinity() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.affinity
}

// SetOverflowThreshold sets the overflow threshold (in-flight requests); 0 means
// auto (AutoOverflowThreshold of the configured max_num_seqs). Negative values are
// treated as 0.
func (b *Balancer) SetOverflowThreshold(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.threshold = max(0, n)
}

// OverflowThreshold returns the threshold in force and whether it is auto.
func (b *Balancer) OverflowThreshold() (n int, auto bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.overflowThreshold(), b.threshold == 0
}

// ResetSessions forgets every session's home (e.g. between benchmark variants).
func (b *Balancer) ResetSessions() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions.Reset()
	b.adm.reset()
}

// LiveWindow returns the session table's live window in force (fixed by
// Config.LiveWindow or adaptive; see DefaultLiveWindow): the span of Live and
// LiveTokens.
func (b *Balancer) LiveWindow() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions.LiveWindow()
}

// Sessions returns the number of sessions in the table.
func (b *Balancer) Sessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions.Len()
}
