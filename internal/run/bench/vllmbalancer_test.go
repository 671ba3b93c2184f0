package bench

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/vllmdp"
	"github.com/lmwarden/warden/loadgen"
)

// The per-process vLLM balancer (scenario vllm_balancer) is modelled in the
// virtual world only: the embedded HTTP cluster refuses it instead of running
// without it.
func TestEmbeddedSimRefusesVLLMBalancer(t *testing.T) {
	t.Parallel()
	sc := loadgen.DefaultScenario()
	sc.APIServers, sc.VLLMBalancer = 4, vllmdp.ReleaseV026
	_, err := Run(context.Background(), Options{Scenario: sc, OutDir: filepath.Join(t.TempDir(), "x"), RunID: "x", Progress: io.Discard, Speed: 10})
	if err == nil || !strings.Contains(err.Error(), "virtual world only") {
		t.Fatalf("Run: %v, want a refusal naming the virtual world", err)
	}
}
