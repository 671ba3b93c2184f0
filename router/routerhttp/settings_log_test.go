package routerhttp

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
)

// The fresh-user finding: nothing at start said whether admission was on or
// shared state configured. ListenAndServe logs, per model, the admission mode
// (with its settings when fit) and the state URL without its password; an
// admission change through the admin API is logged as an affinity switch is.
func TestStartLogsModelSettings(t *testing.T) {
	var log syncBuffer
	yaml := "listen: 127.0.0.1:0\nadmin_listen: \"-\"\nstate: redis://u:secret@127.0.0.1:1/0\nhealth_interval: -1s\nscrape_interval: -1s\n" +
		"models:\n" +
		"  - name: fit\n    admission: {mode: fit, max_hold: 3m}\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n" +
		"  - name: plain\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"
	cfg, err := ParseConfig(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.ListenAndServe(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "router listening"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the router did not start:\n%s", log.String())
		}
	}
	cancel()
	<-done
	var fit, plain string
	for _, l := range strings.Split(log.String(), "\n") {
		switch {
		case strings.Contains(l, `msg="model settings" model=fit`):
			fit = l
		case strings.Contains(l, `msg="model settings" model=plain`):
			plain = l
		}
	}
	for _, want := range []string{"admission=fit", "fill_target=1", "max_hold=3m0s", "max_queue=1024", "on_limit=admit", "keepalive_after=1m0s", "state=redis://u:xxx@127.0.0.1:1/0", "policy=working-set", "affinity=true"} {
		if !strings.Contains(fit, want) {
			t.Errorf("the fit model's line lacks %s: %q", want, fit)
		}
	}
	if !strings.Contains(plain, "admission=off") || strings.Contains(plain, "max_hold") {
		t.Errorf("the plain model's line %q: want admission=off without its settings", plain)
	}
	if strings.Contains(log.String(), "secret") {
		t.Errorf("the log has the state password:\n%s", log.String())
	}

	// An admission change through the admin API.
	var adminLog syncBuffer
	rt2, err := New(Config{HealthInterval: -1, ScrapeInterval: -1, Clock: &simclock.Manual{},
		Logger: slog.New(slog.NewTextHandler(&adminLog, nil)),
		Models: []ModelConfig{{Name: "m", Replicas: []ReplicaConfig{{URL: "http://127.0.0.1:1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt2.AdminHandler())
	defer srv.Close()
	if code, body := adminDo(t, srv, "PUT", "/admin/models/m/admission", "", `{"mode":"fit","max_hold":"2m"}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if l := adminLog.String(); !strings.Contains(l, `msg="admission changed" model=m admission=fit`) || !strings.Contains(l, "max_hold=2m0s") {
		t.Errorf("the admission change is not logged with its settings:\n%s", l)
	}
	// Policy and threshold changes too.
	if code, body := adminDo(t, srv, "PUT", "/admin/models/m/policy", "", `{"policy":"sticky"}`); code != 200 {
		t.Fatalf("PUT policy: %d %s", code, body)
	}
	if code, body := adminDo(t, srv, "PUT", "/admin/models/m/threshold", "", `{"threshold":5}`); code != 200 {
		t.Fatalf("PUT threshold: %d %s", code, body)
	}
	if l := adminLog.String(); !strings.Contains(l, `msg="policy switched" model=m policy=sticky`) || !strings.Contains(l, `msg="overflow threshold set" model=m threshold=5`) {
		t.Errorf("policy and threshold changes are not logged:\n%s", l)
	}
}
