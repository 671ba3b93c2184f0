package bench

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/testkit/enginestub"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/loadgenhttp"
	"github.com/lmwarden/warden/report"
)

// cutAfter is a reverse proxy to one server that, once cut is set, answers
// every POST with response headers and then drops the connection (a broken
// stream); other requests (/metrics, /v1/models) pass.
type cutAfter struct {
	next *httputil.ReverseProxy
	cut  atomic.Bool
}

func (c *cutAfter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !c.cut.Load() {
		c.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

// watch is a progress writer that calls fn once, on the first line holding s.
type watch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	s    string
	once sync.Once
	fn   func()
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(string(p), w.s) {
		w.once.Do(w.fn)
	}
	return w.buf.Write(p)
}

// TestGiveUpKeepsCompletedStages: a run whose server starts cutting every
// stream after stage 1 gives up in stage 2 (ErrTooManyFailures) and still
// writes results.csv and summary.md with stage 1's row complete, as Ctrl-C
// does.
func TestGiveUpKeepsCompletedStages(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short: runs the HTTP world for one stubStage")
	}
	stub := startStubs(t, 1, enginestub.Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 8, TokenDelay: 2 * time.Millisecond})[0]
	u, _ := url.Parse(stub)
	c := &cutAfter{next: httputil.NewSingleHostReverseProxy(u)}
	hs := httptest.NewServer(c)
	t.Cleanup(hs.Close)
	srv := hs.URL

	sc := loadgen.DefaultScenario()
	sc.Name, sc.Model = "give-up", enginestub.DefaultModel
	sc.Stages, sc.StageDuration, sc.Variants = []int{2, 32}, 4*time.Second, []string{"on"}
	sc.Turns, sc.FirstTurnTokens, sc.TurnTokens, sc.MaxOutputTokens, sc.SystemPromptTokens = 6, 300, 100, 16, 200
	sc.ThinkTime, sc.ThinkSpread.Min, sc.ThinkSpread.Max = 50*time.Millisecond, 20*time.Millisecond, 80*time.Millisecond
	dir := filepath.Join(t.TempDir(), "give-up")
	progress := &watch{s: "stage 1/2 (2 sessions) done", fn: func() { c.cut.Store(true) }}
	_, err := Run(context.Background(), Options{Scenario: sc, Replicas: []string{srv}, OutDir: dir, RunID: "give-up", Progress: progress})
	if !errors.Is(err, loadgenhttp.ErrTooManyFailures) {
		t.Fatalf("Run: %v, want ErrTooManyFailures\n%s", err, progress.buf.String())
	}
	if !c.cut.Load() {
		t.Fatalf("stage 1 never reported done:\n%s", progress.buf.String())
	}
	for _, f := range []string{"manifest.json", "turns.jsonl", "results.csv", "summary.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("a run that gave up lacks %s: %v\n%s", f, err, progress.buf.String())
		}
	}
	sums, err := report.SummarizeDir(dir)
	if err != nil {
		t.Fatalf("summarizing %s: %v", dir, err)
	}
	var done bool
	for _, s := range sums {
		if s.Sessions == 2 && s.Complete && s.TurnsOK > 0 {
			done = true
		}
	}
	if !done {
		t.Errorf("no complete 2-session stage with OK turns in %+v", sums)
	}
}
