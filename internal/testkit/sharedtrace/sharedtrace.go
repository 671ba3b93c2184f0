// Package sharedtrace locates the public request traces that tests read in
// place from ../shared/fixtures/traces/ beside the module root; they are never
// copied into the repository. Where the folder is absent a test skips, saying
// why, except under CI=true, where it fails.
package sharedtrace

import (
	"os"
	"path/filepath"
	"testing"
)

// Mooncake is the Mooncake FAST'25 conversation trace (public source:
// kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl).
const Mooncake = "mooncake/conversation_trace.jsonl"

// Path returns the absolute path of rel under ../shared/fixtures/traces/ next
// to the module root (the folder holding go.mod, found from the working
// directory upward). A missing file skips t, or fails it when CI=true.
func Path(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatalf("sharedtrace: no go.mod above the working directory")
		}
		dir = up
	}
	p := filepath.Join(dir, "..", "shared", "fixtures", "traces", rel)
	if _, err := os.Stat(p); err != nil {
		msg := "public trace " + rel + " not found at " + p + " (read in place from ../shared/fixtures/traces/, never committed): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}
