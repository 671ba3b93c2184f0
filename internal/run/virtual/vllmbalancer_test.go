package virtual

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmwarden/warden/internal/vllmdp"
	"github.com/lmwarden/warden/loadgen"
)

// offReplicas returns the replica of every "off" turn, in the turns file's
// order.
func offReplicas(t *testing.T, dir string) []string {
	t.Helper()
	_, results, _, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range results {
		if r.Variant == "off" {
			got = append(got, r.Replica)
		}
	}
	return got
}

// With one vLLM balancer per API-server process (scenario vllm_balancer) the
// run stays deterministic for its seed, and "off" places turns differently
// from the single current-main balancer; "on" does not use it.
func TestVLLMBalancerPerProcess(t *testing.T) {
	base := smokeScenario(t)
	base.APIServers = 4
	plain, a, b := t.TempDir(), t.TempDir(), t.TempDir()
	runOnce(t, base, plain)
	withRelease := *base
	withRelease.VLLMBalancer = vllmdp.ReleaseV026
	runOnce(t, &withRelease, a)
	runOnce(t, &withRelease, b)
	x, err := os.ReadFile(filepath.Join(a, loadgen.TurnsFile))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(b, loadgen.TurnsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(x) == 0 || !bytes.Equal(x, y) {
		t.Errorf("turns differ between two runs of one seed with vllm_balancer")
	}
	p, q := offReplicas(t, plain), offReplicas(t, a)
	if len(p) == 0 || len(q) == 0 {
		t.Fatalf("no off turns: %d, %d", len(p), len(q))
	}
	same := len(p) == len(q)
	for i := 0; same && i < len(p); i++ {
		same = p[i] == q[i]
	}
	if same {
		t.Errorf("off placed every turn as the single balancer does (%d turns)", len(p))
	}
}
