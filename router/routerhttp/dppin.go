package routerhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/internal/wire"
)

// PinVerdict is what CheckDPPinning concluded about a DP server.
type PinVerdict string

const (
	// PinHonored: every probe pinned to rank k was counted by engine k alone.
	PinHonored PinVerdict = "honored"
	// PinIgnored: a probe pinned to rank k was not counted by engine k, so the
	// server's own balancer chose the rank: the router's placement has no effect.
	PinIgnored PinVerdict = "ignored"
	// PinUnverified: the check could not decide (the server refused the probes,
	// exports no per-engine counters, or other traffic made the counts ambiguous).
	PinUnverified PinVerdict = "unverified"
	// PinRankMismatch: the server's /metrics lists fewer engines than the ranks
	// configured, so requests pinned to the missing ranks are refused (vLLM: 400
	// "Requested DP rank k is out of range").
	PinRankMismatch PinVerdict = "rank-mismatch"
	// PinPending and PinSkipped are what Router.Status shows before the check
	// has ended and when Config.SkipPinningCheck turned it off.
	PinPending PinVerdict = "pending"
	PinSkipped PinVerdict = "skipped"
)

// PinCheck is the result of CheckDPPinning; Detail says why, in one sentence.
type PinCheck struct {
	Verdict PinVerdict `json:"verdict"`
	Detail  string     `json:"detail"`
	// Engines is how many engines the server's /metrics lists (0 when unknown).
	Engines int `json:"engines,omitempty"`
}

// Probe parameters of CheckDPPinning: pinProbesPerRank probes are sent to each rank
// in turn; pinAttempts rounds per rank are tried when other traffic moves the
// counters; pinCounterWait bounds the wait for the finished-request counter to show
// the probes (vLLM records it in its output loop, just after the response).
const (
	pinProbesPerRank = 2
	pinAttempts      = 3
	pinCounterWait   = 2 * time.Second
)

// CheckDPPinning verifies that the vLLM server at base (scheme://host:port, no
// trailing /v1) honours X-Data-Parallel-Rank for ranks 0..ranks-1. For each rank, in
// descending order (so a balancer whose scan starts at rank 0 or rotates from it
// cannot match by chance), it sends two identical one-token chat completions pinned
// to that rank, one after the other, and reads vllm:request_success_total per engine
// label from base/metrics before and after. Pinned, the pair adds 2 to engine k's
// count; ignored, vLLM's balancer spreads them (its optimistic +1 per request makes
// two consecutive requests land on different ranks). Counters only grow, so a pair
// that engine k counted fewer than 2 of proves the header is ignored even with other
// traffic; "honored" needs, for every rank, a round in which the whole server
// counted exactly the pair (no other requests finished meanwhile). A server that
// ignores the header is only declared so after pinCounterWait without the pair
// on engine k.
//
// model is the served model name for the probes; "" or "*" asks GET base/v1/models
// and uses the first id. The probes carry only what hc's transport adds: for a
// server started with --api-key it must add the Authorization header (else 401
// and PinUnverified). hc nil uses a plain client with a 30 s timeout. The check
// sends 2 x ranks requests of a few prompt tokens each.
func CheckDPPinning(ctx context.Context, hc *http.Client, base, model string, ranks int) PinCheck {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	base = strings.TrimRight(base, "/")
	unverified := func(format string, args ...any) PinCheck {
		return PinCheck{Verdict: PinUnverified, Detail: fmt.Sprintf(format, args...)}
	}
	if ranks < 2 {
		return unverified("%s: %d DP rank(s), nothing to pin", base, ranks)
	}
	if model == "" || model == "*" {
		m, err := engineapi.FirstModel(ctx, hc, base, nil)
		if err != nil {
			return unverified("%s: %v", base, err)
		}
		model = m
	}
	// The engines the server reports: fewer than ranks is a configuration error
	// the probes would only see as refusals; more is worth saying too.
	snap, err := scrape.Fetch(ctx, hc, base+wire.PathMetrics, "")
	if err != nil {
		return unverified("%s: %v", base, err)
	}
	var extra string
	if n := len(snap.Engines); n > 0 && snap.Engines[0].Engine != "" {
		if n < ranks {
			return PinCheck{Verdict: PinRankMismatch, Engines: n, Detail: fmt.Sprintf(
				"%s: dp_ranks is %d but the server's /metrics lists %d engines (%s): requests pinned to the missing ranks are refused; set dp_ranks to the server's --data-parallel-size",
				base, ranks, n, engineLabels(snap))}
		}
		if n > ranks {
			extra = fmt.Sprintf(" (the server lists %d engines; the router sends nothing to engines %d-%d)", n, ranks, n-1)
		}
	}
	finished := func() ([]float64, error) { return finishedPerRank(ctx, hc, base, ranks) }
	for k := ranks - 1; k >= 0; k-- {
		clean := false
		for attempt := 0; attempt < pinAttempts && !clean; attempt++ {
			before, err := finished()
			if err != nil {
				return unverified("%s: %v", base, err)
			}
			for range pinProbesPerRank {
				if err := pinProbe(ctx, hc, base, model, k); err != nil {
					return unverified("%s: probe pinned to rank %d: %v", base, k, err)
				}
			}
			delta, total, err := pinDeltas(ctx, finished, before, k)
			if err != nil {
				return unverified("%s: %v", base, err)
			}
			if total < pinProbesPerRank {
				return unverified("%s: %s rose by %g after %d answered probes within %s", base, vllmmetrics.RequestSuccess, total, pinProbesPerRank, pinCounterWait)
			}
			if delta[k] < pinProbesPerRank {
				return PinCheck{Verdict: PinIgnored, Detail: fmt.Sprintf(
					"%s: of %d requests pinned to rank %d with %s, engine %d counted %g within %s (requests finished per engine meanwhile, other traffic included: %s): the server's balancer chose the rank, so a router cannot place conversations on it (use a vLLM that reads the header, or one server per rank)",
					base, pinProbesPerRank, k, wire.HeaderDPRank, k, delta[k], pinCounterWait, countsByEngine(delta))}
			}
			clean = total == pinProbesPerRank
		}
		if !clean {
			return unverified("%s: other requests finished during every probe of rank %d (%d attempts); restart the router (or rerun warden bench) while the server is idle to check again", base, k, pinAttempts)
		}
	}
	return PinCheck{Verdict: PinHonored, Detail: fmt.Sprintf("%s: %d probes pinned to each of %d ranks were each counted by that rank's engine%s", base, pinProbesPerRank, ranks, extra)}
}

