package plan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// Search defaults.
const (
	// DefaultSeeds per point: the study's three (docs/routing.md), enough for a
	// standard error of the mean (report.MeanStdErr needs two).
	DefaultSeeds = 3
	// DefaultWarmup is the start of every point left out of the measurement when
	// the scenario sets no warmup: a point starts all its sessions at once, cold,
	// and the first turns' prefill burst is not the steady state being planned.
	DefaultWarmup = time.Minute
	// DefaultMaxSessionsPerReplica caps the galloping search: 64 sessions per
	// replica, twice the reference server's max_num_seqs (32) in live
	// conversations per engine, far past any knee seen in the studies.
	DefaultMaxSessionsPerReplica = 64
	// DefaultMaxReplicas caps the inverse search.
	DefaultMaxReplicas = 1024
)

// Config is one planning question.
type Config struct {
	Fleet    Fleet
	Scenario *loadgen.Scenario // the workload; its stages and variants are replaced per point
	SLO      SLO
	Policies []Policy
	Seeds    int    // per point; default DefaultSeeds
	Seed     uint64 // first seed; the point's seeds are Seed, Seed+1, ...; default the scenario's
	// Warmup before each point's measured window (the scenario's stage
	// duration); < 0 means the scenario's warmup, or DefaultWarmup when it has none.
	Warmup time.Duration
	// Sessions: the search starts at Start (default one per replica) and
	// gallops up to MaxSessions (default DefaultMaxSessionsPerReplica x
	// replicas), then bisects to Resolution sessions (default 1).
	Start, MaxSessions, Resolution int
	// Inverse: when > 0, the question is the replicas needed for this many
	// sessions (up to MaxReplicas, default DefaultMaxReplicas).
	InverseSessions int
	MaxReplicas     int
	// Budget bounds the wall time; the search stops at the first point past it
	// and reports the bracket it reached. 0: none.
	Budget   time.Duration
	Workers  int       // seeds run at once; default GOMAXPROCS
	Progress io.Writer // one line per point; nil = none
}

// Result is the answer.
type Result struct {
	Config   Config
	Policies []PolicyResult
	Fit      KVFit
	Wall     time.Duration
}

// PolicyResult is one policy's answer.
type PolicyResult struct {
	Policy string
	// Sessions search: Knee is the largest point meeting the SLO (nil: not even
	// the first one below Start), FirstFail the smallest failing point above it
	// (nil: none up to MaxSessions).
	// Inverse search: Knee is the smallest replica count meeting the SLO at
	// InverseSessions (nil: none up to MaxReplicas), FirstFail the largest
	// failing one below it.
	Knee, FirstFail *Point
	Points          []*Point // every evaluated point, in evaluation order
	// Resolved: the bracket [Knee, FirstFail] is down to Resolution (sessions)
	// or 1 (replicas). Budget: the search stopped at the wall-time budget.
	Resolved, Budget bool
}

// KVFit is the rule of thumb beside the simulated answer: a session needs its
// peak context in KV cache, so the fleet holds FleetKVTokens / PeakContextTokens
// sessions at once (Sessions), or needs Sessions x PeakContextTokens / KV per
// replica replicas (Replicas, inverse).
type KVFit struct {
	PeakContextTokens float64
	PeakSource        string
	KVTokensReplica   int64
	FleetKVTokens     int64
	Sessions          int
	Replicas          int // inverse only
}

// ErrNoPoint is wrapped when no policy meets the SLO at any point tried.
var ErrNoPoint = errors.New("no point meets the SLO")

// ErrBudget is wrapped when the wall-time budget ran out before any policy had a
// point meeting the SLO (the search did not finish: not a verdict on the fleet).
var ErrBudget = errors.New("budget exhausted")

// Run answers the question. Errors: bad configuration, a failed simulation,
// ctx cancelled, or, with the Result: no policy meeting the SLO anywhere it
// looked (wrapping ErrNoPoint), the budget spent before any point met it
// (wrapping ErrBudget).
func Run(ctx context.Context, c Config) (*Result, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	res := &Result{Config: c}
	for _, p := range c.Policies {
		var pr PolicyResult
		var err error
		if c.InverseSessions > 0 {
			pr, err = searchReplicas(ctx, c, p, t0)
		} else {
			pr, err = searchSessions(ctx, c, p, t0)
		}
		if err != nil {
			return nil, err
		}
		res.Policies = append(res.Policies, pr)
	}
	res.Wall = time.Since(t0)
	if res.Fit, err = kvFit(c, res); err != nil {
		return nil, err
	}
	budget := false
	for _, pr := range res.Policies {
		if pr.Knee != nil {
			return res, nil
		}
		budget = budget || pr.Budget
	}
	if budget {
		return res, fmt.Errorf("%w: the --budget of %s ran out after %d points before any point met the SLO (%s); the closest: %s", ErrBudget, c.Budget, res.points(), c.SLO, closest(res))
	}
	counted := "session count"
	if c.trees() {
		counted = "live tree count"
	}
	what := fmt.Sprintf("on %d replicas at %s", c.Fleet.Replicas, tried(res, func(p *Point) int { return p.Sessions }, counted))
	if c.InverseSessions > 0 {
		what = fmt.Sprintf("with %d sessions at %s", c.InverseSessions, tried(res, func(p *Point) int { return p.Replicas }, "replica count"))
	}
	return res, fmt.Errorf("%w (%s) for any policy %s (every point tried); the closest: %s", ErrNoPoint, c.SLO, what, closest(res))
}

