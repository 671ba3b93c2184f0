package loadgen

import (
	"encoding/json"
	"fmt"
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
	// Subagents: the router's subagent rule (Manifest.Subagents).
	Subagents string
	Versions  map[string]string
	Notes     []string
	Engines   []ReplicaEngine // per replica scraped: engine kind and column sources (Manifest.Engines)
	// Admission is the router's admission gate (Manifest.Admission); nil
	// when the harness does not configure the router (an external one).
	Admission *Admission
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
		// Set only where the harness configures the router.
		Subagents: info.Subagents,
		Versions:  maps.Clone(info.Versions),
		Notes:     slices.Clone(info.Notes),
		// A copy: the manifest shares nothing with info.
		Admission: clonePtr(info.Admission),
	}
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// Admission is the admission gate of the router a run went through
// (Manifest.Admission; router.AdmissionConfig with its defaults resolved, as
// the harness set it): mode "off" (no settings recorded) or "fit" with every
// setting. In JSON the durations are Go duration strings ("10m0s").
type Admission struct {
	Mode           string        // "off" or "fit"
	FillTarget     float64       // share of each replica's KV cache
	MaxHold        time.Duration // negative: no limit
	MaxQueue       int           // negative: no limit
	OnLimit        string        // "admit" or "refuse"
	KeepAliveAfter time.Duration // negative: never
}

// On reports whether the gate was on (a mode other than off); false for nil.
func (a *Admission) On() bool { return a != nil && a.Mode != "" && a.Mode != "off" }

// String is the one-line form summary.md and warden compare print: "off", or
// "fit (fill_target 1, max_hold 10m0s, max_queue 1024, on_limit admit,
// keepalive_after 1m0s)"; "not recorded" for nil.
func (a *Admission) String() string {
	switch {
	case a == nil:
		return "not recorded"
	case !a.On():
		return "off"
	}
	return fmt.Sprintf("%s (fill_target %g, max_hold %s, max_queue %d, on_limit %s, keepalive_after %s)",
		a.Mode, a.FillTarget, a.MaxHold, a.MaxQueue, a.OnLimit, a.KeepAliveAfter)
}

// admissionJSON is Admission in the manifest: the settings only when on.
type admissionJSON struct {
	Mode           string  `json:"mode"`
	FillTarget     float64 `json:"fill_target,omitempty"`
	MaxHold        string  `json:"max_hold,omitempty"`
	MaxQueue       int     `json:"max_queue,omitempty"`
	OnLimit        string  `json:"on_limit,omitempty"`
	KeepAliveAfter string  `json:"keepalive_after,omitempty"`
}

// MarshalJSON writes the mode, and the settings when the gate is on.
func (a Admission) MarshalJSON() ([]byte, error) {
	if !a.On() {
		return json.Marshal(admissionJSON{Mode: "off"})
	}
	return json.Marshal(admissionJSON{
		Mode: a.Mode, FillTarget: a.FillTarget, MaxHold: a.MaxHold.String(), MaxQueue: a.MaxQueue,
		OnLimit: a.OnLimit, KeepAliveAfter: a.KeepAliveAfter.String(),
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Admission) UnmarshalJSON(b []byte) error {
	var j admissionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	out := Admission{Mode: j.Mode, FillTarget: j.FillTarget, MaxQueue: j.MaxQueue, OnLimit: j.OnLimit}
	for _, d := range []struct {
		name, in string
		out      *time.Duration
	}{{"max_hold", j.MaxHold, &out.MaxHold}, {"keepalive_after", j.KeepAliveAfter, &out.KeepAliveAfter}} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			return fmt.Errorf("admission %s: %w", d.name, err)
		}
		*d.out = v
	}
	*a = out
	return nil
}
