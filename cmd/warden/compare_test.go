package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/report"
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

// warden compare --junit on the committed runs (the virtual baseline against
// the simulator run over HTTP, --force: other worlds) writes one testcase per
// stage and gate, and exactly the gates report.Compare finds crossed fail, each
// with its numbers in the message.
func TestCompareJUnit(t *testing.T) {
	a, b := "../../results/baseline/virtual-reference", "../../results/reference-sim-a4000"
	gates := []string{"output_tokens_per_min:-1%", "ttfb_p95_s:+5%", "on/prefix_hits_pct:-0.1"}
	args := []string{"compare", a, b, "--force", "--strict-gates"}
	opts := report.CompareOptions{Force: true, StrictGates: true}
	for _, g := range gates {
		args = append(args, "--fail-on", g)
		gate, err := report.ParseGate(g)
		if err != nil {
			t.Fatal(err)
		}
		opts.FailOn = append(opts.FailOn, gate)
	}
	want, werr := report.Compare(a, b, io.Discard, opts)
	if !errors.Is(werr, report.ErrThresholdExceeded) || len(want.Violations) == 0 || len(want.Violations) == len(want.Checks) {
		t.Fatalf("report.Compare: %d violations of %d checks, err %v: want some gates to fail and some to pass", len(want.Violations), len(want.Checks), werr)
	}
	file := filepath.Join(t.TempDir(), "compare.xml")
	_, err := run(t, append(args, "--junit", file)...)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitGate {
		t.Fatalf("compare --junit: err = %v, want exit %d (a gate crossed)", err, ExitGate)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc report.JUnitSuites
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("parsing %s: %v\n%s", file, err, data)
	}
	cases := map[string]report.JUnitCase{}
	n, failures := 0, 0
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			cases[c.ClassName+"|"+c.Name] = c
			n++
			if c.Failure != nil {
				failures++
			}
		}
	}
	if len(want.Checks) != len(want.Stages)*2+len(want.Stages)/2 || n != len(want.Checks) || doc.Tests != n || doc.Failures != failures || failures != len(want.Violations) {
		t.Errorf("JUnit: %d cases (tests=%d), %d failures (failures=%d); want %d checks (%d stages x 2 gates, + the on stages' hit gate) and %d violations",
			n, doc.Tests, failures, doc.Failures, len(want.Checks), len(want.Stages), len(want.Violations))
	}
	for _, gc := range want.Checks {
		key := fmt.Sprintf("%s.%s|stage %d (%d sessions): %s", report.JUnitClass, gc.Variant, gc.Stage+1, gc.Sessions, gc.Gate)
		c, ok := cases[key]
		switch {
		case !ok:
			t.Errorf("no testcase %q", key)
		case gc.Failed != (c.Failure != nil):
			t.Errorf("testcase %q: failure %v, want failed=%v", key, c.Failure, gc.Failed)
		case gc.Failed:
			noise := "95% CI +-"
			if math.IsNaN(gc.Delta.CIHalf) {
				noise = "no noise estimate"
			}
			for _, s := range []string{gc.Delta.Metric + " A ", " -> B ", noise, "beyond limit " + gc.Gate.String()} {
				if !strings.Contains(c.Failure.Message, s) {
					t.Errorf("testcase %q: failure message %q does not say %q", key, c.Failure.Message, s)
				}
			}
		}
	}
}

// A comparison that does not run (other worlds, no --force) still writes its
// JUnit file: one case in error, saying why.
func TestCompareJUnitRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "compare.xml")
	_, err := run(t, "compare", "../../results/baseline/virtual-reference", "../../results/reference-sim-a4000", "--junit", file)
	if err == nil {
		t.Fatal("compare of other worlds without --force: no error")
	}
	data, rerr := os.ReadFile(file)
	if rerr != nil {
		t.Fatal(rerr)
	}
	var doc report.JUnitSuites
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Errors != 1 || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != 1 || doc.Suites[0].Cases[0].Error == nil ||
		!strings.Contains(doc.Suites[0].Cases[0].Error.Message, "worlds differ") {
		t.Errorf("JUnit of a refused comparison:\n%s", data)
	}
}
