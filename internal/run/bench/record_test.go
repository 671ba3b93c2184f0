package bench

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/run/virtual"
	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Record -> replay: a bench run through a router that records its traffic
// (warden route --record) gives a trace that, replayed in virtual time in
// session mode, has the same requests, input and output token sums within
// 1 % and the same conversations with the same turns.
func TestRecordReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs the HTTP world for 20 s")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clock := simclock.NewScaled(10)
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 4, Profile: DefaultProfile, Speed: 10, Clock: clock, DevMode: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfg, err := routerhttp.ConfigForURLs(cl.URLs(), true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdminToken, cfg.Clock = "tok", clock
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := routerhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go rt.Run(ctx)
	api, admin := httptest.NewServer(rt.Handler()), httptest.NewServer(rt.AdminHandler())
	t.Cleanup(api.Close)
	t.Cleanup(admin.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "recorded.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := routerhttp.NewRecorder(f)
	if err != nil {
		t.Fatal(err)
	}
	rt.Proxy().SetRecorder(rec)

	sc := loadgen.TinyScenario()
	sc.Name, sc.Variants, sc.Stages, sc.StageDuration = "record", []string{"on"}, []int{4}, 20*time.Second
	sc.FirstTurnTokens, sc.TurnTokens, sc.Turns, sc.MaxOutputTokens = 900, 200, 4, 40
	out := filepath.Join(dir, "run")
	var progress strings.Builder
	if _, err := Run(ctx, Options{Scenario: sc, RouterURL: api.URL, AdminURL: admin.URL, AdminToken: "tok", Replicas: cl.URLs(),
		OutDir: out, RunID: "record", Progress: &progress}); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	rt.Proxy().SetRecorder(nil)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	_, results, _, err := loadgen.ReadResults(out)
	if err != nil {
		t.Fatal(err)
	}
	var sent, in, outTok int
	turns := map[int64]int{}
	for _, r := range results {
		if r.OK() && !r.Side {
			sent++
			in += r.PromptTokens
			outTok += r.OutputTokens
			turns[r.Session]++
		}
	}

	// The recording: one line per OK turn, sorted, with the turns' usage.
	rf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	var recIn, recOut, n int
	sessions := map[string]int{}
	err = trace.Each(trace.NewReader(rf, "recorded.jsonl", 0), func(r trace.Request) error {
		n++
		recIn += r.InputLength
		recOut += r.OutputLength
		sessions[r.SessionID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), turnsKey(results)) {
		t.Error("the recording contains a session key")
	}
	// A turn still in flight when the variant ends has no bench record but may
	// finish at the router, so the recording can hold up to one more request
	// per concurrent session than the bench's OK turns, never fewer.
	within := func(a, b int) bool { return math.Abs(float64(a-b)) <= 0.01*float64(b) }
	extra := n - sent
	if extra < 0 || extra > sc.Stages[0] || !within(recIn, in) || !within(recOut, outTok) ||
		len(sessions) < len(turns) || len(sessions) > len(turns)+sc.Stages[0] || rec.Written != n {
		t.Fatalf("recorded %d requests (%d in, %d out, %d sessions; written %d, dropped %d); the bench's OK turns: %d (%d in, %d out, %d sessions)",
			n, recIn, recOut, len(sessions), rec.Written, rec.Dropped, sent, in, outTok, len(turns))
	}

	// Replay in virtual time, session mode.
	rsc := loadgen.TinyScenario()
	rsc.Variants = []string{"on"}
	rsc.Trace = &loadgen.TraceSpec{File: path, Mode: loadgen.TraceSession, Window: time.Minute}
	prof, _ := sim.LookupProfile(DefaultProfile)
	var replayed []loadgen.Result
	m, err := virtual.Run(ctx, virtual.Config{Scenario: rsc, Replicas: 4, Engine: sim.EngineConfig{Profile: prof},
		OnResult: func(r loadgen.Result) { replayed = append(replayed, r) }})
	if err != nil {
		t.Fatal(err)
	}
	rep := m.Traces[0]
	var repIn, repOut, ok int
	for _, r := range replayed {
		if r.OK() {
			ok++
			repIn += r.PromptTokens
			repOut += r.OutputTokens
		}
	}
	if rep.Requests != n || ok != n || !within(repIn, recIn) || !within(repOut, recOut) {
		t.Errorf("replay: %d requests, %d OK, %d in, %d out; recorded %d, %d in, %d out", rep.Requests, ok, repIn, repOut, n, recIn, recOut)
	}
	// The replay rebuilds the recording's conversations (not the bench's: a
	// turn that finished at the router after the variant ended adds one turn to
	// its conversation there, checked above).
	want := map[int]int{}
	for _, k := range sessions {
		want[k]++
	}
	if rep.Conversations != len(sessions) || len(rep.TurnsPerConversation) != len(want) {
		t.Errorf("replay: %d conversations %v; the recording: %d sessions %v", rep.Conversations, rep.TurnsPerConversation, len(sessions), want)
	}
	for k, v := range want {
		if rep.TurnsPerConversation[k] != v {
			t.Errorf("conversations of %d turns: replay %d, recording %d", k, rep.TurnsPerConversation[k], v)
		}
	}
	t.Logf("bench %d OK turns (%d in, %d out tokens) in %d sessions; recorded %d in %d sessions %v; replayed %d OK (%d in, %d out), conversations %v",
		sent, in, outTok, len(turns), n, len(sessions), want, ok, repIn, repOut, rep.TurnsPerConversation)
}

// turnsKey returns one session key of the results ("\x00" if none), to check
// that the recording holds none.
func turnsKey(results []loadgen.Result) string {
	for _, r := range results {
		if r.SessionKey != "" {
			return r.SessionKey
		}
	}
	return "\x00"
}
