package loadgen

import (
	"maps"
	"slices"
	"time"
)

// RunIDFormat is the time layout of a default run id (NewRunID).
const RunIDFormat = "20060102-150405"

// NewRunID returns the default id of a run started at t: t in UTC as RunIDFormat,
// e.g. "20261201-092449".
func NewRunID(t time.Time) string { return t.UTC().Format(RunIDFormat) }

// RunInfo is what a run records about itself in its manifest besides the
// scenario; see Manifest for each field. NewManifest applies no defaults to it:
// each world (the HTTP runner, the virtual world) fills in its own.
type RunInfo struct {
	RunID    string
	Mode     string
	Target   string
	Speed    float64 // simulated seconds per wall second; 0 in virtual time (unpaced)
	Replicas []string
	Profile  string
	Policy   string
	Versions map[string]string
	Notes    []string
	Engines  []ReplicaEngine // per replica scraped: engine kind and column sources (Manifest.Engines)
}

// NewManifest returns the manifest of a run of sc created at created (stored in
// UTC), with the seed taken from sc and no variants yet: the one assembler of
// manifests for both worlds. Slices and maps are copied from info.
func NewManifest(sc *Scenario, created time.Time, info RunInfo) *Manifest {
	return &Manifest{
		RunID:    info.RunID,
		Created:  created.UTC(),
		Mode:     info.Mode,
		Target:   info.Target,
		Scenario: sc,
		Seed:     sc.Seed,
		Speed:    info.Speed,
		Replicas: slices.Clone(info.Replicas),
		Profile:  info.Profile,
		Engines:  slices.Clone(info.Engines),
		Policy:   info.Policy,
		Versions: maps.Clone(info.Versions),
		Notes:    slices.Clone(info.Notes),
	}
}
