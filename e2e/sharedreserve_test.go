package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/testkit/testredis"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// admWorld is two routers with admission on over one Redis in front of
// simulated replicas, and a sampler of both routers' /status. Every check
// goes through the routers' HTTP listeners, so the routers may be in this
// process (newAdmWorld) or two `warden route` processes (newAdmWorldProcs).
type admWorld struct {
	t      *testing.T
	hc     *http.Client
	cl     *simhttp.Cluster
	model  string
	a, b   admRouter
	system string // the system prompt every conversation shares

	mu      sync.Mutex
	samples int
	over    []string // samples whose counted working set was above the replica's KV
	worst   float64  // largest counted working set over KV seen
}

// admRouter is one router's API and admin base URLs.
type admRouter struct{ url, admin string }

// admSpeed is the simulator's speed in these tests (see raceSlowdown).
const admSpeed = 20 / raceSlowdown

// admCluster starts a redis-server and the simulated replicas.
func admCluster(t *testing.T, replicas int) (*testredis.Server, *simhttp.Cluster) {
	t.Helper()
	rs := testredis.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The default A4000 profile: 43,440-token replicas, where four ~11k
	// conversations fit at admission and outgrow the replica by their second
	// turns; the gate counts each at its expected peak (router/admission.go),
	// so at most three are counted on one.
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: replicas, Speed: admSpeed, DevMode: true, MaxNumSeqs: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return rs, cl
}

// newAdmWorld is an admWorld of two in-process routers on the simulator's clock.
func newAdmWorld(t *testing.T, replicas int) *admWorld {
	t.Helper()
	rs, cl := admCluster(t, replicas)
	var rs2 [2]admRouter
	for i := range rs2 {
		r := startSharedRouter(t, cl, rs.URL(), "127.0.0.1:0")
		srv := httptest.NewServer(r.rt.AdminHandler())
		t.Cleanup(srv.Close)
		rs2[i] = admRouter{url: r.url(), admin: srv.URL}
	}
	return prepareAdmWorld(t, cl, rs2)
}

// prepareAdmWorld waits for both routers, calibrates their size estimates
// and turns admission on.
func prepareAdmWorld(t *testing.T, cl *simhttp.Cluster, rs [2]admRouter) *admWorld {
	t.Helper()
	w := &admWorld{t: t, cl: cl, a: rs[0], b: rs[1], hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Minute}}
	var err error
	if w.model, err = engineapi.FirstModel(context.Background(), w.hc, cl.URLs()[0], nil); err != nil {
		t.Fatal(err)
	}
	w.system = "You are a coding agent. " + convWords(newConvos("system", 1, 99)[0].rng, 540)
	for _, r := range rs {
		if !waitFor(10*time.Second, func() bool {
			m, err := w.status(r)
			if err != nil {
				return false
			}
			for _, rep := range m.Replicas {
				if rep.KVCapacityTokens <= 0 {
					return false
				}
			}
			return stateUp(t, w.hc, r.url)
		}) {
			t.Fatalf("%s: KV capacities not learned or state not up", r.url)
		}
		// Calibrate the router's prompt-size estimate from responses first
		// (router.SizeMinSeen of them, admission still off): a conversation
		// admitted at the assumed 4 bytes per token grows by 40 % once the
		// estimate learns the simulator's ~2.9, which is the rule's input
		// moving, not two gates admitting into one room.
		for i := range router.SizeMinSeen {
			if o := sendTurn(w.hc, r.url, w.model, w.conv(fmt.Sprint("warm-", r.url, "-", i), uint64(500+i), 5600)); o.err != nil {
				t.Fatal(o.err)
			}
		}
		// Refuse at the limit: nothing may be refused within max_hold.
		w.admin(r, http.MethodPut, "/admin/models/*/admission", `{"mode":"fit","on_limit":"refuse"}`)
	}
	return w
}

// admin sends an admin request to r and fails the test unless it answers 200.
func (w *admWorld) admin(r admRouter, method, path, body string) {
	w.t.Helper()
	req, _ := http.NewRequest(method, r.admin+path, strings.NewReader(body))
	resp, err := w.hc.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		w.t.Fatalf("%s %s%s: %s %s", method, r.admin, path, resp.Status, b)
	}
}

// errBadStatus marks a /status that answered but could not be read.
var errBadStatus = errors.New("bad /status")

