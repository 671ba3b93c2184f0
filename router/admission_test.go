package router

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// admitBalancer is a Balancer with admission fit on n replicas of capTokens KV
// each and a clock the test steps.
func admitBalancer(t *testing.T, n int, capTokens int64, cfg AdmissionConfig) (*Balancer, *time.Duration) {
	t.Helper()
	now := new(time.Duration)
	names := make([]string, n)
	for i := range names {
		names[i] = ReplicaName(i)
	}
	cfg.Mode = AdmissionFit
	if cfg.FillTarget == 0 {
		cfg.FillTarget = 1 // the tests' arithmetic: the whole cache
	}
	b, err := NewBalancer(BalancerConfig{Replicas: names, Affinity: true, MaxNumSeqs: 32,
		KVCapacityTokens: capTokens, Now: func() time.Duration { return *now }, Admission: cfg, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b, now
}

func TestAdmissionOffNeverHolds(t *testing.T) {
	now := time.Duration(0)
	b, err := NewBalancer(BalancerConfig{Replicas: []string{"r0"}, Affinity: true, KVCapacityTokens: 1000,
		Now: func() time.Duration { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		d, info, err := b.Admit(Facts{SessionKey: "s" + strconv.Itoa(i), PromptTokens: 5000})
		if err != nil || info.Admission != AdmitNone || d.Replica != 0 {
			t.Fatalf("request %d: %+v %+v %v", i, d, info, err)
		}
	}
	if st := b.Admission(); st.State != "off" || st.Queue != 0 {
		t.Fatalf("status %+v", st)
	}
}

// One replica of 10,000 tokens: a 6,000-token conversation fits, a second
// waits until the first has ended (its last request done and the idle window
// passed), then goes in FIFO order ahead of a third that came later.
func TestAdmissionHoldsUntilRoomFIFO(t *testing.T) {
	b, now := admitBalancer(t, 1, 10_000, AdmissionConfig{MaxHold: -1})
	d, info, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 6000})
	if err != nil || info.Admission != AdmitAdmitted {
		t.Fatalf("a: %+v %+v %v", d, info, err)
	}
	_, ib, err := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000})
	if !errors.Is(err, ErrHold) || ib.Ticket == 0 {
		t.Fatalf("b: %+v %v, want ErrHold with a ticket", ib, err)
	}
	*now += time.Second
	_, ic, err := b.Admit(Facts{SessionKey: "c", PromptTokens: 6000})
	if !errors.Is(err, ErrHold) || ic.Ticket == ib.Ticket {
		t.Fatalf("c: %+v %v", ic, err)
	}
	// a's later turn passes although the replica is full.
	if _, i2, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 7000}); err != nil || i2.Admission != AdmitPass {
		t.Fatalf("a's second turn: %+v %v", i2, err)
	}
	b.ReleaseSession(0, "a")
	b.ReleaseSession(0, "a")
	if st := b.Admission(); st.Queue != 2 || st.Counted[0] != 1 {
		t.Fatalf("status while a idles: %+v", st)
	}
	// Until gaps are learned the idle window is the live window: b and c keep
	// asking (their tickets would expire otherwise) until a stops counting.
	win := b.Admission().IdleWindowS
	start := *now
	for *now-start <= time.Duration(win*float64(time.Second)) {
		*now += HoldPoll
		for _, k := range []struct {
			key string
			t   uint64
		}{{"c", ic.Ticket}, {"b", ib.Ticket}} {
			// c asks first but b is the head: c waits while b does.
			if _, _, err := b.Admit(Facts{SessionKey: k.key, PromptTokens: 6000, Ticket: k.t}); err == nil {
				if k.key == "c" {
					t.Fatalf("c admitted before b (FIFO)")
				}
				goto admitted
			}
		}
	}
	t.Fatalf("b not admitted after a ended")
admitted:
	if st := b.Admission(); st.Outcomes.AfterHold != 1 || *now-start <= time.Duration(win*float64(time.Second)) {
		t.Fatalf("b admitted at %v (idle window %gs): %+v", *now-start, win, st)
	}
	st := b.Admission()
	if st.Queue != 1 || st.Outcomes.Admitted != 1 {
		t.Fatalf("status: %+v", st)
	}
}

