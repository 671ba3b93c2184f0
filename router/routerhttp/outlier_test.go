package routerhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// fail500 answers every API request with vLLM's 500 while /health stays 200.
func fail500(w http.ResponseWriter, r *http.Request) {
	writeError(w, apiOpenAI, http.StatusInternalServerError, "EngineCore encountered an issue")
}

// Acceptance (docs/router.md section 9, "Ejection"): 3 good replicas and one (d) that answers 500
// while its /health says 200, 12 conversations x 3 turns. A 5xx before the
// first byte is retried once elsewhere, so no turn fails; d is ejected after
// DefaultEjectConsecutiveFailures failures, once (one log line), its
// conversations re-home and every later turn of theirs succeeds elsewhere.
// /status, /metrics and the card say so.
func TestReplicaThat500sWhileHealthyIsEjectedAndItsConversationsRehome(t *testing.T) {
	var logs syncBuffer
	stubs := []*stub{newStub(t, "a"), newStub(t, "b"), newStub(t, "c"), newStub(t, "d")}
	stubs[3].setHandler(fail500)
	f := newFront(t, true, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}, stubs...)
	failed, onD := 0, map[string]bool{}
	var seq []string
	for turn := range 3 {
		for s := range 12 {
			key := fmt.Sprintf("conv-%d", s)
			resp, body := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": key}, chatBody("m"))
			rep := resp.Header.Get(wire.HeaderReplica)
			seq = append(seq, fmt.Sprintf("%s:%s/%s/%d", key, rep, resp.Header.Get(wire.HeaderDecision), resp.StatusCode))
			if resp.StatusCode != http.StatusOK {
				failed++
				t.Logf("turn %d of %s failed: %d %s", turn, key, resp.StatusCode, body)
			}
			if rep == "d" {
				t.Errorf("turn %d of %s was served by d (status %d)", turn, key, resp.StatusCode)
			}
		}
	}
	for _, r := range stubs[3].requests("/v1/chat/completions") {
		onD[r.Header.Get("X-Session-ID")] = true
	}
	if failed != 0 {
		t.Errorf("%d turns failed, want 0 (a 5xx before the first byte is retried once elsewhere)", failed)
	}
	if n := len(stubs[3].requests("/v1/chat/completions")); n != 5 {
		t.Errorf("d got %d requests, want exactly %d (ejected after that many failures): %s", n, 5, strings.Join(seq, " "))
	}
	st := f.rt.Status().Models[0].Replicas[3]
	if !st.Ejected || st.Ejections != 1 || !st.Healthy || st.Sessions != 0 {
		t.Errorf("d in /status: ejected %v, ejections %d, healthy %v, sessions homed %d; want ejected once, still healthy, no sessions", st.Ejected, st.Ejections, st.Healthy, st.Sessions)
	}
	if n := strings.Count(logs.String(), "replica ejected"); n != 1 {
		t.Errorf("%d ejection log lines, want 1:\n%s", n, logs.String())
	}
	m := routerMetrics(f.rt)
	for _, want := range []string{`warden_ejections_total{model="*",replica="d"} 1`, `warden_replica_ejected{model="*",replica="d"} 1`, `warden_replica_ejected{model="*",replica="a"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var card bytes.Buffer
	if err := RenderCard(&card, f.rt.Card(), 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(card.String(), `data-ejected="d"`) {
		t.Errorf("the card has no ejection line for d")
	}
	t.Logf("%d conversations tried d first; turns: %s", len(onD), strings.Join(seq, " "))
}

// A request that gets a 5xx from two replicas counts against neither: it is the
// request. llama-server answers a malformed body with 500 (recorded in
// testdata/llamacpp-chat-bad-json.txt; the router itself refuses what is not
// JSON, so the stubs answer it to a marked request); sent many times, it ejects nobody, and
// the client gets the second replica's 500.
func TestRequestThat500sOnTwoReplicasCountsAgainstNeither(t *testing.T) {
	raw, err := os.ReadFile("testdata/llamacpp-chat-bad-json.txt")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatal(err)
	}
	recBody, _ := io.ReadAll(rec.Body)
	llama := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Bad-JSON") != "" { // the stub read the body already

			w.Header().Set("Content-Type", rec.Header.Get("Content-Type"))
			w.WriteHeader(rec.StatusCode)
			w.Write(recBody)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
	}
	stubs := []*stub{newStub(t, "a"), newStub(t, "b"), newStub(t, "c")}
	for _, s := range stubs {
		s.setHandler(llama)
	}
	f := newFront(t, true, nil, stubs...)
	for i := range 12 {
		resp, body := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": fmt.Sprint("s", i%2), "X-Test-Bad-JSON": "1"}, `{"model":"m","messages":[]}`)
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "parse error") {
			t.Fatalf("request %d: %d %s, want llama-server's own 500", i, resp.StatusCode, body)
		}
	}
	for _, st := range f.rt.Status().Models[0].Replicas {
		if st.Ejected || st.Ejections != 0 {
			t.Errorf("%s ejected (%d times) by requests that failed on two replicas", st.Name, st.Ejections)
		}
	}
	if resp, _ := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": "s0"}, chatBody("m")); resp.StatusCode != 200 {
		t.Errorf("a good request after them: %d", resp.StatusCode)
	}
}

// An ejected replica comes back only through a probe after its ejection time: a
// failed probe keeps it out for twice as long (backoff), a good one returns it,
// each logged once.
func TestEjectedReplicaReturnsAfterAProbeSucceeds(t *testing.T) {
	var logs syncBuffer
	stubs := []*stub{newStub(t, "a"), newStub(t, "b"), newStub(t, "c"), newStub(t, "d")}
	stubs[3].setHandler(fail500)
	f := newFront(t, true, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}, stubs...)
	for i := 0; !f.pool().Balancer.Ejected(3) && i < 40; i++ {
		f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": fmt.Sprint("s", i)}, chatBody("m"))
	}
	if !f.pool().Balancer.Ejected(3) {
		t.Fatal("d was never ejected")
	}
	ctx := context.Background()
	f.rt.probeEjected(ctx) // ejection time not over: no probe
	if n := len(stubs[3].requests("/v1/chat/completions")); n != 5 {
		t.Fatalf("d got %d requests, want 5 (no probe before the ejection time)", n)
	}
	f.clock.Advance(31 * time.Second)
	f.rt.probeEjected(ctx) // d still fails: ejected again, for 60 s
	if st := f.rt.Status().Models[0].Replicas[3]; !st.Ejected || st.Ejections != 2 || st.EjectedForS < 59 {
		t.Fatalf("after a failed probe: ejected %v, ejections %d, for %.0f s; want ejected a second time for 60 s", st.Ejected, st.Ejections, st.EjectedForS)
	}
	stubs[3].setHandler(nil) // d recovers
	f.clock.Advance(61 * time.Second)
	f.rt.probeEjected(ctx)
	if f.pool().Balancer.Ejected(3) {
		t.Fatal("d still ejected after a good probe")
	}
	probes := stubs[3].requests("/v1/chat/completions")
	if last := probes[len(probes)-1]; !bytes.Contains(last.Body, []byte(`"max_tokens":1`)) {
		t.Errorf("the probe was %s, want a one-token chat completion", last.Body)
	}
	if n := strings.Count(logs.String(), "replica returned"); n != 1 {
		t.Errorf("%d return log lines, want 1:\n%s", n, logs.String())
	}
}

// A replica that resets its chat connections before answering costs no client
// error (the request is retried elsewhere), but before it was tried first on
// every turn of its conversations: now it is ejected after
// DefaultEjectConsecutiveFailures resets and they re-home.
func TestReplicaThatResetsConnectionsIsEjected(t *testing.T) {
	stubs := []*stub{newStub(t, "a"), newStub(t, "b"), newStub(t, "c"), newStub(t, "d")}
	stubs[3].setHandler(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	f := newFront(t, true, nil, stubs...)
	for turn := range 3 {
		for s := range 12 {
			resp, body := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": fmt.Sprint("conv-", s)}, chatBody("m"))
			if resp.StatusCode != http.StatusOK {
				t.Errorf("turn %d of conv-%d: %d %s", turn, s, resp.StatusCode, body)
			}
		}
	}
	if n := len(stubs[3].requests("/v1/chat/completions")); n != 5 {
		t.Errorf("d got %d requests, want 5 (ejected after 5 broken connections)", n)
	}
	if st := f.rt.Status().Models[0].Replicas[3]; !st.Ejected || !strings.Contains(st.EjectReason, "connection") {
		t.Errorf("d: ejected %v, reason %q; want ejected for its connections", st.Ejected, st.EjectReason)
	}
}

// Regression: a replica whose streams break after they started (the client gets
// the error event, nothing is retried) was never ejected; now each break
// counts as a failure, as Envoy counts a reset after the response began.
func TestReplicaWhoseStreamsBreakIsEjected(t *testing.T) {
	stubs := []*stub{newStub(t, "a"), newStub(t, "b"), newStub(t, "c"), newStub(t, "d")}
	stubs[3].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	f := newFront(t, true, nil, stubs...)
	for range 3 {
		for s := range 12 {
			f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": fmt.Sprint("conv-", s)}, `{"model":"m","stream":true}`)
		}
	}
	if n := len(stubs[3].requests("/v1/chat/completions")); n != router.DefaultEjectConsecutiveFailures {
		t.Errorf("d got %d requests, want %d (ejected after that many broken streams)", n, router.DefaultEjectConsecutiveFailures)
	}
	if st := f.rt.Status().Models[0].Replicas[3]; !st.Ejected || !strings.Contains(st.EjectReason, "stream broke") {
		t.Errorf("d: ejected %v, reason %q; want ejected for its broken streams", st.Ejected, st.EjectReason)
	}
}

// A replica that answers 200 and then an error event in the stream (vLLM's
// `data: {"error": ...}` when the engine fails a request after the headers):
// each such request's access-log line has
// stream_error with the message, and the failures eject the replica as 5xx
// would. Before, the router logged them as plain successes and kept placing
// new conversations there.
func TestErrorEventInAStreamCountsAsAFailure(t *testing.T) {
	stubs := []*stub{newStub(t, "a"), newStub(t, "b")}
	stubs[1].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
		io.WriteString(w, `data: {"error":{"message":"engine died","type":"InternalServerError","code":500}}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	})
	f := newFront(t, true, nil, stubs...)
	var out syncBuffer
	f.rt.Proxy().SetAccessLog(NewAccessLog(&out))
	for s := range 12 {
		resp, _ := f.post(t, "/v1/chat/completions", map[string]string{"X-Session-ID": fmt.Sprintf("conv-%d", s)}, chatBody("m"))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	errs := 0
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var e AccessEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Replica == "b" {
			if e.StreamError != "engine died" {
				t.Errorf("b's line: stream_error %q, want \"engine died\"", e.StreamError)
			}
			errs++
		} else if e.StreamError != "" {
			t.Errorf("a's line: stream_error %q", e.StreamError)
		}
	}
	if st := f.rt.Status().Models[0].Replicas[1]; !st.Ejected || errs != router.DefaultEjectConsecutiveFailures {
		t.Errorf("b: ejected %v after %d error streams; want ejected after %d", st.Ejected, errs, router.DefaultEjectConsecutiveFailures)
	}
}