// status reads r's GET /status and returns its one model.
func (w *admWorld) status(r admRouter) (routerhttp.ModelStatus, error) {
	resp, err := w.hc.Get(r.admin + "/status")
	if err != nil {
		return routerhttp.ModelStatus{}, err
	}
	defer resp.Body.Close()
	var st routerhttp.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return routerhttp.ModelStatus{}, fmt.Errorf("%w: decoding %s/status: %v", errBadStatus, r.admin, err)
	}
	if len(st.Models) == 0 {
		return routerhttp.ModelStatus{}, fmt.Errorf("%w: %s/status: no model", errBadStatus, r.admin)
	}
	return st.Models[0], nil
}

// sample reads both routers' /status every 10 ms until ctx ends and records
// every replica whose counted working set exceeds its KV cache.
func (w *admWorld) sample(ctx context.Context) {
	for ctx.Err() == nil {
		for _, r := range []admRouter{w.a, w.b} {
			m, err := w.status(r)
			if errors.Is(err, errBadStatus) {
				w.t.Error(err)
				return
			}
			if err != nil {
				continue // not answering yet
			}
			w.mu.Lock()
			w.samples++
			for i, rep := range m.Replicas {
				if i >= len(m.Admission.WorkingTokens) || rep.KVCapacityTokens <= 0 {
					continue
				}
				ws := m.Admission.WorkingTokens[i]
				w.worst = max(w.worst, float64(ws)/float64(rep.KVCapacityTokens))
				if ws > rep.KVCapacityTokens {
					w.over = append(w.over, fmt.Sprintf("%s: %s counted %d conversations, %d tokens > KV %d", r.url, rep.Name, m.Admission.Counted[i], ws, rep.KVCapacityTokens))
				}
			}
			w.mu.Unlock()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// conv starts a conversation: the shared system prompt, then a first user
// message of words pseudo-words (each turn adds sendTurn's 150).
func (w *admWorld) conv(id string, seed uint64, words int) *convo {
	c := newConvos(id, 1, seed)[0]
	c.id = id
	c.msgs = []map[string]string{{"role": "system", "content": w.system}, {"role": "user", "content": convWords(c.rng, words)}}
	return c
}

// systemCached is the system prompt's cached size: the cached tokens of a
// new conversation's first turn sent straight to a replica that served the
// system prompt before (twice, so the second reads it from the cache).
func (w *admWorld) systemCached() int {
	w.t.Helper()
	var o turnOut
	for i := range 2 {
		c := w.conv(fmt.Sprint("probe-", i), uint64(1000+i), 50)
		o = sendTurn(w.hc, w.cl.URLs()[0], w.model, c)
		if o.err != nil {
			w.t.Fatalf("probe: %v", o.err)
		}
	}
	return o.cached
}

// checkS checks that both routers learned S as the system prompt's cached size.
func (w *admWorld) checkS() {
	w.t.Helper()
	want := w.systemCached()
	for _, r := range []admRouter{w.a, w.b} {
		m, err := w.status(r)
		if err != nil {
			w.t.Fatal(err)
		}
		adm := m.Admission
		w.t.Logf("%s: S = %d tokens from %d samples (system prompt cached: %d), idle window %.1f s, %.3f bytes per token", r.url, adm.SharedPrefixTokens, adm.SharedPrefixSamples, want, adm.IdleWindowS, m.BytesPerToken)
		if adm.SharedPrefixTokens != int64(want) {
			w.t.Errorf("%s: S = %d, want the system prompt's cached size %d", r.url, adm.SharedPrefixTokens, want)
		}
	}
}

// checkAdmission checks the sampler's figures and that no turn failed (a
// refusal at the limit is a failed turn: 429).
func (w *admWorld) checkAdmission(all []turnOut) (held int) {
	w.t.Helper()
	for _, o := range all {
		if o.err != nil {
			w.t.Errorf("conversation %d turn %d via %s: %v", o.conv, o.turn, o.base, o.err)
		}
	}
	for _, r := range []admRouter{w.a, w.b} {
		m, err := w.status(r)
		if err != nil {
			w.t.Fatal(err)
		}
		out := m.Admission.Outcomes
		held += int(out.AfterHold)
		if out.Refused+out.AtLimit != 0 {
			w.t.Errorf("%s: %d refused, %d admitted at the limit; want none within max_hold", r.url, out.Refused, out.AtLimit)
		}
		w.t.Logf("%s: shared state %s", r.url, stateCounters(w.hc, r.url))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("/status samples %d, largest counted working set / KV %.3f, over KV in %d, held and admitted %d", w.samples, w.worst, len(w.over), held)
	if w.samples < 20 {
		w.t.Errorf("only %d /status samples: the sampler measured nothing", w.samples)
	}
	for i, o := range w.over {
		if i < 8 {
			w.t.Errorf("over-admitted: %s", o)
		}
	}
	return held
}

// Repro 1 (docs/routing.md, "Admission"): eight conversations' turn 1 through a, turn 2 through b,
// then a burst of eight new conversations through b. b's S must come from
// true first turns (the system prompt's cached size, as a's), not from its
// first sight of each conversation (a turn 2: ~11k cached), with which b's
// rule counted every ~11k-token conversation at a few hundred tokens and
// admitted the whole burst, 4 per replica on 39,392-token replicas where 3
// fit. Zero over-admission at every /status sample of either router, nothing
// refused.
func TestSharedAdmissionTurnsAlternate(t *testing.T) {
	w := newAdmWorld(t, 2)
	sctx, stop := context.WithCancel(context.Background())
	var swg sync.WaitGroup
	swg.Go(func() { w.sample(sctx) })
	var first []*convo
	for i := range 8 {
		first = append(first, w.conv(fmt.Sprint("alt-", i), uint64(i), 5600))
	}
	all := runTurns(w.hc, w.model, first, 2, nil, func(_, turn int) string {
		if turn == 0 {
			return w.a.url
		}
		return w.b.url
	})
	t.Logf("first 8 (turn 1 via a, turn 2 via b): prompts %v", prompts(all))
	var burst []*convo
	for i := range 8 {
		burst = append(burst, w.conv(fmt.Sprint("burst-", i), uint64(100+i), 5600))
	}
	all = append(all, runTurns(w.hc, w.model, burst, 2, nil, func(int, int) string { return w.b.url })...)
	stop()
	swg.Wait()
	w.checkAdmission(all)
	w.checkS()
}

// Repro 2 (docs/routing.md, "Admission"): conversation i's turns always through router i mod 2, 24
// conversations with ~11k-token first prompts arriving 0.3 s apart (of the
// simulator's clock), 4 replicas where 3 fit each. Each gate learned the
// other's admissions a heartbeat late and two queue heads were admitted onto
// one replica 40-66 ms apart into room for one; with the reservation in the
// store no replica's counted working set is above its KV at any sample.
func TestSharedAdmissionNeverOverAdmits(t *testing.T) {
	w := newAdmWorld(t, 4)
	runAdmissionBurst(t, w, func(k, _ int) string {
		if k%2 == 0 {
			return w.a.url
		}
		return w.b.url
	})
}

// runAdmissionBurst sends 24 conversations of ~11k-token first prompts, 0.3 s
// apart (of the simulator's clock), three turns each, each turn to the router
// route names, and checks the admission figures and S.
func runAdmissionBurst(t *testing.T, w *admWorld, route func(conv, turn int) string) {
	t.Helper()
	sctx, stop := context.WithCancel(context.Background())
	var swg sync.WaitGroup
	swg.Go(func() { w.sample(sctx) })
	var convs []*convo
	for i := range 24 {
		convs = append(convs, w.conv(fmt.Sprint("c-", i), uint64(200+i), 5600))
	}
	const apart = 300 * time.Millisecond / admSpeed // 0.3 s of the simulator's clock
	all := runTurns(w.hc, w.model, convs, 3, func(k int) time.Duration { return time.Duration(k) * apart }, route)
	stop()
	swg.Wait()
	held := w.checkAdmission(all)
	if held == 0 {
		t.Errorf("nothing was held: 24 conversations where 12 fit, the test tested nothing")
	}
	if n := w.preemptions(); n != 0 {
		t.Errorf("the replicas preempted %g requests: admitted conversations did not fit", n)
	}
	w.checkS()
}

// preemptions sums the replicas' vllm:num_preemptions_total.
func (w *admWorld) preemptions() float64 {
	w.t.Helper()
	var n float64
	for _, u := range w.cl.URLs() {
		resp, err := w.hc.Get(u + "/metrics")
		if err != nil {
			w.t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			w.t.Fatalf("%s/metrics: %v", u, err)
		}
		f, ok := fams[strings.TrimSuffix(vllmmetrics.NumPreemptions, "_total")]
		if !ok {
			f, ok = fams[vllmmetrics.NumPreemptions]
		}
		if !ok {
			w.t.Fatalf("%s/metrics has no %s", u, vllmmetrics.NumPreemptions)
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// prompts lists the turns' prompt tokens (for the log).
func prompts(all []turnOut) string {
	var b strings.Builder
	for i, o := range all {
		if i < 4 {
			fmt.Fprintf(&b, "%d/%d cached ", o.prompt, o.cached)
		}
	}
	return b.String()
}
