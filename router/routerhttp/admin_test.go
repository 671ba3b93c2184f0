package routerhttp

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

func newAdmin(t *testing.T, token string, models ...string) (*Router, *httptest.Server) {
	t.Helper()
	cfg := Config{AdminToken: token, HealthInterval: -1, ScrapeInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: &simclock.Manual{}}
	for _, m := range models {
		cfg.Models = append(cfg.Models, ModelConfig{Name: m, Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1"}, {URL: "http://127.0.0.1:2"}}})
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.AdminHandler())
	t.Cleanup(srv.Close)
	return rt, srv
}

func adminDo(t *testing.T, srv *httptest.Server, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminSwitchesAffinityOverHTTP(t *testing.T) {
	rt, srv := newAdmin(t, "", "Qwen/Qwen3-4B", "other")
	code, body := adminDo(t, srv, "GET", "/admin/models/Qwen/Qwen3-4B/affinity", "", "")
	if code != 200 || !strings.Contains(body, `"enabled": true`) || !strings.Contains(body, `"model": "Qwen/Qwen3-4B"`) {
		t.Fatalf("%d %s", code, body)
	}
	code, body = adminDo(t, srv, "PUT", "/admin/models/Qwen/Qwen3-4B/affinity", "", `{"enabled":false}`)
	if code != 200 || !strings.Contains(body, `"enabled": false`) {
		t.Fatalf("%d %s", code, body)
	}
	if rt.Pools()[0].Balancer.Affinity() || !rt.Pools()[1].Balancer.Affinity() {
		t.Fatal("switch hit the wrong model")
	}
	// "*" switches every model.
	code, body = adminDo(t, srv, "PUT", "/admin/models/*/affinity", "", `{"enabled":false}`)
	if code != 200 || rt.Pools()[1].Balancer.Affinity() {
		t.Fatalf("%d %s", code, body)
	}
	var list []affinityView
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 2 {
		t.Fatalf("%s: %v", body, err)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"PUT", "/admin/models/nope/affinity", `{"enabled":true}`, 404},
		{"PUT", "/admin/models/other/affinity", `{"enable":true}`, 400},
		{"PUT", "/admin/models/other/affinity", `{}`, 400},
		{"DELETE", "/admin/models/other/affinity", ``, 405},
		{"GET", "/admin/models/other/bogus", ``, 404},
	} {
		if code, body := adminDo(t, srv, tc.method, tc.path, "", tc.body); code != tc.want {
			t.Errorf("%s %s %s: %d %s, want %d", tc.method, tc.path, tc.body, code, body, tc.want)
		}
	}
}

func TestAdminSetsThreshold(t *testing.T) {
	rt, srv := newAdmin(t, "", "m")
	code, body := adminDo(t, srv, "PUT", "/admin/models/m/threshold", "", `{"threshold":4}`)
	if n, auto := rt.Pools()[0].Balancer.OverflowThreshold(); code != 200 || n != 4 || auto {
		t.Fatalf("%d %s -> %d %v", code, body, n, auto)
	}
	code, _ = adminDo(t, srv, "PUT", "/admin/models/m/threshold", "", `{"threshold":"auto"}`)
	if n, auto := rt.Pools()[0].Balancer.OverflowThreshold(); code != 200 || n != 64 || !auto {
		t.Fatalf("auto: %d -> %d %v", code, n, auto)
	}
	for _, bad := range []string{`{"threshold":-2}`, `{"threshold":4.5}`, `{"threshold":"lots"}`, `{}`} {
		if code, body := adminDo(t, srv, "PUT", "/admin/models/m/threshold", "", bad); code != 400 {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
}

// PUT threshold 0 means auto, as overflow_threshold: 0 in the YAML file and
// --overflow-threshold 0 do (both parsed by router.ParseThreshold); it was a
// 400 before.
func TestAdminThresholdZeroIsAuto(t *testing.T) {
	rt, srv := newAdmin(t, "", "m")
	for _, body := range []string{`{"threshold":0}`, `{"threshold":"0"}`} {
		adminDo(t, srv, "PUT", "/admin/models/m/threshold", "", `{"threshold":4}`)
		code, out := adminDo(t, srv, "PUT", "/admin/models/m/threshold", "", body)
		if n, auto := rt.Pools()[0].Balancer.OverflowThreshold(); code != 200 || n != 64 || !auto {
			t.Errorf("%s: %d %s -> %d auto %v, want 200 and auto 64", body, code, out, n, auto)
		}
	}
}

func TestAdminRequiresBearerToken(t *testing.T) {
	_, srv := newAdmin(t, "s3cret", "m")
	if code, _ := adminDo(t, srv, "GET", "/status", "", ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := adminDo(t, srv, "GET", "/status", "wrong", ""); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
	code, body := adminDo(t, srv, "GET", "/status", "s3cret", "")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Models) != 1 || len(st.Models[0].Replicas) != 2 || st.Models[0].Replicas[1].Name != "r1" ||
		!st.Models[0].Affinity || st.Models[0].OverflowThreshold != 64 {
		t.Fatalf("%+v", st)
	}
}

func TestRouterSetAffinityAllModels(t *testing.T) {
	rt, _ := newAdmin(t, "", "a", "b")
	for _, all := range []string{"", "*"} {
		if err := rt.SetAffinity(all, false); err != nil {
			t.Fatal(err)
		}
		for _, p := range rt.Pools() {
			if p.Balancer.Affinity() {
				t.Fatalf("%q left %s on", all, p.Model)
			}
		}
		rt.SetAffinity(all, true)
	}
	if err := rt.SetAffinity("c", true); err == nil {
		t.Fatal("unknown model accepted")
	}
}

// Regression: with a "*" pool a misspelt model name was applied to "*" with 200.
// Now the admin API takes a name a client asked the pool for and answers 404
// naming the known models (with a did-you-mean) for any other.
func TestAdminWildcardPoolRefusesUnknownModelName(t *testing.T) {
	f := newFront(t, true, func(cfg *Config) { cfg.AdminToken = "tok" }, newStub(t, "a"), newStub(t, "b"))
	admin := httptest.NewServer(f.rt.AdminHandler())
	defer admin.Close()
	if code, body := adminDo(t, admin, "PUT", "/admin/models/Qwen/Qwen3-4B/affinity", "tok", `{"enabled":false}`); code != 404 || !strings.Contains(body, "have *") {
		t.Fatalf("before any request: %d %s, want 404 naming *", code, body)
	}
	f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderClaudeSession: "s"}, chatBody("Qwen/Qwen3-4B"))
	code, body := adminDo(t, admin, "PUT", "/admin/models/Qwen/Qwen3-4b/affinity", "tok", `{"enabled":false}`)
	if code != 404 || !strings.Contains(body, "did you mean Qwen/Qwen3-4B?") || !strings.Contains(body, "have Qwen/Qwen3-4B, *") {
		t.Fatalf("misspelt: %d %s, want 404 with a did-you-mean", code, body)
	}
	if !f.rt.Pools()[0].Balancer.Affinity() {
		t.Fatal("the misspelt name switched affinity off for *")
	}
	if code, body := adminDo(t, admin, "PUT", "/admin/models/Qwen/Qwen3-4B/affinity", "tok", `{"enabled":false}`); code != 200 || f.rt.Pools()[0].Balancer.Affinity() {
		t.Fatalf("the served model's own name: %d %s", code, body)
	}
}

// A "*" pool's replicas name their models on GET /v1/models: those names are
// accepted before any client asked for them (a policy set before traffic).
func TestAdminWildcardPoolAcceptsTheReplicasModels(t *testing.T) {
	a := newStub(t, "a")
	a.setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"served-x","object":"model","owned_by":"vllm"}]}`)
	})
	f := newFront(t, true, func(cfg *Config) { cfg.AdminToken = "tok" }, a)
	admin := httptest.NewServer(f.rt.AdminHandler())
	defer admin.Close()
	if code, body := adminDo(t, admin, "PUT", "/admin/models/served-x/policy", "tok", `{"policy":"sticky"}`); code != 200 || f.rt.Pools()[0].Balancer.Policy() != "sticky" {
		t.Fatalf("a model the replica lists: %d %s", code, body)
	}
	if code, body := adminDo(t, admin, "PUT", "/admin/models/served-y/policy", "tok", `{"policy":"sticky"}`); code != 404 || !strings.Contains(body, "did you mean served-x?") {
		t.Fatalf("a misspelt one: %d %s", code, body)
	}
}

// The affinity log line names the pools the switch applied to, not only the
// name asked for (a served model name switches its whole "*" pool).
func TestAffinityLogNamesPools(t *testing.T) {
	var log bytes.Buffer
	cfg := Config{HealthInterval: -1, ScrapeInterval: -1, Logger: slog.New(slog.NewTextHandler(&log, nil)), Clock: &simclock.Manual{}}
	for _, m := range []string{"a", "b"} {
		cfg.Models = append(cfg.Models, ModelConfig{Name: m, Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1"}}})
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.SetAffinity("", false); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetAffinity("b", true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`msg="affinity switched" asked="" pools=a,b enabled=false`, `msg="affinity switched" asked=b pools=b enabled=true`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// GET /admin/models/{model}/session?key=K says where the router homes a
// conversation, names the key only by its hash, and needs the key.
func TestAdminSessionLookup(t *testing.T) {
	rt, srv := newAdmin(t, "", "m")
	b := rt.Pools()[0].Balancer
	d, err := b.Acquire(router.Facts{SessionKey: "conv-1", PromptTokens: 9000})
	if err != nil {
		t.Fatal(err)
	}
	b.ReleaseSession(d.Replica, "conv-1")
	code, body := adminDo(t, srv, "GET", "/admin/models/m/session?key=conv-1", "", "")
	var got struct {
		Session string        `json:"session"`
		Pools   []sessionInfo `json:"pools"`
	}
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("%d %s %v", code, body, err)
	}
	want := sessionInfo{Model: "m", Known: true, Home: b.Name(d.Replica), ContextTokens: 9000, Live: true}
	if len(got.Pools) != 1 || got.Session != KeyHash("conv-1") || strings.Contains(body, "conv-1") {
		t.Fatalf("answer %s: want the session named by its hash %s only", body, KeyHash("conv-1"))
	}
	if p := got.Pools[0]; p.Known != want.Known || p.Home != want.Home || p.ContextTokens != want.ContextTokens || p.Live != want.Live || p.Overflow != "" {
		t.Errorf("pool %+v, want %+v", p, want)
	}
	if _, body := adminDo(t, srv, "GET", "/admin/models/m/session?key=other", "", ""); !strings.Contains(body, `"known": false`) {
		t.Errorf("unknown key: %s", body)
	}
	if code, body := adminDo(t, srv, "GET", "/admin/models/m/session", "", ""); code != 400 || !strings.Contains(body, "key") {
		t.Errorf("no key: %d %s, want 400 naming key", code, body)
	}
	if code, _ := adminDo(t, srv, "PUT", "/admin/models/m/session?key=conv-1", "", ""); code != 405 {
		t.Errorf("PUT: %d, want 405", code)
	}
}
