package routerhttp

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// admitFront is a router with admission fit in front of one stub whose KV
// cache holds one 600-token conversation (KV capacity set in the Balancer;
// bodies are estimated at 4 bytes per token).
func admitFront(t *testing.T, cfg router.AdmissionConfig) (*front, *stub) {
	t.Helper()
	s := newStub(t, "r0")
	f := newFront(t, true, func(c *Config) {
		cfg.Mode = router.AdmissionFit
		cfg.FillTarget = 1
		c.Models[0].Admission = AdmissionYAML(cfg)
	}, s)
	f.pool().Balancer.ObserveCapacity(0, 1000)
	return f, s
}

func bigBody(text string) string {
	return `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat(text, 2400) + `"}]}`
}

// A second new conversation waits at the router, before any byte, until the
// first has ended; its response says how long it was held. A continuing
// conversation (an assistant message in its body) is never held.
func TestProxyHoldsNewConversationUntilRoom(t *testing.T) {
	f, _ := admitFront(t, router.AdmissionConfig{MaxHold: -1})
	resp, _ := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": "a"}, bigBody("a"))
	if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderAdmission) != "admitted" || resp.Header.Get(wire.HeaderHeldMs) != "0" {
		t.Fatalf("a: %d %v", resp.StatusCode, resp.Header)
	}
	// a's first request ended; a still counts for the idle window (the live
	// window until gaps are learned), so b waits, sending nothing.
	type result struct {
		resp *http.Response
	}
	got := make(chan result, 1)
	go func() {
		resp, _ := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": "b"}, bigBody("b"))
		got <- result{resp}
	}()
	deadline := time.Now().Add(guard)
	for f.pool().Balancer.Admission().Queue != 1 {
		if time.Now().After(deadline) {
			t.Fatal("b never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A conversation the router does not know but whose body carries an
	// assistant message passes at once.
	cont := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"},{"role":"user","content":"z"}]}`
	if resp, _ := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": "old"}, cont); resp.Header.Get(wire.HeaderAdmission) != "pass" {
		t.Fatalf("continuing conversation: %v", resp.Header)
	}
	// Room appears (here: the replica's capacity is learned larger; a
	// conversation ending is the core's test) and b goes, held a second of the
	// router's clock.
	f.clock.Advance(time.Second)
	f.pool().Balancer.ObserveCapacity(0, 5000)
	select {
	case r := <-got:
		held, _ := strconv.Atoi(r.resp.Header.Get(wire.HeaderHeldMs))
		if r.resp.StatusCode != 200 || r.resp.Header.Get(wire.HeaderAdmission) != "held" || held != 1000 {
			t.Fatalf("b: %d %v", r.resp.StatusCode, r.resp.Header)
		}
	case <-time.After(guard):
		t.Fatal("b was not admitted after a ended")
	}
	if st := f.pool().Balancer.Admission(); st.Queue != 0 || st.Outcomes.AfterHold != 1 {
		t.Fatalf("admission: %+v", st)
	}
}

// A held client that disconnects leaves the queue at once.
func TestProxyHeldClientDisconnectLeavesQueue(t *testing.T) {
	f, _ := admitFront(t, router.AdmissionConfig{MaxHold: -1})
	f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": "a"}, bigBody("a"))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/messages", strings.NewReader(bigBody("b")))
	req.Header.Set("X-Session-ID", "b")
	errc := make(chan error, 1)
	go func() {
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	deadline := time.Now().Add(guard)
	for f.pool().Balancer.Admission().Queue != 1 {
		if time.Now().After(deadline) {
			t.Fatal("b never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-errc
	f.waitDone(t)
	if st := f.pool().Balancer.Admission(); st.Queue != 0 || st.Outcomes.GaveUp != 1 {
		t.Fatalf("after disconnect: %+v", st)
	}
	if f.totalInFlight() != 0 {
		t.Fatalf("in flight %v", f.inFlight())
	}
}

// Refused at max_hold: OpenAI 429 with Retry-After, Anthropic 529
// overloaded_error.
func TestProxyRefusesAtLimitInAPIShape(t *testing.T) {
	for _, tc := range []struct {
		path, typ string
		status    int
	}{{"/v1/chat/completions", "rate_limit_exceeded", 429}, {"/v1/messages", "overloaded_error", 529}} {
		f, _ := admitFront(t, router.AdmissionConfig{MaxQueue: -1, MaxHold: time.Nanosecond, OnLimit: router.AdmitLimitRefuse})
		f.post(t, tc.path, map[string]string{"X-Session-ID": "a"}, bigBody("a"))
		go func() { time.Sleep(50 * time.Millisecond); f.clock.Advance(time.Second) }()
		resp, body := f.post(t, tc.path, map[string]string{"X-Session-ID": "b"}, bigBody("b"))
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.typ) || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %d %v %s", tc.path, resp.StatusCode, resp.Header, body)
		}
		// It says which limit, and carries the admission headers.
		if !strings.Contains(body, "max_hold") || resp.Header.Get(wire.HeaderAdmission) != "refused" || resp.Header.Get(wire.HeaderHeldMs) == "" {
			t.Errorf("%s: refusal without its limit or admission headers: %v %s", tc.path, resp.Header, body)
		}
	}
}

// The admission outcomes print their wire strings: the value a
// kept-alive response's header carries is the waiting outcome's.
func TestAdmissionOutcomesAreTheirWireStrings(t *testing.T) {
	for a, want := range map[router.Admission]string{
		router.AdmitWaiting: wire.AdmissionWaiting, router.AdmitHeld: "held", router.AdmitAdmitted: "admitted",
		router.AdmitLimit: "limit", router.AdmitCapacityUnknown: "capacity-unknown", router.AdmitPass: "pass", router.AdmitRefused: "refused",
	} {
		if got := a.String(); got != want {
			t.Errorf("Admission %d prints %q, want %q", a, got, want)
		}
	}
}