// finishedPerRank returns vllm:request_success per engine 0..ranks-1 from
// base's /metrics.
func finishedPerRank(ctx context.Context, hc *http.Client, base string, ranks int) ([]float64, error) {
	snap, err := scrape.Fetch(ctx, hc, base+wire.PathMetrics, "")
	if err != nil {
		return nil, err
	}
	out := make([]float64, ranks)
	for k := range ranks {
		e := snap.Engine(strconv.Itoa(k))
		if e == nil || !e.Present[vllmmetrics.RequestSuccess] {
			return nil, fmt.Errorf("/metrics has no %s{engine=%q}: per-rank counts are needed to see where a request ran", vllmmetrics.RequestSuccess, strconv.Itoa(k))
		}
		out[k] = e.RequestsFinished
	}
	return out, nil
}

// pinDeltas polls finished until engine k's count rose by pinProbesPerRank over
// before or pinCounterWait passed, and returns the rise per engine and in all.
func pinDeltas(ctx context.Context, finished func() ([]float64, error), before []float64, k int) (delta []float64, total float64, err error) {
	ranks := len(before)
	for deadline := time.Now().Add(pinCounterWait); ; {
		after, err := finished()
		if err != nil {
			return nil, 0, err
		}
		delta, total = make([]float64, ranks), 0
		for j := range ranks {
			delta[j] = vllmmetrics.CounterDelta(before[j], after[j])
			total += delta[j]
		}
		// Wait for the pair to show on engine k (vLLM counts a request in its
		// output loop, just after the response); only a pair still missing
		// there at the deadline says the header was ignored, since other
		// requests finishing can move the total first.
		if delta[k] >= pinProbesPerRank || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return delta, total, nil
}

// engineLabels lists a snapshot's engine labels, e.g. "0, 1, 2, 3".
func engineLabels(snap *vllmmetrics.Snapshot) string {
	var out []string
	for _, e := range snap.Engines {
		out = append(out, e.Engine)
	}
	return strings.Join(out, ", ")
}

// countsByEngine formats per-engine deltas, e.g. "engine 0: 1, engine 1: 1".
func countsByEngine(delta []float64) string {
	var parts []string
	for j, d := range delta {
		if d != 0 {
			parts = append(parts, fmt.Sprintf("engine %d: %g", j, d))
		}
	}
	return strings.Join(parts, ", ")
}

// pinProbe sends one non-streamed one-token chat completion pinned to rank and
// reads the reply; any status but 200 is an error quoting the start of the body.
func pinProbe(ctx context.Context, hc *http.Client, base, model string, rank int) error {
	return chatProbe(ctx, hc, base, model, rank, "warden DP pinning probe: reply with one word.")
}

// chatProbe sends one non-streamed one-token chat completion with the user
// message text, pinned to rank when rank >= 0, and reads the reply; any status
// but 200 is an error quoting the start of the body.
func chatProbe(ctx context.Context, hc *http.Client, base, model string, rank int, text string) error {
	body, _ := json.Marshal(map[string]any{
		"model":       model,
		"messages":    []map[string]string{{"role": "user", "content": text}},
		"max_tokens":  1,
		"temperature": 0,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+wire.PathChatCompletions, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if rank >= 0 {
		req.Header.Set(wire.HeaderDPRank, strconv.Itoa(rank))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// pinProbeTimeout bounds one request of the DP pinning check (a one-token
// generation, which waits in the engine's queue on a busy server).
const pinProbeTimeout = 60 * time.Second

// checkPinning runs CheckDPPinning once against a URL with several DP ranks, as
// soon as its /health answers (checked every second of wall time), and keeps the
// verdict for Status. A server that ignores the header is logged as an error
// and served as one replica from then on (its other ranks kept out), since
// every rank the router picked would be vLLM's balancer's pick anyway.
func (rt *Router) checkPinning(ctx context.Context, t *target) {
	setPin := func(pc PinCheck) {
		t.mu.Lock()
		t.pin = &pc
		t.mu.Unlock()
	}
	setPin(PinCheck{Verdict: PinPending, Detail: fmt.Sprintf("%s: waiting for GET /health to answer 200", t.url)})
	for waited := false; ; waited = true {
		resp, err := rt.get(ctx, t, wire.PathHealth)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if !waited {
			rt.log.Info("DP pinning check waits for the server's /health", "model", t.pool.Model, "url", t.url.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	model := t.pool.Model
	hc := &http.Client{Transport: rt.client.Transport, Timeout: pinProbeTimeout}
	if k := rt.cfg.APIKey; k != "" {
		hc.Transport = BearerTransport(rt.client.Transport, k)
	}
	pc := CheckDPPinning(ctx, hc, t.url.String(), model, len(t.replicas))
	if ctx.Err() != nil {
		return
	}
	setPin(pc)
	if pc.Verdict == PinRankMismatch && pc.Engines > 0 && pc.Engines < len(t.replicas) {
		// The server refuses the ranks it does not have: keep them out of
		// placement (their conversations re-home) instead of answering 400s.
		t.mu.Lock()
		t.missing = len(t.replicas) - pc.Engines
		t.mu.Unlock()
		var names []string
		for k, i := range t.replicas[pc.Engines:] {
			t.pool.Balancer.SetHealthy(i, false)
			names = append(names, fmt.Sprintf("rank%d", pc.Engines+k))
		}
		rt.log.Warn("DP ranks the server does not have are kept unhealthy; their conversations re-home", "model", t.pool.Model,
			"url", t.url.String(), "ranks", strings.Join(names, ","))
	}
	if pc.Verdict == PinIgnored {
		// The server's own balancer picks the rank whatever the header says:
		// pinning conversations to ranks has no effect, so serve the server as
		// one replica (rank 0's upstream, without the header, its figures the
		// sum of every engine's) and keep the other ranks out of placement.
		t.unpinned.Store(true)
		t.pool.unpin(t.replicas[0])
		t.mu.Lock()
		t.missing = len(t.replicas) - 1
		t.mu.Unlock()
		for _, i := range t.replicas[1:] {
			t.pool.Balancer.SetHealthy(i, false)
		}
		rt.log.Warn("the server ignores X-Data-Parallel-Rank: served as one replica, unpinned; its other ranks are kept out of placement", "model", t.pool.Model,
			"url", t.url.String(), "replica", t.pool.Upstream(t.replicas[0]).Name)
	}
	lvl := slog.LevelInfo
	switch pc.Verdict {
	case PinIgnored, PinRankMismatch:
		lvl = slog.LevelError
	case PinUnverified:
		lvl = slog.LevelWarn
	}
	rt.log.Log(ctx, lvl, "DP pinning check", "model", t.pool.Model, "url", t.url.String(), "verdict", string(pc.Verdict), "detail", pc.Detail)
}
