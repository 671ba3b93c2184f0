package study

import (
	"fmt"
	"math"
)

// Check is one acceptance criterion at one stage.
type Check struct {
	Sessions int
	What     string
	Value    string
	Target   string
	Met      bool
}

// Acceptance checks candidate against the baselines in setup, stage by stage
// (docs/routing.md, "Acceptance"):
//
//   - TTFB p50 and p95 at most, and output tokens/min at least, the better
//     baseline's mean, within Noise95 of the two cells;
//   - where the live working set fits the fleet's KV cache (fit ratio < 1), prefix
//     hits (server counters) at least 90 % of the unlimited-cache bound over the
//     candidate's own turns;
//   - from 16 sessions up, replicas busy at least replicas - 0.1 (3.9 of 4).
//
// Stages where a baseline or the candidate has no value are skipped.
func Acceptance(rows []Row, setup, candidate string, baselines []string, replicas int) []Check {
	type key struct{ stage int }
	cand := map[int]Row{}
	base := map[int][]Row{}
	var stages []int
	for _, r := range rows {
		if r.Setup != setup {
			continue
		}
		if r.Arm == candidate {
			cand[r.Stage] = r
			stages = append(stages, r.Stage)
		}
		for _, b := range baselines {
			if r.Arm == b {
				base[r.Stage] = append(base[r.Stage], r)
			}
		}
	}
	var out []Check
	for _, st := range stages {
		c := cand[st]
		for _, m := range []string{"ttfb_p50_s", "ttfb_p95_s", "output_tokens_per_min"} {
			met, _ := MetricByKey(m)
			cc := c.Cells[m]
			var best Cell
			var bestArm string
			for _, b := range base[st] {
				bc := b.Cells[m]
				if bc.N == 0 || math.IsNaN(bc.Mean) {
					continue
				}
				if bestArm == "" || (met.LowerBetter && bc.Mean < best.Mean) || (!met.LowerBetter && bc.Mean > best.Mean) {
					best, bestArm = bc, b.Arm
				}
			}
			if bestArm == "" || cc.N == 0 || math.IsNaN(cc.Mean) {
				continue
			}
			noise := Noise95(cc, best)
			ok := cc.Mean <= best.Mean+noise
			target := fmt.Sprintf("<= %s (%s) + %s noise", num(best.Mean), bestArm, num(noise))
			if !met.LowerBetter {
				ok = cc.Mean >= best.Mean-noise
				target = fmt.Sprintf(">= %s (%s) - %s noise", num(best.Mean), bestArm, num(noise))
			}
			out = append(out, Check{c.Sessions, met.Title, num(cc.Mean), target, ok})
		}
		fit := c.Cells["fit_ratio"]
		hits, bound := c.Cells["prefix_hits_pct"], c.Cells["bound_hits_pct"]
		if fit.N > 0 && fit.Mean < 1 && hits.N > 0 && bound.N > 0 {
			out = append(out, Check{c.Sessions, "prefix hits vs unlimited-cache bound (working set fits)",
				fmt.Sprintf("%.1f%% of %.1f%% = %.0f%%", hits.Mean, bound.Mean, 100*hits.Mean/bound.Mean),
				">= 90%", hits.Mean >= 0.9*bound.Mean})
		}
		if busy := c.Cells["replicas_busy"]; c.Sessions >= 16 && busy.N > 0 {
			out = append(out, Check{c.Sessions, "replicas busy", num(busy.Mean),
				fmt.Sprintf(">= %.1f", float64(replicas)-0.1), busy.Mean >= float64(replicas)-0.1})
		}
	}
	return out
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
