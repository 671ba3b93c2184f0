package router

import (
	"errors"
	"testing"
)

// The follow rule: a subagent's first call starts on its parent's home while
// that replica is under the overflow threshold, and then stays where it
// started under its own key; over the threshold the policy places it as any
// new conversation.
func TestParentStepFollowsUnderThreshold(t *testing.T) {
	b, _ := newTestBalancer(t, 4, true, func(c *BalancerConfig) { c.OverflowThreshold = 2 })
	parent := mustAcquire(t, b, "s1")
	sub, err := b.Acquire(Facts{SessionKey: "s1/agent/a1", ParentKey: "s1", FollowParent: true})
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
	sib, err := b.Acquire(Facts{SessionKey: "s1/agent/a2", ParentKey: "s1", FollowParent: true})
	if err != nil {
		t.Fatal(err)
	}
	if sib.Replica == parent.Replica || sib.Reason != ReasonPlaced {
		t.Errorf("sibling over the threshold %+v: want placed off replica %d", sib, parent.Replica)
	}
	// No parent known: an ordinary placement.
	if d, _ := b.Acquire(Facts{SessionKey: "s9/agent/a1", ParentKey: "s9", FollowParent: true}); d.Reason != ReasonPlaced {
		t.Errorf("subagent of an unknown parent: %+v, want placed", d)
	}
	if got := ReasonParent.String(); got != "parent" {
		t.Errorf("ReasonParent is %q", got)
	}
}

// A subagent (split key, ParentKey) of a tree whose parent is admitted is
// never held, where an unrelated new conversation of the same size is.
func TestAdmissionNeverHoldsASubagentOfAnAdmittedTree(t *testing.T) {
	b, _ := admitBalancer(t, 1, 10_000, AdmissionConfig{MaxHold: -1})
	if _, info, err := b.Admit(Facts{SessionKey: "p", PromptTokens: 6000}); err != nil || info.Admission != AdmitAdmitted {
		t.Fatalf("parent: %+v %v", info, err)
	}
	if _, _, err := b.Admit(Facts{SessionKey: "other", PromptTokens: 3000}); !errors.Is(err, ErrHold) {
		t.Fatalf("an unrelated conversation: %v, want ErrHold", err)
	}
	d, info, err := b.Admit(Facts{SessionKey: "p/agent/a1", ParentKey: "p", PromptTokens: 3000})
	if err != nil || info.Admission != AdmitPass || d.Replica != 0 {
		t.Fatalf("the subagent: %+v %+v %v, want passed", d, info, err)
	}
	// A subagent whose parent the router never saw is a new conversation.
	if _, _, err := b.Admit(Facts{SessionKey: "q/agent/a1", ParentKey: "q", PromptTokens: 3000}); !errors.Is(err, ErrHold) {
		t.Errorf("a subagent of an unknown parent: %v, want ErrHold", err)
	}
}
