package study

import (
	"math"
	"slices"
)

// Metric is one per-stage figure the study aggregates across seeds.
type Metric struct {
	Key         string // column name
	Title       string // axis label
	LowerBetter bool
	Get         func(*Stage) float64
}

// Metrics are the aggregated figures, in table order.
var Metrics = []Metric{
	{"ttfb_p50_s", "TTFB p50 (s)", true, func(s *Stage) float64 { return s.TTFBP50S }},
	{"ttfb_p95_s", "TTFB p95 (s)", true, func(s *Stage) float64 { return s.TTFBP95S }},
	{"output_tokens_per_min", "output tokens/min", false, func(s *Stage) float64 { return s.OutputTokensPerMin }},
	{"prefix_hits_pct", "prefix hits % (server counters)", false, func(s *Stage) float64 { return s.PrefixHitsPct }},
	{"usage_cached_pct", "cached % (per-request usage)", false, func(s *Stage) float64 { return s.UsageCachedPct }},
	{"bound_hits_pct", "unlimited-cache bound %", false, func(s *Stage) float64 { return s.BoundHitsPct }},
	{"replicas_busy", "replicas busy", false, func(s *Stage) float64 { return s.ReplicasBusy }},
	{"stayed_pct", "stayed on replica %", false, func(s *Stage) float64 { return s.StayedPct }},
	{"live_spread", "live conversations max-min", true, func(s *Stage) float64 { return s.LiveSpread }},
	{"idle_replicas", "replicas with no live conversation", true, func(s *Stage) float64 { return s.IdleReplicas }},
	{"preemptions", "preemptions in stage", true, func(s *Stage) float64 { return s.Preemptions }},
	{"fit_ratio", "working set / fleet KV", true, func(s *Stage) float64 { return s.FitRatio }},
	{"sessions_per_h", "sessions/h", false, func(s *Stage) float64 { return s.SessionsPerH }},
	// Admission (admit-* arms): turns held at the router and their hold.
	{"held_turns", "turns held at the router", true, func(s *Stage) float64 { return float64(s.HeldTurns) }},
	{"hold_p50_s", "hold p50 of held turns (s)", true, func(s *Stage) float64 { return s.HoldP50S }},
	{"hold_p95_s", "hold p95 of held turns (s)", true, func(s *Stage) float64 { return s.HoldP95S }},
	{"hold_max_s", "longest hold (s)", true, func(s *Stage) float64 { return s.HoldMaxS }},
}

// MetricByKey returns the metric with the given key.
func MetricByKey(key string) (Metric, bool) {
	for _, m := range Metrics {
		if m.Key == key {
			return m, true
		}
	}
	return Metric{}, false
}

// Cell is one metric across seeds: mean, sample standard deviation, extremes and
// the number of seeds with a value (NaN values are left out).
type Cell struct {
	Mean, SD, Min, Max float64
	N                  int
}

// Noise95 is the half-width of the normal 95 % interval of the difference of two
// cells' means: 1.96 x sqrt(sd_a^2/n_a + sd_b^2/n_b). With 3 seeds this is a
// rough yardstick, not a test.
func Noise95(a, b Cell) float64 {
	if a.N == 0 || b.N == 0 {
		return math.NaN()
	}
	return 1.96 * math.Sqrt(a.SD*a.SD/float64(a.N)+b.SD*b.SD/float64(b.N))
}

func newCell(vals []float64) Cell {
	c := Cell{Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	for _, v := range vals {
		if math.IsNaN(v) {
			continue
		}
		c.N++
		sum += v
		c.Min, c.Max = min(c.Min, v), max(c.Max, v)
	}
	if c.N == 0 {
		return Cell{Mean: math.NaN(), SD: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	c.Mean = sum / float64(c.N)
	if c.N > 1 {
		var ss float64
		for _, v := range vals {
			if !math.IsNaN(v) {
				ss += (v - c.Mean) * (v - c.Mean)
			}
		}
		c.SD = math.Sqrt(ss / float64(c.N-1))
	}
	return c
}

// Row is one (setup, arm, stage) across its samples: the seeds, times the stage
// durations when Options.StageDurations is set (Seeds counts the samples).
type Row struct {
	Setup    string
	Arm      string
	Stage    int
	Sessions int
	Seeds    int
	Cells    map[string]Cell // by Metric.Key
}

// Aggregate groups runs by setup, arm and stage and reduces every metric across
// seeds. Rows come in the order setups, then arms, then stages first appear.
func Aggregate(runs []*RunResult) []Row {
	type key struct {
		setup, arm string
		stage      int
	}
	var order []key
	vals := map[key]map[string][]float64{}
	sessions := map[key]int{}
	seeds := map[key]int{}
	for _, r := range runs {
		for i := range r.Stages {
			st := &r.Stages[i]
			k := key{r.Setup, r.Arm, st.Stage}
			if vals[k] == nil {
				vals[k] = map[string][]float64{}
				order = append(order, k)
			}
			sessions[k] = st.Sessions
			seeds[k]++
			for _, m := range Metrics {
				vals[k][m.Key] = append(vals[k][m.Key], m.Get(st))
			}
		}
	}
	setupRank, armRank := map[string]int{}, map[string]int{}
	for _, k := range order {
		if _, ok := setupRank[k.setup]; !ok {
			setupRank[k.setup] = len(setupRank)
		}
		if _, ok := armRank[k.arm]; !ok {
			armRank[k.arm] = len(armRank)
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if c := setupRank[a.setup] - setupRank[b.setup]; c != 0 {
			return c
		}
		if a.stage != b.stage {
			return a.stage - b.stage
		}
		return armRank[a.arm] - armRank[b.arm]
	})
	rows := make([]Row, 0, len(order))
	for _, k := range order {
		row := Row{Setup: k.setup, Arm: k.arm, Stage: k.stage, Sessions: sessions[k], Seeds: seeds[k], Cells: map[string]Cell{}}
		for _, m := range Metrics {
			row.Cells[m.Key] = newCell(vals[k][m.Key])
		}
		rows = append(rows, row)
	}
	return rows
}
