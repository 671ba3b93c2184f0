package routerhttp

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// drainAnswer is the admin API's answer on .../drain.
type drainAnswer struct {
	Model    string      `json:"model"`
	Replicas []DrainView `json:"replicas"`
}

func decodeDrain(t *testing.T, body string) drainAnswer {
	t.Helper()
	var a drainAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("drain answer %q: %v", body, err)
	}
	return a
}

// A replica drained through the admin API while it serves a stream: the
// stream finishes (never cut), no new conversation lands there, its in-flight
// count reaches 0, a conversation homed there moves at its next turn
// (drain-move, in move mode), /status and /metrics say it drains, and
// ending the drain clears it. No request fails.
func TestDrainReplicaOverHTTP(t *testing.T) {
	specs := startSims(t, 3, nil)
	s := serveOn(t, specs, nil)
	admin := httptest.NewServer(s.rt.AdminHandler())
	defer admin.Close()

	first := <-s.send(wire.PathChatCompletions, "conv", chatStream(4, "turn one"), nil)
	if first.err != nil || first.status != 200 {
		t.Fatalf("first turn: %d %v", first.status, first.err)
	}
	home := first.header.Get(wire.HeaderReplica)
	long := s.send(wire.PathChatCompletions, "conv", chatStream(40, "turn two, a longer answer"), nil)
	s.waitInFlight(t, 1)

	code, body := adminDo(t, admin, "POST", "/admin/models/m/replicas/"+home+"/drain", "", `{"mode":"move"}`)
	if code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	if a := decodeDrain(t, body); a.Model != "*" || len(a.Replicas) != 1 || a.Replicas[0].Replica != home ||
		a.Replicas[0].Draining != "move" || a.Replicas[0].InFlight != 1 {
		t.Errorf("drain answer %s: want %s draining move with 1 in flight", body, home)
	}
	var news []<-chan streamResult
	for i := range 12 {
		news = append(news, s.send(wire.PathChatCompletions, fmt.Sprint("new-", i), chatStream(4, fmt.Sprint("hello ", i)), nil))
	}
	for i, ch := range news {
		r := <-ch
		if r.err != nil || r.status != 200 || !sseComplete(r.body) {
			t.Errorf("new conversation %d: %d %v", i, r.status, r.err)
		}
		if got := r.header.Get(wire.HeaderReplica); got == home {
			t.Errorf("new conversation %d placed on the draining replica %s (%s)", i, got, r.header.Get(wire.HeaderDecision))
		}
	}
	if r := <-long; r.err != nil || r.status != 200 || !sseComplete(r.body) || r.header.Get(wire.HeaderReplica) != home {
		t.Fatalf("the stream in flight at the drain: %d %v on %s, want complete on %s", r.status, r.err, r.header.Get(wire.HeaderReplica), home)
	}
	deadline := time.Now().Add(guard)
	for {
		_, body = adminDo(t, admin, "GET", "/admin/models/m/replicas/"+home+"/drain", "", "")
		if a := decodeDrain(t, body); len(a.Replicas) == 1 && a.Replicas[0].InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight never reached 0: %s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var rep ReplicaReport
	for _, r := range s.rt.Status().Models[0].Replicas {
		if r.Name == home {
			rep = r
		}
	}
	if rep.Draining != "move" || rep.InFlight != 0 {
		t.Errorf("/status of %s: draining %q in flight %d, want move, 0", home, rep.Draining, rep.InFlight)
	}
	if _, metrics, _ := s.get(wire.PathMetrics); !strings.Contains(metrics, `warden_replica_draining{model="*",replica="`+home+`"} 1`) {
		t.Errorf("/metrics has no warden_replica_draining 1 for %s", home)
	}
	next := <-s.send(wire.PathChatCompletions, "conv", chatStream(4, "turn three"), nil)
	if next.status != 200 || next.header.Get(wire.HeaderReplica) == home || next.header.Get(wire.HeaderDecision) != "drain-move" {
		t.Errorf("the next turn of the conversation homed there: %d on %s (%s), want 200 elsewhere, drain-move",
			next.status, next.header.Get(wire.HeaderReplica), next.header.Get(wire.HeaderDecision))
	}
	code, body = adminDo(t, admin, "DELETE", "/admin/models/m/replicas/"+home+"/drain", "", "")
	if a := decodeDrain(t, body); code != 200 || len(a.Replicas) != 1 || a.Replicas[0].Draining != "" || a.Replicas[0].Sessions != 0 {
		t.Errorf("undrain: %d %s, want not draining, no session homed", code, body)
	}
	if _, metrics, _ := s.get(wire.PathMetrics); !strings.Contains(metrics, `warden_replica_draining{model="*",replica="`+home+`"} 0`) {
		t.Errorf("/metrics: warden_replica_draining of %s not 0 after the undrain", home)
	}
}

// finish mode through the query: the conversation homed there stays.
func TestDrainFinishKeepsConversation(t *testing.T) {
	specs := startSims(t, 2, nil)
	s := serveOn(t, specs, nil)
	admin := httptest.NewServer(s.rt.AdminHandler())
	defer admin.Close()
	first := <-s.send(wire.PathChatCompletions, "conv", chatStream(4, "turn one"), nil)
	home := first.header.Get(wire.HeaderReplica)
	if code, body := adminDo(t, admin, "POST", "/admin/models/*/replicas/"+home+"/drain?mode=finish", "", ""); code != 200 || !strings.Contains(body, `"finish"`) {
		t.Fatalf("drain: %d %s", code, body)
	}
	for turn := range 3 {
		r := <-s.send(wire.PathChatCompletions, "conv", chatStream(4, fmt.Sprint("turn ", turn+2)), nil)
		if r.status != 200 || r.header.Get(wire.HeaderReplica) != home || r.header.Get(wire.HeaderDecision) != "sticky" {
			t.Errorf("turn %d: %d on %s (%s), want %s sticky", turn+2, r.status, r.header.Get(wire.HeaderReplica), r.header.Get(wire.HeaderDecision), home)
		}
		n := <-s.send(wire.PathChatCompletions, fmt.Sprint("new-", turn), chatStream(4, "hi"), nil)
		if n.header.Get(wire.HeaderReplica) == home {
			t.Errorf("a new conversation placed on the replica draining in finish mode")
		}
	}
}

// Bad admin input: each error says what was wrong.
func TestDrainAdminErrors(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"), newStub(t, "b"))
	admin := httptest.NewServer(f.rt.AdminHandler())
	defer admin.Close()
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/admin/models/*/replicas/zz/drain", `{"mode":"move"}`, 404, `replica not in the model: \"zz\" in model \"*\" (did you mean a? have a, b)`},
		{"POST", "/admin/models/nope/replicas/a/drain", `{"mode":"move"}`, 404, "model not served"},
		{"POST", "/admin/models/m/replicas/a/drain", `{"mode":"stop"}`, 400, `drain mode \"stop\" is unknown (have move, finish)`},
		{"POST", "/admin/models/m/replicas/a/drain?mode=later", "", 400, `drain mode \"later\" is unknown`},
		{"POST", "/admin/models/m/replicas/a/drain", "", 400, `no mode: want {\"mode\": \"move\"|\"finish\"}`},
		{"POST", "/admin/models/m/replicas/a/drain", `{}`, 400, `\"mode\" is missing`},
		{"POST", "/admin/models/m/replicas/a/drain", `{"mode":"move","now":true}`, 400, `unknown field \"now\"`},
		{"POST", "/admin/models/m/replicas/a/drain?mode=move", `{"mode":"move"}`, 400, "mode given twice"},
		{"PUT", "/admin/models/m/replicas/a/drain", `{"mode":"move"}`, 405, "method not allowed"},
	} {
		code, body := adminDo(t, admin, tc.method, tc.path, "", tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %s, want %d with %s", tc.method, tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
	if d := f.pool().Balancer.Drain(0); d != 0 {
		t.Errorf("a refused request drained the replica: %v", d)
	}
}

// drain: in the config: strict, a bad value at its file:line; a good one is
// in force from the start.
func TestDrainConfigField(t *testing.T) {
	yaml := "models:\n  - name: m\n    replicas:\n      - url: http://127.0.0.1:9\n        drain: stop\n"
	cfg, err := parseConfig([]byte(yaml), "r.yaml")
	if err == nil {
		err = cfg.WithDefaults().Validate()
	}
	if err == nil || !strings.Contains(err.Error(), `r.yaml:5: models[0].replicas[0].drain: drain mode "stop" is unknown (have move, finish)`) {
		t.Errorf("bad drain: %v", err)
	}
	a, b := newStub(t, "a"), newStub(t, "b")
	yaml = fmt.Sprintf("models:\n  - name: m\n    replicas:\n      - {url: %s, name: a, drain: finish}\n      - {url: %s, name: b}\n", a.srv.URL, b.srv.URL)
	cfg, err = parseConfig([]byte(yaml), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st := rt.Status().Models[0].Replicas; st[0].Draining != "finish" || st[1].Draining != "" {
		t.Errorf("status: %q %q, want finish, none", st[0].Draining, st[1].Draining)
	}
}

// Two routers on one redis-server: a drain set through router A's admin API
// keeps router B's new conversations off the replica, and B's /status shows it.
func TestDrainSharedThroughAdmin(t *testing.T) {
	redis := testredis.Start(t)
	specs := startSims(t, 3, nil)
	withState := func(c *Config) { c.State = redis.URL() }
	a := serveOn(t, specs, withState)
	b := serveOn(t, specs, withState)
	admin := httptest.NewServer(a.rt.AdminHandler())
	defer admin.Close()
	// Both routers connected (a drain set before is written by the first
	// heartbeat: stored false).
	for deadline := time.Now().Add(guard); !a.rt.State().Up() || !b.rt.State().Up(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the routers never reached redis")
		}
	}
	code, body := adminDo(t, admin, "POST", "/admin/models/*/replicas/r1/drain", "", `{"mode":"move"}`)
	if code != 200 || !strings.Contains(body, `"stored": true`) {
		t.Fatalf("drain through a: %d %s", code, body)
	}
	for i := range 16 {
		r := <-b.send(wire.PathChatCompletions, fmt.Sprint("b-", i), chatStream(4, fmt.Sprint("hi ", i)), nil)
		if r.err != nil || r.status != 200 {
			t.Fatalf("conversation %d through b: %d %v", i, r.status, r.err)
		}
		if r.header.Get(wire.HeaderReplica) == "r1" {
			t.Errorf("router b placed conversation %d on r1, drained through router a", i)
		}
	}
	deadline := time.Now().Add(guard)
	for b.rt.Status().Models[0].Replicas[1].Draining != "move" {
		if time.Now().After(deadline) {
			t.Fatal("router b's /status never showed r1 draining")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The card names a draining replica with what is left on it.
func TestCardShowsDrain(t *testing.T) {
	f := newFront(t, true, nil, newStub(t, "a"), newStub(t, "b"))
	f.pool().Balancer.SetDrain(1, router.DrainMove)
	cm := f.rt.Card().Models[0]
	if len(cm.Draining) != 1 || cm.Draining[0].Name != "b" || cm.Draining[0].Mode != "move" {
		t.Fatalf("card drains %+v, want b move", cm.Draining)
	}
	rec := httptest.NewRecorder()
	f.rt.CardHandler().ServeHTTP(rec, httptest.NewRequest("GET", CardPath, nil))
	if body := rec.Body.String(); !strings.Contains(body, `data-draining="b"`) || !strings.Contains(body, "b is draining (move)") {
		t.Errorf("card HTML has no drain line for b")
	}
}
