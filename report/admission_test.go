package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// fitGate is an admission gate as a bench run with --admission fit records it.
var fitGate = &loadgen.Admission{Mode: "fit", FillTarget: 1, MaxHold: 10 * time.Minute, MaxQueue: 1024, OnLimit: "admit", KeepAliveAfter: time.Minute}

// The fresh-user finding: a run with admission on did not say so. summary.md's
// header names the gate with its settings when it was on, and says nothing
// (as before) when it was off or not recorded.
func TestSummaryHeaderNamesAdmission(t *testing.T) {
	dir := t.TempDir()
	m, r, s := syntheticRun()
	writeRunDir(t, dir, m, r, s)
	run, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := Summarize(run)
	if err != nil {
		t.Fatal(err)
	}
	const line = "- admission with affinity on: fit (fill_target 1, max_hold 10m0s, max_queue 1024, on_limit admit, keepalive_after 1m0s)\n"
	for _, tc := range []struct {
		name string
		a    *loadgen.Admission
		want bool
	}{
		{"not recorded", nil, false},
		{"off", &loadgen.Admission{Mode: "off"}, false},
		{"fit", fitGate, true},
	} {
		m.Admission = tc.a
		md := string(SummaryMarkdown(m, sums, nil, nil))
		if got := strings.Contains(md, line); got != tc.want {
			t.Errorf("%s: header has the admission line: %v, want %v:\n%s", tc.name, got, tc.want, md[:min(len(md), 800)])
		}
		if !tc.want && strings.Contains(md, "admission with affinity on") {
			t.Errorf("%s: an admission line in the header:\n%s", tc.name, md[:min(len(md), 800)])
		}
	}
}

// warden compare says when the runs' admission or policy differ (they act in
// the affinity-on variants, so the differences include their effect), above
// and below the tables; runs that differ in neither get no such note.
func TestCompareNotesRouterSettings(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name   string
		a, b   *loadgen.Admission
		policy string // B's policy; A's is the synthetic run's
		sub    string // B's subagent rule; A's is keep
		want   []string
	}{
		{"same", &loadgen.Admission{Mode: "off"}, &loadgen.Admission{Mode: "off"}, "", "", nil},
		// A run from before admission was recorded is taken as off.
		{"not recorded vs off", nil, &loadgen.Admission{Mode: "off"}, "", "", nil},
		{"off vs fit", &loadgen.Admission{Mode: "off"}, fitGate, "", "", []string{"admission off vs fit (fill_target 1, max_hold 10m0s, max_queue 1024, on_limit admit, keepalive_after 1m0s)"}},
		{"not recorded vs fit", nil, fitGate, "", "", []string{"admission not recorded vs fit (fill_target 1, "}},
		{"fit settings", fitGate, &loadgen.Admission{Mode: "fit", FillTarget: 0.9, MaxHold: 10 * time.Minute, MaxQueue: 1024, OnLimit: "admit", KeepAliveAfter: time.Minute}, "", "", []string{"admission fit (fill_target 1, max_hold 10m0s, max_queue 1024, on_limit admit, keepalive_after 1m0s) vs fit (fill_target 0.9, "}},
		{"policy", nil, nil, "working-set", "", []string{"policy sticky vs working-set"}},
		{"subagents", nil, nil, "", "follow", []string{"subagent rule keep vs follow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, r, s := syntheticRun()
			m.Admission = tc.a
			writeRunDir(t, dirA, m, r, s)
			pa := m.Policy
			m.Admission = tc.b
			if tc.policy != "" {
				m.Policy = tc.policy
			}
			m.Subagents = tc.sub
			writeRunDir(t, dirB, m, r, s)
			if pa != "sticky" {
				t.Fatalf("the synthetic run's policy is %q: fix the test", pa)
			}
			var out bytes.Buffer
			c, err := Compare(dirA, dirB, &out, CompareOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Settings) != len(tc.want) {
				t.Errorf("settings notes %q, want %d", c.Settings, len(tc.want))
			}
			text := out.String()
			for _, w := range tc.want {
				if !strings.Contains(text, "note: the runs' router settings differ: "+w) {
					t.Errorf("output lacks the notice %q:\n%s", w, text[:min(len(text), 600)])
				}
				if !strings.Contains(text[strings.LastIndex(text, "│"):], w) {
					t.Errorf("the notice %q is not repeated below the tables", w)
				}
			}
			if tc.want == nil && strings.Contains(text, "router settings differ") {
				t.Errorf("a settings notice for runs that do not differ:\n%s", text)
			}
		})
	}
}
