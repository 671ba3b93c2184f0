package bench

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
)

// Before each variant the harness makes a router it did not start forget its
// session homes (a second run with the same seed sends the same session ids;
// fresh-user finding: its first turns all went to the first run's homes) and
// switches affinity.
func TestAdminSwitchResetsHomes(t *testing.T) {
	t.Parallel()
	cfg, err := routerhttp.ConfigForURLs([]string{"http://127.0.0.1:9", "http://127.0.0.1:10"}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdminToken = "tok"
	cfg.HealthInterval, cfg.ScrapeInterval = -1, -1
	rt, err := routerhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := rt.Pools()[0].Balancer
	d, err := b.Acquire(router.Facts{SessionKey: "an-earlier-run"})
	if err != nil {
		t.Fatal(err)
	}
	b.Release(d.Replica)
	if b.Sessions() != 1 {
		t.Fatalf("%d sessions before the switch, want 1", b.Sessions())
	}
	admin := httptest.NewServer(rt.AdminHandler())
	defer admin.Close()
	if err := adminSwitch(admin.URL, "tok")(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if b.Sessions() != 0 || b.Affinity() {
		t.Errorf("after the switch: %d sessions, affinity %v; want 0, false", b.Sessions(), b.Affinity())
	}
	if err := adminSwitch(admin.URL, "wrong")(context.Background(), true); err == nil {
		t.Error("a wrong token was not reported")
	}
}
