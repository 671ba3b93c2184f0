package study

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lmwarden/warden/internal/run/virtual"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// UnlimitedBlocks is the KV cache given to every engine of an unlimited-cache arm:
// 2^19 blocks of 16 tokens = 8.4M tokens per replica, more than any scenario here
// ever writes to one replica (the reference run writes about 1M tokens per
// replica, the fleet scenario about 3M), so nothing is ever evicted.
const UnlimitedBlocks = 1 << 19

// Arm is one way of routing (or a reference) that the study measures.
type Arm struct {
	Name     string // label in tables and figures
	Affinity bool   // false: the router's ShortestQueue (vLLM's balancer)
	// Policy is the router policy used with affinity on (router.PolicyNames).
	Policy string
	// NewPolicy, when set, builds a custom policy per run (experiments); it
	// overrides Policy.
	NewPolicy func(env PolicyEnv) router.Policy
	// OverflowThreshold in in-flight requests; 0 = auto (max_num_seqs / 4).
	OverflowThreshold int
	// LiveWindow fixes the session table's live window (0: adaptive).
	LiveWindow time.Duration
	// UnlimitedCache gives every engine UnlimitedBlocks: the reference for the
	// best prefix hit rate any placement could reach.
	UnlimitedCache bool
	// CountPerAttempt turns on sim.EngineConfig.CountPrefixStatsPerAttempt (the
	// old vLLM double counting of prefix-cache stats).
	CountPerAttempt bool
	// Reference marks an arm that is not a candidate policy (the unlimited-cache
	// bound): excluded from the acceptance comparison.
	Reference bool
	// Admission configures the router's admission gate (admit-* arms).
	Admission router.AdmissionConfig
}

// PolicyEnv is what a custom policy is built from.
type PolicyEnv struct {
	Seed   uint64
	Margin int // overflow margin (the threshold comes in Request.Threshold)
	// SharedPrefixTokens is the rendered length of the scenario's shared system
	// prompt: knowledge a router does not have from sizes alone, given to
	// experiments that ask what it would be worth.
	SharedPrefixTokens int
}

// Setup is a workload and the fleet it runs on.
type Setup struct {
	Name       string
	Scenario   *loadgen.Scenario // variants are replaced per arm
	Replicas   int
	Profile    sim.Profile
	MaxNumSeqs int // per engine; 0 = sim.ReferenceMaxNumSeqs
	// NumGPUBlocks overrides the profile's KV capacity (0: from the profile).
	NumGPUBlocks int
}

// Stage is one stage of one run: the report's summary and the study's extras.
type Stage struct {
	report.Summary
	// BoundHitsPct is the unlimited-cache bound of the prefix hit rate over the
	// same OK turns as UsageCachedPct (see Bound).
	BoundHitsPct float64 `json:"bound_hits_pct"`
	// Means over the stage window of the ground-truth trace (Trace): live
	// conversations and their working set summed over the fleet, the spread
	// (max - min) of live conversations across replicas, and replicas with no
	// live conversation.
	LiveConversations float64 `json:"live_conversations"`
	WorkingSetTokens  float64 `json:"working_set_tokens"`
	LiveSpread        float64 `json:"live_spread"`
	IdleReplicas      float64 `json:"idle_replicas"`
	// Preemptions summed over replicas in the window (vllm:num_preemptions_total).
	Preemptions float64 `json:"preemptions"`
	// FleetKVTokens is the fleet's total KV cache in tokens, and FitRatio the
	// working set over it: below 1 the live working sets fit the fleet's cache.
	FleetKVTokens float64 `json:"fleet_kv_tokens"`
	FitRatio      float64 `json:"fit_ratio"`
	// Moves counts decisions by reason in the window (from the router's hook).
	Decisions map[string]int `json:"decisions"`
}

// RunResult is one (setup, arm, seed, stage duration) run reduced to its stages.
type RunResult struct {
	Setup string
	Arm   string
	Seed  uint64
	// StageDuration is the stage duration the run used.
	StageDuration time.Duration
	Stages        []Stage
	// Placements are the router's decisions with the view it had (only when
	// RunOptions.Placements is set).
	Placements []Placement
	// Trace is the ground-truth trace of the run (only when RunOptions.Trace).
	Trace *Trace
	Wall  time.Duration
}

// RunOptions are per-run switches.
type RunOptions struct {
	Placements bool   // record every decision's view (signals.go)
	Trace      bool   // keep the trace in the result
	KeepDir    string // when set, the results directory is written there and kept
	// StageDuration replaces the setup's stage duration when > 0.
	StageDuration time.Duration
}

// variantFor returns the scenario variant name for an arm: "on" for affinity,
// "off" otherwise (loadgen.AffinityOf).
func variantFor(a Arm) string {
	if a.Affinity {
		return "on"
	}
	return "off"
}

