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

// While every turn fails at once and its session's replacement waits out a long
// failure backoff, no turn is in flight: the progress line counts the sessions
// waiting apart, instead of "outstanding" turns that were never sent; the stage
// end warns that it held far fewer turns in flight than its sessions.
func TestProgressLineDoesNotCountBackoffAsInFlight(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	sc := runScenario()
	sc.Model, sc.Variants = "m", []string{"off"}
	sc.Stages, sc.StageDuration, sc.FailureBackoff = []int{2}, 20*time.Second, time.Hour
	var progress strings.Builder
	_, err := Run(context.Background(), RunConfig{
		Scenario: sc, BaseURL: srv.URL, Clock: simclock.NewScaled(50), MaxConsecutiveFailures: -1,
		Progress: &progress, ProgressEvery: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	var done, warn string
	for _, l := range lines {
		if strings.Contains(l, " done ") {
			done = l
		}
		if strings.Contains(l, "turns in flight on average") {
			warn = l
		}
	}
	if !strings.Contains(done, "in flight 0 waiting 2") {
		t.Errorf("stage-end line %q: want \"in flight 0 waiting 2\" (all lines:\n%s)", done, progress.String())
	}
	if !strings.Contains(warn, "below 90 %") {
		t.Errorf("no achieved-concurrency warning at the stage end:\n%s", progress.String())
	}
}
