package main

import (
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/router/routerhttp"
)

// `warden route --admission off|fit` (fresh-user finding: route had no such
// flag): without --config it sets every model's mode; with --config, given, it
// overrides the file's mode and keeps the file's other admission settings, and
// not given it leaves the file alone.
func TestRouteAdmissionFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeTestFile(t, dir, name, body) }
	replicas := "    replicas: [{url: \"http://127.0.0.1:9\"}]\n"
	plain := write("plain.yaml", "models:\n  - name: m\n"+replicas)
	tuned := write("tuned.yaml", "models:\n  - name: m\n"+replicas+"    admission:\n      mode: fit\n      max_hold: 3m\n")
	configOf := func(args ...string) (routerhttp.Config, error) { return routeConfigOf(t, args...) }
	for _, c := range []struct {
		args []string
		mode string
		hold time.Duration
	}{
		{[]string{"--replica", "http://127.0.0.1:9"}, "", 0},
		{[]string{"--replica", "http://127.0.0.1:9", "--admission", "fit"}, "fit", 0},
		{[]string{"--config", plain}, "", 0},
		{[]string{"--config", plain, "--admission", "fit"}, "fit", 0},
		{[]string{"--config", tuned}, "fit", 3 * time.Minute},
		{[]string{"--config", tuned, "--admission", "off"}, "off", 3 * time.Minute}, // the flag over the file's mode only
	} {
		cfg, err := configOf(c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if a := cfg.Models[0].Admission; a.Mode != c.mode || a.MaxHold != c.hold {
			t.Errorf("%v: admission mode %q max_hold %v, want %q %v", c.args, a.Mode, a.MaxHold, c.mode, c.hold)
		}
	}
	if _, err := configOf("--replica", "http://127.0.0.1:9", "--admission", "fits"); err == nil || !strings.Contains(err.Error(), `--admission "fits": want off or fit`) {
		t.Errorf("--admission fits: %v, want an error naming the flag", err)
	}
}
