package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/lmwarden/warden/router/routerhttp"
)

// `warden route` draws its tie-break seed from the clock
// unless one is set (the seed field of the config file, even 0, or --seed), so
// restarts do not repeat the same tie-breaks (seed 0 gave r1 r1 r3 r0 r2 r1
// after every restart).
func TestRouteSeedsFromClockUnlessSet(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeTestFile(t, dir, name, body) }
	models := "models:\n  - name: m\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"
	noSeed := write("noseed.yaml", models)
	seed0 := write("seed0.yaml", "seed: 0\n"+models)
	seed5 := write("seed5.yaml", "seed: 5\n"+models)
	seedOf := func(args ...string) uint64 {
		t.Helper()
		cfg, err := routeConfigOf(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return cfg.Seed
	}
	for _, args := range [][]string{{"--replica", "http://127.0.0.1:9"}, {"--config", noSeed}} {
		a, b := seedOf(args...), seedOf(args...)
		if a == b || a == 0 || b == 0 {
			t.Errorf("%v: two starts drew seeds %d and %d, want two different clock seeds", args, a, b)
		}
	}
	for _, c := range []struct {
		args []string
		want uint64
	}{
		{[]string{"--config", seed0}, 0}, // set in the file, even to 0: kept
		{[]string{"--config", seed5}, 5},
		{[]string{"--config", seed5, "--seed", "9"}, 9}, // the flag over the file
		{[]string{"--replica", "http://127.0.0.1:9", "--seed", "0"}, 0},
	} {
		if got := seedOf(c.args...); got != c.want {
			t.Errorf("%v: seed %d, want %d", c.args, got, c.want)
		}
	}
}

// writeTestFile writes body to dir/name and returns the path.
func writeTestFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// routeConfigOf is the router config `warden route args...` would start with.
func routeConfigOf(t *testing.T, args ...string) (routerhttp.Config, error) {
	t.Helper()
	var o routeOpts
	fs := pflag.NewFlagSet("route", pflag.ContinueOnError)
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o.config(fs)
}

// --speed runs the router's clock at a simulator's pace; it must be positive.
func TestRouteSpeed(t *testing.T) {
	cfg, err := routeConfigOf(t, "--replica", "http://127.0.0.1:9", "--speed", "50")
	if err != nil {
		t.Fatal(err)
	}
	t0 := cfg.Clock.Now()
	time.Sleep(40 * time.Millisecond)
	if d := cfg.Clock.Now() - t0; d < time.Second {
		t.Errorf("40 ms of wall time at --speed 50 read %v on the router's clock, want at least 1 s (2 s nominal)", d)
	}
	for _, bad := range []string{"0", "-2", "+Inf"} {
		if _, err := routeConfigOf(t, "--replica", "http://127.0.0.1:9", "--speed", bad); err == nil || !strings.Contains(err.Error(), "--speed") {
			t.Errorf("--speed %s: %v, want an error naming --speed", bad, err)
		}
	}
}
