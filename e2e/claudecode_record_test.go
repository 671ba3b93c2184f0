package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/run/virtual"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim"
	"github.com/lmwarden/warden/sim/simhttp"
)

// Record -> replay with the real Claude Code CLI: two turns of one session
// (`-p`, then `-p --continue`) through a recording router to one simulated
// replica, then the recording replayed in virtual time (session mode, one
// replica). Each later request of the session finds as many tokens cached in
// the replay as the simulator reported live (the router's access log, from
// the response's usage), within 5 %: the recorder hashes the whole prompt
// (system blocks, tool schemas, messages), so the recording keeps the reuse.
func TestClaudeCodeRecordReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Claude Code test in -short mode")
	}
	bin, version := claudeCLI(t)
	t.Logf("Claude Code %s at %s", version, bin)
	f := startFleet(t, simhttp.Config{Replicas: 1, Speed: 10, Model: claudeModel}, 32)
	f.waitScraped(t)
	path := filepath.Join(t.TempDir(), "recorded.jsonl")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := routerhttp.NewRecorder(file)
	if err != nil {
		t.Fatal(err)
	}
	f.rt.SetRecorder(rec)
	var access lockedBuffer
	f.rt.Proxy().SetAccessLog(routerhttp.NewAccessLog(&access))

	home, work := t.TempDir(), t.TempDir()
	runClaude(t, bin, home, work, f.url, "-p", "say hi", "--model", claudeModel)
	runClaude(t, bin, home, work, f.url, "-p", "again", "--continue", "--model", claudeModel)
	f.log.all() // the handlers (and the recorder's End) have returned
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	file.Close()

	// Live: the session's /v1/messages requests, in the order they ended.
	var live []routerhttp.AccessEntry
	sc := bufio.NewScanner(strings.NewReader(access.String()))
	for sc.Scan() {
		var e routerhttp.AccessEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Path == wire.PathMessages && e.Session != "" && e.Status == 200 {
			live = append(live, e)
		}
	}
	if len(live) < 2 || live[0].Session != live[len(live)-1].Session {
		t.Fatalf("want at least two /v1/messages requests of one session, got:\n%s", access.String())
	}

	// Replay: virtual time, session mode, one replica of the same profile.
	rsc := loadgen.TinyScenario()
	rsc.Variants = []string{"on"}
	rsc.Trace = &loadgen.TraceSpec{File: path, Mode: loadgen.TraceSession, Window: time.Hour}
	prof, err := sim.LookupProfile(f.sim.Config().Profile)
	if err != nil {
		t.Fatal(err)
	}
	var replayed []loadgen.Result
	if _, err := virtual.Run(context.Background(), virtual.Config{Scenario: rsc, Replicas: 1, Engine: sim.EngineConfig{Profile: prof},
		OnResult: func(r loadgen.Result) {
			if r.OK() {
				replayed = append(replayed, r)
			}
		}}); err != nil {
		t.Fatal(err)
	}
	if len(replayed) != len(live) {
		t.Fatalf("replayed %d requests OK, the router saw %d of the session", len(replayed), len(live))
	}
	for i := 1; i < len(live); i++ {
		l, r := live[i], replayed[i]
		t.Logf("request %d: live %d of %d prompt tokens cached; replay %d of %d", i+1, l.CachedTokens, l.PromptTokens, r.CachedTokens, r.PromptTokens)
		if d := r.CachedTokens - l.CachedTokens; l.CachedTokens == 0 || d > l.CachedTokens/20 || -d > l.CachedTokens/20 {
			t.Errorf("request %d: replay cached %d tokens, live %d: more than 5 %% apart", i+1, r.CachedTokens, l.CachedTokens)
		}
	}
}
