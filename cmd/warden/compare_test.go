package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A virtual run compared with the same run recorded as an HTTP one is refused
// with exit 1 (an ordinary error, not a gate) saying which worlds and how to
// compare anyway; --force compares.
func TestCompareRefusesOtherWorld(t *testing.T) {
	a := filepath.Join(t.TempDir(), "virtual")
	if _, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/smoke.yaml", "--out", a); err != nil {
		t.Fatalf("bench --virtual: %v", err)
	}
	b := filepath.Join(t.TempDir(), "http")
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"manifest.json", "turns.jsonl", "series.csv"} {
		data, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "manifest.json" {
			data = []byte(strings.Replace(string(data), `"mode": "virtual"`, `"mode": "http-sim"`, 1))
			if !strings.Contains(string(data), `"mode": "http-sim"`) {
				t.Fatalf("manifest has no \"mode\": \"virtual\" to rewrite:\n%s", data)
			}
		}
		if err := os.WriteFile(filepath.Join(b, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := run(t, "compare", a, b)
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		t.Fatalf("compare virtual vs http-sim: err = %v, want a plain error (exit 1)", err)
	}
	for _, want := range []string{"worlds differ", `mode "virtual"`, `mode "http-sim"`, "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if out, err := run(t, "compare", a, b, "--force"); err != nil {
		t.Errorf("compare --force: %v\n%s", err, out)
	}
}
