package plan

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/internal/run/virtual"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
)

// Policy is one way of routing the planner compares.
type Policy struct {
	Name      string // label: shortest-queue, working-set, admission-fit, or a router policy
	Affinity  bool   // false: the router's ShortestQueue (vLLM's DP balancer, variant "off")
	Router    string // router policy with affinity on (router.PolicyNames)
	Admission router.AdmissionConfig
}

// Policy names beside the router's own (router.PolicyNames).
const (
	PolicyShortestQueue = "shortest-queue" // affinity off: vLLM's balancer
	PolicyAdmissionFit  = "admission-fit"  // working-set with the admission gate (router.AdmissionFit, defaults)
)

// DefaultPolicies are the three compared by default.
var DefaultPolicies = []string{PolicyShortestQueue, router.PolicyWorkingSet, PolicyAdmissionFit}

// LookupPolicy returns the named policy: shortest-queue (affinity off),
// admission-fit, or a router policy name with affinity on. Errors: unknown name.
func LookupPolicy(name string) (Policy, error) {
	switch {
	case name == PolicyShortestQueue:
		return Policy{Name: name}, nil
	case name == PolicyAdmissionFit:
		return Policy{Name: name, Affinity: true, Router: router.PolicyWorkingSet, Admission: router.AdmissionConfig{Mode: router.AdmissionFit}}, nil
	case name != "" && router.ValidPolicy(name):
		return Policy{Name: name, Affinity: true, Router: name}, nil
	}
	have := append([]string{PolicyShortestQueue, PolicyAdmissionFit}, slices.DeleteFunc(router.PolicyNames(), func(s string) bool { return s == router.PolicyShortestQueue })...)
	return Policy{}, fmt.Errorf("policy %q: unknown (have %s)", name, strings.Join(have, ", "))
}

func (p Policy) variant() string {
	if p.Affinity {
		return "on"
	}
	return "off"
}

// sample is one seed's run of one point reduced to what the planner reads.
type sample struct {
	Seed                         uint64
	TTFBP50S, TTFBP95S, TTFBP99S float64
	Goodput                      float64 // Goodput over the measured window
	OutputTokensPerMin           float64
	SessionsPerH                 float64
	PrefixHitsPct                float64
	// StayedPct: later turns served by their session's first replica, percent
	// (report.Summary.StayedPct); HeldPct: turns of the window the admission
	// gate held, percent of the turns done in it.
	StayedPct, HeldPct float64
	TurnsOK, Failed    int
	// PeakContext is the mean over sessions that finished of their largest
	// prompt + output tokens (the context a session holds at its end); NaN
	// for session trees (KVFit).
	PeakContext float64
	// Session trees (shape agent) only, else NaN: the report's whole-run
	// figures of the point's run (report.AgentSummary, warmup included):
	// completion time p50/p95 of the trees completed in it (first call sent
	// to last call done), the trees completed and cut.
	SessionP50S, SessionP95S float64
	TreesDone, TreesCut      float64
}

// pointScenario is the scenario of one point: n sessions in one stage of the
// scenario's stage duration plus warmup (measured after the warmup), the policy's
// variant, the seed.
func pointScenario(base *loadgen.Scenario, n int, warmup time.Duration, v string, seed uint64) *loadgen.Scenario {
	sc := *base.WithDefaults()
	sc.Stages = []int{n}
	sc.StageDuration = base.WithDefaults().StageDuration + warmup
	sc.Warmup = warmup
	sc.Variants = []string{v}
	sc.Seed = seed
	return &sc
}

