package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// route --help names every endpoint the proxy routes (and its liveness and
// readiness paths), and sim --help every
// endpoint a simulated server answers (probed on a real one), so neither list
// drifts from the code.
func TestHelpListsTheAPIs(t *testing.T) {
	routeHelp, _ := run(t, "route", "--help")
	for _, p := range append([]string{wire.PathHealth, wire.PathReady, wire.PathLive}, routerhttp.ProxiedPaths...) {
		if !strings.Contains(routeHelp, p) {
			t.Errorf("route --help does not name %s, which the router proxies", p)
		}
	}
	srv, err := simhttp.NewServer(simhttp.DefaultConfig(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	simHelp, _ := run(t, "sim", "--help")
	for _, p := range []string{wire.PathChatCompletions, wire.PathCompletions, wire.PathMessages, wire.PathResponses,
		wire.PathCountTokens, wire.PathModels, wire.PathHealth, wire.PathMetrics, wire.PathVersion,
		wire.PathResetPrefixCache, wire.PathTokenize, wire.PathApplyTemplate} {
		served := false
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequest(m, ts.URL+p, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			served = served || resp.StatusCode != http.StatusNotFound
		}
		if served != strings.Contains(simHelp, p) {
			t.Errorf("%s: served by the simulator %v, named in sim --help %v", p, served, !served)
		}
	}
}

// keySourceCount is the number of routerhttp.KeySource values (KeyNone
// included): KeySource.String indexes a table of names and panics past it.
func keySourceCount() (n int) {
	defer func() { _ = recover() }()
	for ; ; n++ {
		_ = routerhttp.KeySource(n).String()
	}
}

// route --help names every source the router reads a session key from. Each
// routerhttp.KeySource has requests here that ExtractKey keys from it (so the
// names below are the code's, not a copy that could drift: a header list is
// routerhttp.CodexSessionHeaders or DefaultSessionHeaders itself), and the help
// must name each request's header or body field; a new KeySource fails until it
// has a row.
func TestRouteHelpListsTheSessionKeys(t *testing.T) {
	help, _ := run(t, "route", "--help")
	flat := strings.ToLower(strings.Join(strings.Fields(help), " "))
	type source struct {
		header string // header name sent with value "k"
		body   string
		cfg    routerhttp.KeyConfig
		names  []string // what the help must name (the header by default)
	}
	headers := func(names []string, cfg routerhttp.KeyConfig, extra ...string) []source {
		var out []source
		for _, h := range names {
			out = append(out, source{header: h, cfg: cfg, names: append([]string{h}, extra...)})
		}
		return out
	}
	sources := map[routerhttp.KeySource][]source{
		routerhttp.KeyClaudeHeader: headers([]string{wire.HeaderClaudeSession}, routerhttp.KeyConfig{}),
		routerhttp.KeyMetadataJSON: {{body: `{"metadata":{"user_id":"{\"session_id\":\"k\"}"}}`, names: []string{"metadata.user_id"}}},
		routerhttp.KeyMetadataLegacy: {{body: `{"metadata":{"user_id":"user_ab_account__session_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}}`,
			names: []string{"metadata.user_id"}}},
		routerhttp.KeyHeader: append(headers(routerhttp.DefaultSessionHeaders, routerhttp.KeyConfig{}),
			source{header: "X-Other-Session", cfg: routerhttp.KeyConfig{Headers: []string{"X-Other-Session"}}, names: []string{"session_headers"}}),
		routerhttp.KeyOpenAIUser: {{body: `{"user":"k"}`, cfg: routerhttp.KeyConfig{UseOpenAIUser: true},
			names: []string{"user field", "use_openai_user"}}},
		routerhttp.KeyCodexHeader:    headers(routerhttp.CodexSessionHeaders, routerhttp.KeyConfig{}),
		routerhttp.KeyPromptCacheKey: {{body: `{"prompt_cache_key":"k"}`, names: []string{"prompt_cache_key"}}},
	}
	n := keySourceCount()
	if n < 2 {
		t.Fatalf("%d key sources", n)
	}
	for s := routerhttp.KeySource(1); int(s) < n; s++ {
		cases, ok := sources[s]
		if !ok {
			t.Errorf("key source %s has no row here: add one, and name it in route --help", s)
			continue
		}
		for _, c := range cases {
			h := http.Header{}
			if c.header != "" {
				h.Set(c.header, "k")
			}
			info, err := routerhttp.ExtractKey(h, []byte(c.body), c.cfg)
			if err != nil || info.Source != s {
				t.Errorf("%s: header %q body %s keyed from %s (%v), want %s", s, c.header, c.body, info.Source, err, s)
			}
			for _, name := range c.names {
				// Header names are case-insensitive; the help may wrap a phrase.
				if !strings.Contains(flat, strings.ToLower(name)) {
					t.Errorf("route --help does not name %q, a session key source (%s) the router reads", name, s)
				}
			}
		}
	}
	if !strings.Contains(flat, "previous_response_id") {
		t.Error("route --help does not say that a Responses continuation follows its previous_response_id")
	}
}
