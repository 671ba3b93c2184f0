package loadgen

import (
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