// runSample runs one seed of one point in virtual time and reduces it.
func runSample(ctx context.Context, f Fleet, p Policy, sc *loadgen.Scenario, within time.Duration) (sample, error) {
	fail := func(err error) (sample, error) {
		return sample{}, fmt.Errorf("simulating %s with %d sessions on %d replicas, seed %d: %w", p.Name, sc.Stages[0], f.Replicas, sc.Seed, err)
	}
	dir, err := os.MkdirTemp("", "warden-plan-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	out, err := loadgen.CreateResults(dir)
	if err != nil {
		return fail(err)
	}
	ecfg := f.engineConfig()
	var cut []loadgen.Result
	_, err = virtual.Run(ctx, virtual.Config{
		OnCut:    func(r loadgen.Result) { cut = append(cut, r) },
		Scenario: sc,
		Replicas: f.Replicas,
		Engine:   ecfg,
		Balancer: router.BalancerConfig{MaxNumSeqs: ecfg.MaxNumSeqs, Policy: p.Router, Admission: p.Admission},
		Out:      out,
		RunID:    "plan",
		Profile:  f.Profile.Name,
		Policy:   p.Name,
	})
	if err != nil {
		return fail(err)
	}
	run, err := report.Load(dir)
	if err != nil {
		return fail(err)
	}
	sums, err := report.Summarize(run)
	if err != nil {
		return fail(err)
	}
	if len(sums) != 1 {
		return fail(fmt.Errorf("%d stage summaries, want 1", len(sums)))
	}
	s := sums[0]
	q := ttfbQuantiles(run.Results, s.Variant, s.WindowStart, s.WindowEnd, 50, 95, 99)
	if !sameFloat(q[0], s.TTFBP50S) || !sameFloat(q[1], s.TTFBP95S) {
		return fail(fmt.Errorf("TTFB p50/p95 %v/%v over the planner's turns, %v/%v in the report summary: the selections differ", q[0], q[1], s.TTFBP50S, s.TTFBP95S))
	}
	held := math.NaN()
	if n := s.TurnsOK + s.TurnsFailed; n > 0 {
		held = 100 * float64(s.HeldTurns) / float64(n)
	}
	nan := math.NaN()
	smp := sample{
		Seed: sc.Seed, TTFBP50S: s.TTFBP50S, TTFBP95S: s.TTFBP95S, TTFBP99S: q[2], StayedPct: s.StayedPct, HeldPct: held,
		Goodput:            Goodput(run.Results, cut, s.Variant, s.WindowStart, s.WindowEnd, within),
		OutputTokensPerMin: s.OutputTokensPerMin, SessionsPerH: s.SessionsPerH, PrefixHitsPct: s.PrefixHitsPct,
		TurnsOK: s.TurnsOK, Failed: s.TurnsFailed, PeakContext: peakContext(run.Results),
		SessionP50S: nan, SessionP95S: nan, TreesDone: nan, TreesCut: nan,
	}
	if sc.Shape == loadgen.ShapeAgent {
		if err := treeFigures(&smp, run); err != nil {
			return fail(err)
		}
	}
	return smp, nil
}

// treeFigures fills a sample of session trees (shape agent) from the report's
// agent summary of the point's one variant: a session is a live tree, so
// sessions/h counts trees completed (per hour of the point's run), not the
// parent and subagent conversations the stage summary counts; the session
// completion times are the report's; no peak context (KVFit).
func treeFigures(s *sample, run *report.Run) error {
	aggs, _ := report.SummarizeAgents(run)
	if len(aggs) != 1 {
		return fmt.Errorf("%d agent summaries for a point of session trees, want 1", len(aggs))
	}
	a := &aggs[0]
	s.SessionP50S, s.SessionP95S = a.SessionP50S, a.SessionP95S
	s.TreesDone, s.TreesCut = float64(a.SessionsCompleted), float64(a.SessionsCut)
	s.SessionsPerH = math.NaN()
	if w := a.RunSeconds(); w > 0 {
		s.SessionsPerH = float64(a.SessionsCompleted) * 3600 / w
	}
	s.PeakContext = math.NaN()
	return nil
}

// ttfbQuantiles returns the TTFB quantiles qs (percent) in seconds over the turns
// report.Summary takes its TTFB from: not side requests, of the variant, done in
// [start, end), OK, with a first token. Same histogram as the summary (HDR,
// 1 us to 1 h, 3 significant digits, nearest rank); NaN without such turns.
// The summary has no p99: this is the planner's, checked against its p50/p95.
func ttfbQuantiles(results []loadgen.Result, variant string, start, end time.Duration, qs ...float64) []float64 {
	h := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	for i := range results {
		r := &results[i]
		if r.Side || r.Variant != variant || r.Done < start || r.Done >= end || !r.OK() || r.TTFB() <= 0 {
			continue
		}
		_ = h.RecordValue(min(max(int64(r.TTFB()/time.Microsecond), 1), int64(time.Hour/time.Microsecond)))
	}
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = math.NaN()
		if h.TotalCount() > 0 {
			out[i] = float64(h.ValueAtQuantile(q)) / 1e6
		}
	}
	return out
}

func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

