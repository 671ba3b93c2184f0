// Package buildinfo is the one version string of the running binary, read from
// the build information the Go toolchain embeds (runtime/debug.ReadBuildInfo):
// `warden version` prints it and `warden bench` writes it into the manifest's
// versions (loadgen.Manifest.Versions["warden"]).
package buildinfo

import "runtime/debug"

// Version is the module version and, when the build recorded one, the first 12
// hex digits of the VCS revision: "v1.2.3 (0123456789ab)", "(devel)
// (0123456789ab)" for a build from a checkout, "(devel)" for one without VCS
// information (go test, go run), "unknown" without build information.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return format(bi)
}

// format is Version for given build information.
func format(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return v
}
