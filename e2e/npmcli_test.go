package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// npmCLI describes an agent CLI the e2e tests run: its npm package, its binary
// name, the environment variable that names an installed binary instead, the
// directory below the e2e cache it is installed into, and the environment its
// `--version` runs with (besides PATH and HOME, given a scratch home).
type npmCLI struct {
	what, pkg, bin, envVar, dir string
	env                         func(home string) []string
}

// cacheDir is where the CLI is installed and kept between runs: below
// WARDEN_E2E_CACHE, else the user cache's warden-e2e.
func (c npmCLI) cacheDir() string {
	if d := os.Getenv("WARDEN_E2E_CACHE"); d != "" {
		return filepath.Join(d, c.dir)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "warden-e2e", c.dir)
}

// version runs `bin --version` (bounded, in a scratch home) and returns its output.
func (c npmCLI) version(bin string) (string, error) {
	home, err := os.MkdirTemp("", "warden-"+c.dir+"-home")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, c.env(home)...)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// find returns a working binary: the one envVar names, or the one installed in
// cacheDir, installing the package with npm (bounded to 5 minutes) when missing.
// It skips the test, saying why, when npm or the install is not available.
func (c npmCLI) find(t *testing.T) (bin, version string) {
	t.Helper()
	if p := os.Getenv(c.envVar); p != "" {
		v, err := c.version(p)
		if err != nil {
			t.Fatalf("%s=%s: %v", c.envVar, p, err)
		}
		return p, v
	}
	dir := c.cacheDir()
	bin = filepath.Join(dir, "node_modules", ".bin", c.bin)
	if v, err := c.version(bin); err == nil {
		return bin, v
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("skipping the %s test: npm is not installed (apt-get install npm)", c.what)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("skipping the %s test: %v", c.what, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Logf("installing %s into %s (once; reused by later runs)", c.pkg, dir)
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", c.pkg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("skipping the %s test: npm install %s failed: %v\n%s", c.what, c.pkg, err, lastLines(string(out), 10))
	}
	v, err := c.version(bin)
	if err != nil {
		t.Skipf("skipping the %s test: installed CLI does not run: %v", c.what, err)
	}
	return bin, v
}