// RunOne runs setup under arm with the scenario seed replaced by seed, in virtual
// time, and reduces it. The variant starts with a cold cache.
func RunOne(ctx context.Context, s Setup, a Arm, seed uint64, o RunOptions) (*RunResult, error) {
	sc := *s.Scenario.WithDefaults()
	sc.Seed = seed
	sc.Variants = []string{variantFor(a)}
	if o.StageDuration > 0 {
		sc.StageDuration = o.StageDuration
	}
	dir := o.KeepDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "warden-study-")
		if err != nil {
			return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	out, err := loadgen.CreateResults(dir)
	if err != nil {
		return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, err)
	}
	ecfg, blockSize, kvTokens, err := studyEngine(s, a)
	if err != nil {
		return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, err)
	}
	maxSeqs := ecfg.MaxNumSeqs
	var recs []Placement
	bcfg := router.BalancerConfig{
		MaxNumSeqs:        maxSeqs,
		OverflowThreshold: a.OverflowThreshold,
		Policy:            a.Policy,
		KVCapacityTokens:  kvTokens,
		LiveWindow:        a.LiveWindow,
		Seed:              seed,
		Admission:         a.Admission,
	}
	if a.NewPolicy != nil {
		bcfg.AffinityPolicy = a.NewPolicy(PolicyEnv{Seed: seed, Margin: router.DefaultOverflowMargin, SharedPrefixTokens: systemTokens(&sc)})
	}
	decisions := map[decKey]int{}
	bcfg.OnDecision = func(ev router.DecisionEvent) {
		decisions[decKey{ev.Now, ev.Decision.Reason}]++
		if o.Placements {
			recs = append(recs, newPlacement(ev))
		}
	}
	t0 := time.Now()
	_, runErr := virtual.Run(ctx, virtual.Config{
		Scenario: &sc,
		Replicas: s.Replicas,
		Engine:   ecfg,
		Balancer: bcfg,
		Out:      out,
		RunID:    fmt.Sprintf("study-%s-%s-%d", s.Name, a.Name, seed),
		Profile:  s.Profile.Name,
		Policy:   a.Name,
	})
	if runErr != nil {
		return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, runErr)
	}
	run, err := report.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, err)
	}
	sums, err := report.Summarize(run)
	if err != nil {
		return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, err)
	}
	if o.KeepDir != "" {
		if err := report.Generate(dir, discard{}); err != nil {
			return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, err)
		}
	}
	rr := &RunResult{Setup: s.Name, Arm: a.Name, Seed: seed, StageDuration: sc.StageDuration, Placements: recs, Wall: time.Since(t0)}
	sysTokens := systemTokens(&sc)
	v := sc.Variants[0]
	tr := BuildTrace(run, v)
	if tr == nil {
		return nil, fmt.Errorf("running %s/%s seed %d: %w", s.Name, a.Name, seed, errors.New("no trace: the run produced no turns"))
	}
	fleet := float64(kvTokens) * float64(s.Replicas)
	for _, sum := range sums {
		st := Stage{Summary: sum, FleetKVTokens: fleet, Decisions: map[string]int{}}
		st.BoundHitsPct = Bound(run.Results, v, sum.WindowStart, sum.WindowEnd, sysTokens, blockSize)
		tr.stageMeans(&st, sum.WindowStart, sum.WindowEnd)
		if fleet > 0 {
			st.FitRatio = st.WorkingSetTokens / fleet
		}
		for k, n := range decisions {
			if k.at >= sum.WindowStart && k.at < sum.WindowEnd {
				st.Decisions[k.reason.String()] += n
			}
		}
		rr.Stages = append(rr.Stages, st)
	}
	if o.Trace {
		rr.Trace = tr
	}
	return rr, nil
}

// studyEngine returns the engine config of setup s under arm a, its KV block
// size (tokens) and the KV capacity (tokens per replica) placement and fit
// use: the real one also when the arm's engines never evict.
func studyEngine(s Setup, a Arm) (sim.EngineConfig, int, int64, error) {
	maxSeqs := s.MaxNumSeqs
	if maxSeqs == 0 {
		maxSeqs = sim.ReferenceMaxNumSeqs
	}
	ecfg := sim.EngineConfig{Profile: s.Profile, MaxNumSeqs: maxSeqs, NumGPUBlocks: s.NumGPUBlocks, CountPrefixStatsPerAttempt: a.CountPerAttempt}
	if a.UnlimitedCache {
		ecfg.NumGPUBlocks = UnlimitedBlocks
	}
	probe, err := sim.NewEngine(ecfg)
	if err != nil {
		return ecfg, 0, 0, err
	}
	pc := probe.Config()
	kvTokens := int64(pc.NumGPUBlocks-1) * int64(pc.BlockSize)
	if a.UnlimitedCache {
		// The study's KV capacity for placement and fit: the real one.
		ecfg2 := ecfg
		ecfg2.NumGPUBlocks = s.NumGPUBlocks
		if p2, err := sim.NewEngine(ecfg2); err == nil {
			kvTokens = int64(p2.Config().NumGPUBlocks-1) * int64(p2.Config().BlockSize)
		}
	}
	return ecfg, pc.BlockSize, kvTokens, nil
}

type decKey struct {
	at     time.Duration
	reason router.Reason
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// systemTokens is the rendered length in tokens of the scenario's shared system
// prompt (the chat template's system message), 0 when there is none.
func systemTokens(sc *loadgen.Scenario) int {
	w := loadgen.NewWorkload(sc)
	if s := w.SystemPrompt(); s != "" {
		return len(sim.AppendMessage(nil, sim.ChatMessage{Role: "system", Content: s}))
	}
	return 0
}
