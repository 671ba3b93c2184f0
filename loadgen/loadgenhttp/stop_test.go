package loadgenhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/loadgen"
)

// A run ended by the consecutive-failures rule says so in its manifest: the
// reason (the error) and the rule (how many in a row, where the limit comes
// from), not only on stderr with "interrupted": false. The stages are long (10
// simulated minutes) so that the streak, not the end of the stages, ends the run
// even on a loaded machine.
func TestConsecutiveFailuresStopIsRecordedInManifest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "model not found", http.StatusNotFound)
	}))
	defer srv.Close()
	sc := runScenario()
	sc.Model, sc.StageDuration, sc.FailureBackoff = "nope", 10*time.Minute, 10*time.Millisecond
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Run(context.Background(), RunConfig{
		Scenario: sc, BaseURL: srv.URL, Clock: simclock.NewScaled(50), MaxConsecutiveFailures: 10, ResultsDir: dir,
	})
	if !errors.Is(err, ErrTooManyFailures) {
		t.Fatalf("err %v, want ErrTooManyFailures", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, loadgen.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Stopped *struct {
			Reason string `json:"reason"`
			Rule   string `json:"rule"`
		} `json:"stopped"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Stopped == nil {
		t.Fatalf("manifest has no \"stopped\":\n%s", b)
	}
	if !strings.Contains(m.Stopped.Reason, "too many consecutive failed turns") || !strings.Contains(m.Stopped.Reason, "model not found") {
		t.Errorf("stopped.reason %q: want the streak and the last error", m.Stopped.Reason)
	}
	if !strings.Contains(m.Stopped.Rule, "10 turns in a row") {
		t.Errorf("stopped.rule %q: want the limit used (10 turns in a row)", m.Stopped.Rule)
	}
}