// tried lists the distinct values of/what over every policy's points, sorted:
// "session counts 1, 2 and 4", or "session count 1".
func tried(res *Result, of func(*Point) int, what string) string {
	var ns []int
	for _, pr := range res.Policies {
		for _, p := range pr.Points {
			ns = append(ns, of(p))
		}
	}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	switch len(s) {
	case 0:
		return what + "s: none"
	case 1:
		return what + " " + s[0]
	}
	return what + "s " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// closest describes the best failing point of each policy.
func closest(res *Result) string {
	s := ""
	for _, pr := range res.Policies {
		if pr.FirstFail != nil {
			if s != "" {
				s += "; "
			}
			f := pr.FirstFail
			s += fmt.Sprintf("%s at %d sessions x %d replicas: %s", pr.Policy, f.Sessions, f.Replicas, f.Failed())
		}
	}
	return s
}

func (c Config) withDefaults() (Config, error) {
	if c.Scenario == nil {
		return c, errors.New("plan: no scenario")
	}
	if err := c.Scenario.Validate(); err != nil {
		return c, fmt.Errorf("plan: %w", err)
	}
	if c.Scenario.Trace != nil {
		return c, fmt.Errorf("plan: scenario %q replays a trace (trace.file %q): the planner searches session counts of a synthetic workload and cannot yet scale a trace's rate", c.Scenario.Name, c.Scenario.Trace.File)
	}
	if c.Fleet.Replicas < 1 {
		return c, fmt.Errorf("plan: fleet of %d replicas", c.Fleet.Replicas)
	}
	if len(c.SLO.terms()) == 0 {
		return c, fmt.Errorf("plan: %w", errNoTerm)
	}
	if err := c.agentProblems(); err != nil {
		return c, err
	}
	if len(c.Policies) == 0 {
		for _, n := range DefaultPolicies {
			p, _ := LookupPolicy(n)
			c.Policies = append(c.Policies, p)
		}
	}
	if c.Seeds <= 0 {
		c.Seeds = DefaultSeeds
	}
	if c.Seed == 0 {
		c.Seed = c.Scenario.WithDefaults().Seed
	}
	if c.Warmup < 0 {
		c.Warmup = c.Scenario.WithDefaults().Warmup
		if c.Warmup == 0 {
			c.Warmup = DefaultWarmup
		}
	}
	if c.Start <= 0 {
		c.Start = c.Fleet.Replicas
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessionsPerReplica * c.Fleet.Replicas
	}
	c.Start = min(c.Start, c.MaxSessions)
	if c.Resolution <= 0 {
		c.Resolution = 1
	}
	if c.MaxReplicas <= 0 {
		c.MaxReplicas = DefaultMaxReplicas
	}
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c, nil
}

func (c Config) seeds() []uint64 {
	s := make([]uint64, c.Seeds)
	for i := range s {
		s[i] = c.Seed + uint64(i)
	}
	return s
}

// evaluator evaluates points of one policy once each and reports progress.
type evaluator struct {
	c     Config
	p     Policy
	t0    time.Time
	done  map[[2]int]*Point
	pr    *PolicyResult
	label string
}

// at evaluates n sessions on r replicas; ok false when the budget stopped it.
func (e *evaluator) at(ctx context.Context, n, r int) (*Point, bool, error) {
	if pt := e.done[[2]int{n, r}]; pt != nil {
		return pt, true, nil
	}
	if e.c.Budget > 0 && time.Since(e.t0) > e.c.Budget {
		e.pr.Budget = true
		return nil, false, nil
	}
	t := time.Now()
	pt, err := evaluate(ctx, e.c.Fleet.withReplicas(r), e.p, e.c.Scenario, e.c.Warmup, n, e.c.seeds(), e.c.SLO, e.c.Workers)
	if err != nil {
		return nil, false, err
	}
	e.done[[2]int{n, r}] = pt
	e.pr.Points = append(e.pr.Points, pt)
	verdict := "meets the SLO"
	if !pt.OK {
		verdict = "fails: " + pt.Failed()
	}
	fmt.Fprintf(e.c.Progress, "plan %-14s %5d sessions x %4d replicas: TTFB p50 %7.2f s, p95 %7.2f s, p99 %7.2f s, goodput %.3f, %8.0f tok/min: %s [%d seeds, %.1f s; total %.1f s]\n",
		e.p.Name, n, r, pt.TTFBP50S, pt.TTFBP95S, pt.TTFBP99S, pt.Goodput, pt.OutputTokensPerMin, verdict, len(pt.Samples), time.Since(t).Seconds(), time.Since(e.t0).Seconds())
	return pt, true, nil
}

func newEvaluator(c Config, p Policy, t0 time.Time, pr *PolicyResult) *evaluator {
	return &evaluator{c: c, p: p, t0: t0, done: map[[2]int]*Point{}, pr: pr}
}

// searchSessions finds the largest session count meeting the SLO: galloping
// (Start, 2 x Start, ... up to MaxSessions) until a point fails, then bisection
// between the last point met and the first failed, down to Resolution.
func searchSessions(ctx context.Context, c Config, p Policy, t0 time.Time) (PolicyResult, error) {
	pr := PolicyResult{Policy: p.Name}
	e := newEvaluator(c, p, t0, &pr)
	r := c.Fleet.Replicas
	lo, hi := 0, 0 // lo: largest met (0: none); hi: smallest failed (0: none)
	for n := c.Start; ; n = min(2*n, c.MaxSessions) {
		pt, ok, err := e.at(ctx, n, r)
		if err != nil || !ok {
			return pr, err
		}
		if !pt.OK {
			hi = n
			break
		}
		lo = n
		pr.Knee = pt
		if n >= c.MaxSessions {
			break
		}
	}
	if hi > 0 {
		pr.FirstFail = e.done[[2]int{hi, r}]
	}
	for hi > 0 && hi-lo > c.Resolution {
		mid := lo + (hi-lo)/2
		pt, ok, err := e.at(ctx, mid, r)
		if err != nil || !ok {
			return pr, err
		}
		if pt.OK {
			lo, pr.Knee = mid, pt
		} else {
			hi, pr.FirstFail = mid, pt
		}
	}
	pr.Resolved = hi == 0 || hi-lo <= c.Resolution
	return pr, nil
}

// searchReplicas finds the smallest replica count meeting the SLO with
// InverseSessions sessions: galloping from the KV-fit estimate's half (at least
// 1) up to MaxReplicas until a point meets it, then bisection to one replica.
func searchReplicas(ctx context.Context, c Config, p Policy, t0 time.Time) (PolicyResult, error) {
	pr := PolicyResult{Policy: p.Name}
	e := newEvaluator(c, p, t0, &pr)
	n := c.InverseSessions
	lo, hi := 0, 0 // lo: largest failed (0: none); hi: smallest met (0: none)
	for r := max(1, c.Start); ; r = min(2*r, c.MaxReplicas) {
		pt, ok, err := e.at(ctx, n, r)
		if err != nil || !ok {
			return pr, err
		}
		if pt.OK {
			hi, pr.Knee = r, pt
			break
		}
		lo, pr.FirstFail = r, pt
		if r >= c.MaxReplicas {
			break
		}
	}
	for hi > 0 && hi-lo > 1 {
		mid := lo + (hi-lo)/2
		pt, ok, err := e.at(ctx, n, mid)
		if err != nil || !ok {
			return pr, err
		}
		if pt.OK {
			hi, pr.Knee = mid, pt
		} else {
			lo, pr.FirstFail = mid, pt
		}
	}
	pr.Resolved = hi > 0 && hi-lo <= 1
	return pr, nil
}

// kvFit computes the rule of thumb from the peak context the simulated sessions
// reached (mean over every sample that had a finished session), or, when no
// session finished anywhere, from the scenario's nominal sizes.
func kvFit(c Config, res *Result) (KVFit, error) {
	kv, err := c.Fleet.KVTokens()
	if err != nil {
		return KVFit{}, err
	}
	f := KVFit{KVTokensReplica: kv, FleetKVTokens: kv * int64(c.Fleet.Replicas)}
	if c.trees() {
		f.PeakContextTokens, f.PeakSource = math.NaN(), "n/a: session trees"
		return f, nil
	}
	var sum, n float64
	for _, pr := range res.Policies {
		for _, pt := range pr.Points {
			for _, s := range pt.Samples {
				if !math.IsNaN(s.PeakContext) {
					sum += s.PeakContext
					n++
				}
			}
		}
	}
	if n > 0 {
		f.PeakContextTokens, f.PeakSource = sum/n, "simulated: mean over finished sessions of their largest prompt + output tokens"
	} else {
		sc := c.Scenario.WithDefaults()
		f.PeakContextTokens = float64(sc.SystemPromptTokens + sc.FirstTurnTokens + (sc.Turns-1)*sc.TurnTokens + sc.Turns*sc.MaxOutputTokens)
		f.PeakSource = "nominal: system + first + (turns-1) x turn + turns x max_output tokens (no simulated session finished)"
	}
	if f.PeakContextTokens > 0 {
		f.Sessions = int(float64(f.FleetKVTokens) / f.PeakContextTokens)
		if c.InverseSessions > 0 && kv > 0 {
			f.Replicas = int(math.Ceil(float64(c.InverseSessions) * f.PeakContextTokens / float64(kv)))
		}
	}
	return f, nil
}
