// Package layout holds checks of the module's package layout (no code of its own).
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// pureCores are the packages that must not link net/http (brief style.md: pure
// cores beside their HTTP shells), so the virtual-time world and the report cannot
// come to depend on HTTP by accident.
var pureCores = []string{
	"github.com/lmwarden/warden/router",
	"github.com/lmwarden/warden/loadgen",
	"github.com/lmwarden/warden/sim",
	"github.com/lmwarden/warden/report",
	"github.com/lmwarden/warden/internal/virtual",
	"github.com/lmwarden/warden/internal/vllmmetrics",
	"github.com/lmwarden/warden/internal/simclock",
	"github.com/lmwarden/warden/internal/wire",
}

// forbidden are the imports a pure core must not reach, directly or through a
// dependency (expfmt, client_golang and go-sse all bring net/http).
var forbidden = []string{"net/http"}

func TestPureCoresLinkNoHTTP(t *testing.T) {
	for _, pkg := range pureCores {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[d] = true
		}
		for _, f := range forbidden {
			if deps[f] {
				t.Errorf("%s depends on %s (go list -deps); move the code that needs it to the package's HTTP shell (router/routerhttp, loadgen/loadgenhttp, sim/simhttp, internal/scrape)", pkg, f)
			}
		}
	}
}

// TestWireIsGround checks that internal/wire, the names every shell shares,
// imports no package of this module (docs/DESIGN-NOTES.md).
func TestWireIsGround(t *testing.T) {
	const wire = "github.com/lmwarden/warden/internal/wire"
	out, err := exec.Command("go", "list", "-deps", wire).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", wire, err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if d != wire && strings.HasPrefix(d, "github.com/lmwarden/warden/") {
			t.Errorf("%s depends on %s (go list -deps); it must import no package of the module", wire, d)
		}
	}
}
