package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim/simhttp"
)

// TestClaudeCodeHeldAtAdmission runs the real Claude Code CLI through a router
// whose admission gate holds its new conversation: with a fill target no
// conversation fits, the CLI's first request waits at the router (no byte sent)
// for at least 10 s of wall time; then the fill target is raised and the
// request, admitted at its next ask, completes normally. Claude Code gives up
// after 5 minutes without a byte (brief clients.md): a hold under that is
// invisible to it but for the wait.
func TestClaudeCodeHeldAtAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Claude Code test in -short mode")
	}
	bin, version := claudeCLI(t)
	t.Logf("Claude Code %s at %s", version, bin)
	f := startFleet(t, simhttp.Config{Replicas: 1, Speed: 10, Model: claudeModel}, 32)
	if !waitFor(10*time.Second, func() bool {
		r := f.rt.Status().Models[0].Replicas[0]
		return r.ScrapeFresh && r.KVCapacityTokens > 0
	}) {
		t.Fatal("the router never learned the replica's KV capacity")
	}
	b := f.rt.Pools()[0].Balancer
	if err := b.SetAdmission(router.AdmissionConfig{Mode: router.AdmissionFit, FillTarget: 0.0001, MaxHold: -1}); err != nil {
		t.Fatal(err)
	}
	const hold = 12 * time.Second
	released := make(chan time.Duration, 1)
	go func() {
		if !waitFor(60*time.Second, func() bool { return b.Admission().Queue > 0 }) {
			released <- 0
			return
		}
		t0 := time.Now()
		time.Sleep(hold)
		if err := b.SetAdmission(router.AdmissionConfig{Mode: router.AdmissionFit, MaxHold: -1}); err != nil {
			t.Error(err)
		}
		released <- time.Since(t0)
	}()
	home, work := t.TempDir(), t.TempDir()
	start := time.Now()
	out := runClaude(t, bin, home, work, f.url, "-p", "say hi", "--model", claudeModel)
	took := time.Since(start)
	waited := <-released
	if waited == 0 {
		t.Fatal("the CLI's request was never held")
	}
	if strings.TrimSpace(out) == "" {
		t.Errorf("the CLI printed nothing")
	}
	if took < hold {
		t.Errorf("the CLI finished in %v, under the %v hold", took, hold)
	}
	for _, r := range f.log.all() {
		t.Logf("request: %s", r)
		if r.Status != 200 {
			t.Errorf("request %s: status %d", r.Path, r.Status)
		}
	}
	st := b.Admission()
	t.Logf("admission: %+v", st.Outcomes)
	if st.Outcomes.AfterHold == 0 || st.Queue != 0 || st.Outcomes.GaveUp != 0 {
		t.Errorf("want a request admitted after its hold, none waiting, none gave up: %+v, queue %d", st.Outcomes, st.Queue)
	}
}