// peakContext is the mean over sessions whose last turn finished OK of the
// session's largest prompt_tokens + output_tokens; NaN when none finished.
func peakContext(results []loadgen.Result) float64 {
	peak := map[int64]int{}
	done := map[int64]bool{}
	for i := range results {
		r := &results[i]
		if r.Side || !r.OK() {
			continue
		}
		peak[r.Session] = max(peak[r.Session], r.PromptTokens+r.OutputTokens)
		if r.LastTurn {
			done[r.Session] = true
		}
	}
	var sum, n float64
	for id := range done {
		sum += float64(peak[id])
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / n
}

// Point is one evaluated (policy, sessions, replicas) point over the seeds.
type Point struct {
	Policy   string
	Sessions int
	Replicas int
	Samples  []sample
	// Means over the seeds.
	TTFBP50S, TTFBP95S, TTFBP99S, Goodput     float64
	OutputTokensPerMin, SessionsPerH, HitsPct float64
	StayedPct, HeldPct                        float64
	// Session trees only (sample), else NaN.
	SessionP50S, SessionP95S, TreesDone, TreesCut float64
	// Terms: the SLO verdict per term, in SLO order.
	Terms []TermResult
	OK    bool // every term met (on the means)
}

// TermResult is one SLO term at one point.
type TermResult struct {
	Term string
	// Delta of the per-seed values from the threshold (report.ThresholdDelta):
	// Value is their mean, CIHalf the 95 % half-interval, Noise whether the mean
	// is distinguishable from the threshold.
	Delta report.Delta
	Met   bool // the mean meets the threshold
}

// Failed names the terms not met, with their values ("ttfb_p95 14.2 s > 10 s").
func (p *Point) Failed() string {
	var out []string
	for _, t := range p.Terms {
		if !t.Met {
			out = append(out, t.describe())
		}
	}
	return strings.Join(out, "; ")
}

func (t TermResult) describe() string {
	d := t.Delta
	if t.Term == "goodput" {
		return fmt.Sprintf("goodput %.3f < %.3f", d.Value, d.Base)
	}
	op := ">"
	if t.Met {
		op = "<="
	}
	return fmt.Sprintf("%s %s %s %s", t.Term, seconds(d.Value), op, seconds(d.Base))
}

// seconds prints a time in seconds: two decimals from 1 s up, else three
// significant digits in ms, so that a 1 ms threshold does not read "0.00 s".
func seconds(v float64) string {
	if math.Abs(v) >= 1 || v == 0 {
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.3g ms", v*1e3)
}

// Marginal lists the terms whose mean is within the seeds' noise of the
// threshold (report.WithinNoise): another set of seeds could flip the verdict.
func (p *Point) Marginal() []string {
	var out []string
	for _, t := range p.Terms {
		if t.Delta.Noise == report.WithinNoise {
			out = append(out, t.Term)
		}
	}
	return out
}

// evaluate runs every seed of a point (in parallel, at most workers at once) and
// judges it against the SLO.
func evaluate(ctx context.Context, f Fleet, p Policy, base *loadgen.Scenario, warmup time.Duration, n int, seeds []uint64, slo SLO, workers int) (*Point, error) {
	ss := make([]sample, len(seeds))
	errs := make([]error, len(seeds))
	sem := make(chan struct{}, max(1, workers))
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ss[i], errs[i] = runSample(ctx, f, p, pointScenario(base, n, warmup, p.variant(), seed), slo.GoodputTTFB)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return judge(p.Name, n, f.Replicas, ss, slo), nil
}

// judge reduces a point's samples to their means and the SLO verdict per term.
func judge(policy string, n, replicas int, ss []sample, slo SLO) *Point {
	pt := &Point{Policy: policy, Sessions: n, Replicas: replicas, Samples: ss, OK: true}
	col := func(get func(*sample) float64) []float64 {
		v := make([]float64, len(ss))
		for i := range ss {
			v[i] = get(&ss[i])
		}
		return v
	}
	mean := func(get func(*sample) float64) float64 { m, _ := report.MeanStdErr(col(get)); return m }
	pt.TTFBP50S = mean(func(s *sample) float64 { return s.TTFBP50S })
	pt.TTFBP95S = mean(func(s *sample) float64 { return s.TTFBP95S })
	pt.TTFBP99S = mean(func(s *sample) float64 { return s.TTFBP99S })
	pt.Goodput = mean(func(s *sample) float64 { return s.Goodput })
	pt.OutputTokensPerMin = mean(func(s *sample) float64 { return s.OutputTokensPerMin })
	pt.SessionsPerH = mean(func(s *sample) float64 { return s.SessionsPerH })
	pt.HitsPct = mean(func(s *sample) float64 { return s.PrefixHitsPct })
	pt.StayedPct = mean(func(s *sample) float64 { return s.StayedPct })
	pt.HeldPct = mean(func(s *sample) float64 { return s.HeldPct })
	pt.SessionP50S = mean(func(s *sample) float64 { return s.SessionP50S })
	pt.SessionP95S = mean(func(s *sample) float64 { return s.SessionP95S })
	pt.TreesDone = mean(func(s *sample) float64 { return s.TreesDone })
	pt.TreesCut = mean(func(s *sample) float64 { return s.TreesCut })
	for _, t := range slo.terms() {
		d := report.ThresholdDelta(t.Name, t.Threshold, col(t.metric))
		met := d.Value <= t.Threshold
		if t.AtLeast {
			met = d.Value >= t.Threshold
		}
		// NaN (no OK turn with a token in the window) never meets a term.
		met = met && !math.IsNaN(d.Value)
		pt.Terms = append(pt.Terms, TermResult{Term: t.Name, Delta: d, Met: met})
		pt.OK = pt.OK && met
	}
	return pt
}
