package router

import (
	"errors"
	"testing"
	"time"
)

// One replica of 20,000 tokens, key kept (no split): a conversation of 6,000
// tokens and its subagent of 8,000 are counted as a tree, 14,000 tokens, so a
// second conversation of 6,000 (prior peak 12,000, capped at half the
// replica) waits. Before trees were counted the subagent's calls were side
// requests of the session and the tree counted as 6,000 tokens alone.
func TestAdmissionCountsTheSubagentsOfATree(t *testing.T) {
	b, now := admitBalancer(t, 1, 20_000, AdmissionConfig{MaxHold: -1})
	if _, info, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 6000, Tools: true}); err != nil || info.Admission != AdmitAdmitted {
		t.Fatalf("a: %+v %v", info, err)
	}
	b.ReleaseSession(0, "a")
	*now += time.Second
	sub := Facts{SessionKey: "a", Agent: "explore-1", PromptTokens: 8000, Tools: true}
	if _, info, err := b.Admit(sub); err != nil || info.Admission != AdmitPass {
		t.Fatalf("subagent: %+v %v", info, err)
	}
	st := b.Admission()
	if st.Counted[0] != 2 || st.WorkingTokens[0] < 6000+8000 {
		t.Fatalf("tree counted as %d conversations, %d tokens; want 2 and >= 14,000", st.Counted[0], st.WorkingTokens[0])
	}
	if _, _, err := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000}); !errors.Is(err, ErrHold) {
		t.Fatalf("b: %v, want ErrHold while the subagent runs", err)
	}
	b.ReleaseConv(0, sub.Conv())
	if st := b.Admission(); st.Counted[0] != 2 {
		t.Fatalf("just after the subagent ended: %d counted, want 2 (its idle window)", st.Counted[0])
	}
}

// The parent waits for its subagent (the join): it stays counted while the
// subagent runs although its own idle window has passed, and stops counting
// one idle window after the subagent's last request. A subagent's end adds
// nothing to the ended peaks the gate learns from.
func TestAdmissionKeepsTheParentCountedUntilItsSubagentsEnd(t *testing.T) {
	b, now := admitBalancer(t, 1, 100_000, AdmissionConfig{MaxHold: -1})
	b.Admit(Facts{SessionKey: "a", PromptTokens: 6000, Tools: true})
	b.ReleaseSession(0, "a")
	sub := Facts{SessionKey: "a", Agent: "x", PromptTokens: 3000, Tools: true}
	b.Admit(sub)
	win := time.Duration(b.Admission().IdleWindowS * float64(time.Second))
	*now += 3 * win
	if st := b.Admission(); st.Counted[0] != 2 {
		t.Fatalf("parent and running subagent: %d counted, want 2", st.Counted[0])
	}
	b.ReleaseConv(0, sub.Conv())
	*now += win / 2
	if st := b.Admission(); st.Counted[0] != 2 {
		t.Fatalf("half an idle window after the join: %d counted, want 2", st.Counted[0])
	}
	*now += win
	st := b.Admission()
	if st.Counted[0] != 0 {
		t.Fatalf("an idle window after the join: %d counted, want 0", st.Counted[0])
	}
	// Past the live window the parent has ended; the subagent never is a sample.
	*now += 2 * win
	if st := b.Admission(); st.EndedTotal > 1 {
		t.Fatalf("ended %d, want at most the parent (a subagent is no sample)", st.EndedTotal)
	}
}

// With the key split (split_subagents) the subagent has a key of its own and
// names its parent: the same tree is counted.
func TestAdmissionCountsASplitSubagentAsAChild(t *testing.T) {
	b, _ := admitBalancer(t, 1, 20_000, AdmissionConfig{MaxHold: -1})
	b.Admit(Facts{SessionKey: "a", PromptTokens: 6000})
	sub := Facts{SessionKey: "a/agent/x", ParentKey: "a", Agent: "x", PromptTokens: 8000}
	if _, info, err := b.Admit(sub); err != nil || info.Admission != AdmitPass {
		t.Fatalf("subagent: %+v %v", info, err)
	}
	if st := b.Admission(); st.Counted[0] != 2 || st.WorkingTokens[0] < 14_000 {
		t.Fatalf("split tree: %d conversations, %d tokens", st.Counted[0], st.WorkingTokens[0])
	}
	if _, _, err := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000}); !errors.Is(err, ErrHold) {
		t.Fatalf("b: %v, want ErrHold", err)
	}
}

// A compaction: the conversation's next main-loop call (it carries tools) is
// far shorter than the last. It is not a side request: the context estimate,
// and what the gate counts, shrink at once, so a conversation that waited
// goes in. Without tools (a side request) the estimate is kept.
func TestAdmissionCountsACompactedConversationAtItsNewSize(t *testing.T) {
	for _, tools := range []bool{true, false} {
		b, now := admitBalancer(t, 1, 40_000, AdmissionConfig{MaxHold: -1})
		b.Admit(Facts{SessionKey: "a", PromptTokens: 4000, Tools: true})
		b.ReleaseSession(0, "a")
		*now += time.Second
		b.Admit(Facts{SessionKey: "a", PromptTokens: 30_000, Tools: true})
		b.ReleaseSession(0, "a")
		*now += time.Second
		_, _, err := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000})
		if !errors.Is(err, ErrHold) {
			t.Fatalf("tools %v: b before the compaction: %v, want ErrHold", tools, err)
		}
		*now += time.Second
		b.Admit(Facts{SessionKey: "a", PromptTokens: 5000, Tools: tools})
		work := b.Admission().WorkingTokens[0]
		if tools && work >= 30_000 {
			t.Fatalf("after a compaction the gate counts %d tokens, want under 30,000", work)
		}
		if !tools && work < 30_000 {
			t.Fatalf("a side request shrank the count to %d tokens", work)
		}
	}
}