func TestAdmissionPasses(t *testing.T) {
	b, _ := admitBalancer(t, 1, 10_000, AdmissionConfig{})
	if _, _, err := b.Admit(Facts{SessionKey: "a", PromptTokens: 9000}); err != nil {
		t.Fatal(err)
	}
	// A continuing conversation the router does not know (its body has an
	// assistant message) passes; so does a request without a session key.
	if _, info, err := b.Admit(Facts{SessionKey: "old", PromptTokens: 9000, Continuing: true}); err != nil || info.Admission != AdmitPass {
		t.Fatalf("continuing: %+v %v", info, err)
	}
	if _, info, err := b.Admit(Facts{PromptTokens: 9000}); err != nil || info.Admission != AdmitNone {
		t.Fatalf("no key: %+v %v", info, err)
	}
	// Capacity unknown: everything passes, and the status says so.
	b.ObserveCapacity(0, 0)
	if _, info, err := b.Admit(Facts{SessionKey: "new", PromptTokens: 9000}); err != nil || info.Admission != AdmitCapacityUnknown {
		t.Fatalf("capacity unknown: %+v %v", info, err)
	}
	if st := b.Admission(); st.State != "capacity-unknown" {
		t.Fatalf("state %q", st.State)
	}
}

func TestAdmissionLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  AdmissionConfig
		want error
		out  Admission
	}{
		{"max hold admits", AdmissionConfig{MaxHold: 10 * time.Second}, nil, AdmitLimit},
		{"max hold refuses", AdmissionConfig{MaxHold: 10 * time.Second, OnLimit: AdmitLimitRefuse}, ErrOverloaded, AdmitRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, now := admitBalancer(t, 1, 10_000, tc.cfg)
			b.Admit(Facts{SessionKey: "a", PromptTokens: 6000})
			_, i, err := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000})
			for ; errors.Is(err, ErrHold); *now += HoldPoll {
				if i.Held > tc.cfg.MaxHold {
					t.Fatalf("held %v beyond max_hold", i.Held)
				}
				_, i, err = b.Admit(Facts{SessionKey: "b", PromptTokens: 6000, Ticket: i.Ticket})
			}
			if !errors.Is(err, tc.want) || i.Admission != tc.out || i.Held != tc.cfg.MaxHold {
				t.Fatalf("got %+v %v, want %v after %v", i, err, tc.out, tc.cfg.MaxHold)
			}
			if err != nil && !strings.Contains(err.Error(), "held 10s, max_hold 10s") {
				t.Fatalf("refusal %q does not say which limit", err)
			}
			if st := b.Admission(); st.Queue != 0 {
				t.Fatalf("queue %d after the limit", st.Queue)
			}
		})
	}
	t.Run("max queue", func(t *testing.T) {
		b, _ := admitBalancer(t, 1, 10_000, AdmissionConfig{MaxQueue: 1, OnLimit: AdmitLimitRefuse})
		b.Admit(Facts{SessionKey: "a", PromptTokens: 6000})
		if _, _, err := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000}); !errors.Is(err, ErrHold) {
			t.Fatalf("b: %v", err)
		}
		if _, _, err := b.Admit(Facts{SessionKey: "c", PromptTokens: 6000}); !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "max_queue 1") {
			t.Fatalf("c: %v, want ErrOverloaded naming max_queue (queue full)", err)
		}
	})
}

