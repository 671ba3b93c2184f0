package main

import (
	"runtime"
	"testing"

	"github.com/lmwarden/warden/internal/buildinfo"
)

// `warden version` prints the string the manifest records (internal/buildinfo)
// and the Go version.
func TestVersionPrintsBuildinfo(t *testing.T) {
	out, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if want := "warden " + buildinfo.Version() + " " + runtime.Version() + "\n"; out != want {
		t.Errorf("warden version printed %q, want %q", out, want)
	}
}
