package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestNewManifest(t *testing.T) {
	sc := TinyScenario()
	created := time.Date(2026, 12, 1, 10, 24, 49, 0, time.FixedZone("CET", 3600))
	info := RunInfo{RunID: "x", Mode: "virtual", Replicas: []string{"r0"}, Versions: map[string]string{"go": "go1"}, Notes: []string{"n"}}
	m := NewManifest(sc, created, info)
	if m.Seed != sc.Seed || m.Scenario != sc || m.Created.Location() != time.UTC || !m.Created.Equal(created) {
		t.Errorf("manifest %+v", m)
	}
	// The manifest shares no slice or map with info.
	info.Replicas[0], info.Versions["go"], info.Notes[0] = "changed", "changed", "changed"
	if m.Replicas[0] != "r0" || m.Versions["go"] != "go1" || m.Notes[0] != "n" {
		t.Errorf("manifest aliases info: %+v", m)
	}
	// Absent stays absent (JSON null, as before).
	if m := NewManifest(sc, created, RunInfo{}); m.Replicas != nil || m.Versions != nil || m.Notes != nil {
		t.Errorf("empty info gave %+v", m)
	}
	if got := NewRunID(created); got != "20261201-092449" {
		t.Errorf("NewRunID = %q", got)
	}
}

// The admission gate goes into the manifest (fresh-user finding: a run with
// --admission fit did not record it) with its durations as Go duration
// strings, the settings only when on; it reads back, and NewManifest copies it.
func TestManifestAdmission(t *testing.T) {
	fit := &Admission{Mode: "fit", FillTarget: 0.9, MaxHold: 10 * time.Minute, MaxQueue: -1, OnLimit: "refuse", KeepAliveAfter: -time.Second}
	for _, tc := range []struct {
		a    *Admission
		want string
	}{
		{fit, `"admission":{"mode":"fit","fill_target":0.9,"max_hold":"10m0s","max_queue":-1,"on_limit":"refuse","keepalive_after":"-1s"}`},
		{&Admission{Mode: "off", FillTarget: 1, MaxHold: time.Minute}, `"admission":{"mode":"off"}`},
		{nil, ""}, // not recorded: absent
	} {
		m := NewManifest(TinyScenario(), time.Now(), RunInfo{Admission: tc.a})
		if tc.a != nil && m.Admission == tc.a {
			t.Error("the manifest shares its admission with info")
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if strings.Contains(string(b), `"admission"`) {
				t.Errorf("nil admission written: %s", b)
			}
			continue
		}
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("manifest %s lacks %s", b, tc.want)
		}
		var back Manifest
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		want := *tc.a
		if !want.On() {
			want = Admission{Mode: "off"}
		}
		if back.Admission == nil || *back.Admission != want {
			t.Errorf("read back %+v, want %+v", back.Admission, want)
		}
	}
	if got := fit.String(); got != "fit (fill_target 0.9, max_hold 10m0s, max_queue -1, on_limit refuse, keepalive_after -1s)" {
		t.Errorf("String() = %q", got)
	}
	if (*Admission)(nil).String() != "not recorded" || (&Admission{Mode: "off"}).String() != "off" || (*Admission)(nil).On() {
		t.Error("nil and off admissions")
	}
}
