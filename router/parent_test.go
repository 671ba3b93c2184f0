package router

import "testing"

// The follow rule: a subagent's first call starts on its parent's home while
// that replica is under the overflow threshold, and then stays where it
// started under its own key; over the threshold the policy places it as any
// new conversation.
func TestParentStepFollowsUnderThreshold(t *testing.T) {
	b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.OverflowThreshold = 2 })
	parent := mustAcquire(t, b, "s1")
	sub, err := b.Acquire(Facts{SessionKey: "s1/agent/a1", ParentKey: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Replica != parent.Replica || sub.Reason != ReasonParent {
		t.Fatalf("subagent %+v, parent on %d: want the parent's replica, reason parent", sub, parent.Replica)
	}
	again := mustAcquire(t, b, "s1/agent/a1")
	if again.Replica != parent.Replica || again.Reason != ReasonSticky {
		t.Errorf("subagent's next call %+v: want sticky on %d", again, parent.Replica)
	}
	// The parent's replica now has 3 requests in flight (> 2): a second
	// subagent is placed by the policy, elsewhere.
	sib, err := b.Acquire(Facts{SessionKey: "s1/agent/a2", ParentKey: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if sib.Replica == parent.Replica || sib.Reason != ReasonPlaced {
		t.Errorf("sibling over the threshold %+v: want placed off replica %d", sib, parent.Replica)
	}
	// No parent known: an ordinary placement.
	if d, _ := b.Acquire(Facts{SessionKey: "s9/agent/a1", ParentKey: "s9"}); d.Reason != ReasonPlaced {
		t.Errorf("subagent of an unknown parent: %+v, want placed", d)
	}
	if got := ReasonParent.String(); got != "parent" {
		t.Errorf("ReasonParent is %q", got)
	}
}
