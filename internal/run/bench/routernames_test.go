package bench

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/warden/router/routerhttp"
)

// With an outside router, replicas given as bare URLs take the router's own
// names (from its admin GET /status), so turns.jsonl (router names) and
// series.csv (harness scrapes) line up; a DP-rank URL takes the base name; a URL
// the router does not list keeps r<i> with a warning (fresh-user finding).
func TestReplicasTakeTheRouterNames(t *testing.T) {
	t.Parallel()
	cfg, err := routerhttp.ConfigForURLs([]string{"alpha=http://127.0.0.1:9/", "beta=http://127.0.0.1:10"}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Models[0].Replicas[1].DPRanks = 2
	cfg.AdminToken = "tok"
	cfg.HealthInterval, cfg.ScrapeInterval = -1, -1
	rt, err := routerhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(rt.AdminHandler())
	defer admin.Close()

	rcfgs, err := replicaConfigs([]string{"http://127.0.0.1:10", "http://127.0.0.1:9", "mine=http://127.0.0.1:9", "http://127.0.0.1:11"})
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	nameLikeRouter(context.Background(), &progress, rcfgs, admin.URL, "tok")
	got := []string{rcfgs[0].Name, rcfgs[1].Name, rcfgs[2].Name, rcfgs[3].Name}
	want := []string{"beta", "alpha", "mine", ""}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("names %q, want %q", got, want)
			break
		}
	}
	if !strings.Contains(progress.String(), "does not list http://127.0.0.1:11") {
		t.Errorf("no warning for the unknown URL: %q", progress.String())
	}

	// A wrong token: names stay as given, with a warning that says why.
	rcfgs, _ = replicaConfigs([]string{"http://127.0.0.1:9"})
	progress.Reset()
	nameLikeRouter(context.Background(), &progress, rcfgs, admin.URL, "wrong")
	if rcfgs[0].Name != "" || !strings.Contains(progress.String(), "status 401") {
		t.Errorf("wrong token: name %q, progress %q", rcfgs[0].Name, progress.String())
	}
}
