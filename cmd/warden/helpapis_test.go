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
	for _, p := range append([]string{wire.PathHealth, wire.PathReady}, routerhttp.ProxiedPaths...) {
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