// A waiter that disconnects leaves at once; one that stops asking is dropped
// after TicketTTL, so it cannot block the head.
func TestAdmissionQueueDoesNotLeak(t *testing.T) {
	b, now := admitBalancer(t, 1, 10_000, AdmissionConfig{MaxHold: -1})
	b.Admit(Facts{SessionKey: "a", PromptTokens: 6000})
	_, ib, _ := b.Admit(Facts{SessionKey: "b", PromptTokens: 6000})
	_, ic, _ := b.Admit(Facts{SessionKey: "c", PromptTokens: 6000})
	b.CancelHold(ib.Ticket)
	if st := b.Admission(); st.Queue != 1 || st.Outcomes.GaveUp != 1 {
		t.Fatalf("after cancel: %+v", st)
	}
	*now += TicketTTL + time.Millisecond
	if st := b.Admission(); st.Queue != 0 || st.Outcomes.GaveUp != 2 {
		t.Fatalf("after the TTL: %+v", st)
	}
	// c comes back after its ticket expired: it queues again, as new.
	_, ic2, err := b.Admit(Facts{SessionKey: "c", PromptTokens: 6000, Ticket: ic.Ticket})
	if !errors.Is(err, ErrHold) || ic2.Held != 0 {
		t.Fatalf("c again: %+v %v", ic2, err)
	}
}

// The shared prefix is learned from first turns' cached tokens and counted
// once per replica; the expected context from ended conversations' peaks.
func TestAdmissionLearnsPrefixAndExpectedContext(t *testing.T) {
	b, now := admitBalancer(t, 1, 20_000, AdmissionConfig{MaxHold: -1})
	// Conversations of 5,000 tokens sharing a 4,000-token prefix: counted per
	// conversation only two would fit, with the prefix once ten would.
	for i := range MinSharedPrefixSamples + MinEndedConversations {
		k := "warm" + strconv.Itoa(i)
		if _, _, err := b.Admit(Facts{SessionKey: k, PromptTokens: 5000}); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		b.ObserveCache(k, 0, 5000, 4000)
		b.ReleaseSession(0, k)
		*now += 2*b.sessions.LiveWindow() + time.Second // ended: counted no more, then forgotten
	}
	st := b.Admission()
	if st.SharedPrefixTokens != 4000 || st.ExpectedSource != "ended-p90" || st.ExpectedContextTokens != 5000 {
		t.Fatalf("estimates: %+v", st)
	}
	admitted := 0
	for i := range 20 {
		_, _, err := b.Admit(Facts{SessionKey: "c" + strconv.Itoa(i), PromptTokens: 5000})
		if err != nil {
			break
		}
		admitted++
	}
	// 4,000 + n x 1,000 <= 20,000: 16.
	if admitted != 16 {
		t.Fatalf("admitted %d conversations, want 16 (the prefix counted once)", admitted)
	}
}

// A running conversation is counted at the peak ended conversations reached,
// not at its size now: conversations that grow from 5,000 to 10,000 tokens fit
// a 25,000-token replica two at a time, although four fit at their first turn
// (the 7-GPU fleet's case: docs/routing.md "Admission").
func TestAdmissionCountsRunningConversationsAtTheirExpectedPeak(t *testing.T) {
	b, now := admitBalancer(t, 1, 25_000, AdmissionConfig{MaxHold: -1})
	for i := range MinEndedConversations {
		k := "warm" + strconv.Itoa(i)
		for _, p := range []int{5000, 7500, 10_000} {
			if _, _, err := b.Admit(Facts{SessionKey: k, PromptTokens: p}); err != nil {
				t.Fatalf("%s at %d tokens: %v", k, p, err)
			}
			b.ReleaseSession(0, k)
		}
		*now += 2*b.sessions.LiveWindow() + time.Second
	}
	if st := b.Admission(); st.ExpectedContextTokens != 10_000 || st.ExpectedSource != "ended-p90" {
		t.Fatalf("estimates: %+v", st)
	}
	admitted := 0
	for i := range 6 {
		if _, _, err := b.Admit(Facts{SessionKey: "c" + strconv.Itoa(i), PromptTokens: 5000}); err != nil {
			break
		}
		admitted++
	}
	if admitted != 2 {
		t.Fatalf("admitted %d conversations of 5,000 tokens growing to 10,000 on 25,000 tokens, want 2", admitted)
	}
	if st := b.Admission(); st.RunningPeakTokens != 10_000 || st.WorkingTokens[0] != 20_000 {
		t.Fatalf("status: running peak %d, working set %v; want 10000 and [20000] (two at their peak)", st.RunningPeakTokens, st.WorkingTokens)
	}
}
