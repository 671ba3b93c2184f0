package report

import (
	"math"

	"gonum.org/v1/plot"

	"github.com/lmwarden/warden/loadgen"
)

// The hit-rate figures, prefix_hits.png and replica_hits.png, from the source
// a run has. The engines' prefix-cache counters (vLLM, SGLang) come first;
// an engine without them (llama.cpp exports no hit counter,
// engines.CapabilityOf(llamacpp).HitRate) gets the same rate from the
// responses' usage, cached / prompt tokens (Summary.UsageCachedPct), and
// prefix_hits.png else from the computed-prompt counter against the
// responses' prompt tokens (Summary.ComputedCachedPct). A run with none of
// them leaves the figure out, with the reason summary.md prints, rather than
// drawing empty axes.

// fig is one figure WritePlots draws (make), or leaves out (omitted: why),
// with a note on its source.
type fig struct {
	file, title string
	make        func() ([]byte, error)
	note        string
	omitted     string
}

// singlePlot renders the one plot build makes.
func singlePlot(build func() (*plot.Plot, error)) func() ([]byte, error) {
	return func() ([]byte, error) {
		p, err := build()
		if err != nil {
			return nil, err
		}
		return renderPNG(p)
	}
}

// noHitData reports whether run has neither turns nor series: its figures
// are drawn empty, so the set stays stable (TestGenerateNoData).
func noHitData(run *Run) bool { return len(run.Results) == 0 && len(run.Series) == 0 }

// anyFinite reports whether value is a number (not NaN) for some summary.
func anyFinite(sums []Summary, value func(*Summary) float64) bool {
	for i := range sums {
		if !math.IsNaN(value(&sums[i])) {
			return true
		}
	}
	return false
}

// noCounterNote begins the note of a hit-rate figure drawn without counters.
const noCounterNote = "no replica exported prefix-cache counters (prefix_queries, prefix_hits; llama.cpp has none)"

// prefixHitsFig is prefix_hits.png: the hit rate per stage from the first
// source the run has.
func prefixHitsFig(run *Run, sums []Summary) fig {
	m := &run.Manifest
	const file, title = "prefix_hits.png", "Prefix-cache hit rate vs sessions"
	stage := func(plotTitle, yLabel string, value func(*Summary) float64) func() ([]byte, error) {
		return singlePlot(func() (*plot.Plot, error) { return stageFigure(m, sums, plotTitle, yLabel, 100, value, nil) })
	}
	counters := func(s *Summary) float64 { return s.PrefixHitsPct }
	usage := func(s *Summary) float64 { return s.UsageCachedPct }
	computed := func(s *Summary) float64 { return s.ComputedCachedPct }
	switch {
	case anyFinite(sums, counters) || noHitData(run):
		return fig{file, title, stage("Prefix-cache hits (engine counter deltas, all replicas)", "prefix hits (% of prompt tokens)", counters), "", ""}
	case anyFinite(sums, usage):
		return fig{file, title + " (responses' usage)",
			stage("Prefix-cache hits (responses' usage: cached / prompt tokens, all replicas)", "cached (% of prompt tokens)", usage),
			"drawn from the responses' usage (usage cached % of results.csv): " + noCounterNote, ""}
	case anyFinite(sums, computed):
		return fig{file, title + " (computed-prompt counter)",
			stage("Prefix-cache hits (prompt tokens not computed, all replicas)", "cached (% of prompt tokens)", computed),
			"drawn from the computed-prompt counter against the responses' prompt tokens (computed_cached_pct of results.csv): " + noCounterNote + " and no response reported cached tokens", ""}
	}
	return fig{file, title, nil, "", "not drawn: " + noCounterNote + ", no response reported cached tokens and no replica a computed-prompt counter"}
}

// replicaHitsFig is replica_hits.png: per replica and variant, the hit rate
// over the whole variant from the engines' counters, else the responses'
// usage.
func replicaHitsFig(run *Run) fig {
	const file, title = "replica_hits.png", "Prefix-cache hit rate per replica"
	counters := func(v string) map[string]float64 { return ReplicaHitsPct(run.Series, v) }
	usage := func(v string) map[string]float64 { return replicaUsagePct(run.Results, v) }
	bars := func(plotTitle, yLabel string, hits func(string) map[string]float64) func() ([]byte, error) {
		return singlePlot(func() (*plot.Plot, error) { return replicaHitsFigure(run, plotTitle, yLabel, hits) })
	}
	has := func(hits func(string) map[string]float64) bool {
		for _, v := range run.Manifest.Variants {
			for _, h := range hits(v.Name) {
				if !math.IsNaN(h) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has(counters) || noHitData(run):
		return fig{file, title, bars("Prefix-cache hit rate per replica (whole variant)", "prefix hits (% of prompt tokens)", counters), "", ""}
	case has(usage):
		return fig{file, title + " (responses' usage)",
			bars("Prefix-cache hit rate per replica (whole variant, responses' usage: cached / prompt tokens)", "cached (% of prompt tokens)", usage),
			"drawn from the responses' usage of the turns each replica served: " + noCounterNote, ""}
	}
	return fig{file, title, nil, "", "not drawn: " + noCounterNote + " and no response reported cached tokens"}
}

// replicaUsagePct returns, per replica, 100 * sum(CachedTokens) /
// sum(PromptTokens) over the variant's OK turns (side requests left out, as in
// Summary.UsageCachedPct) that it served and whose usage reported cached
// tokens (CachedTokens >= 0); replicas with none are absent.
func replicaUsagePct(results []loadgen.Result, variant string) map[string]float64 {
	cached, prompt := map[string]int64{}, map[string]int64{}
	for i := range results {
		r := &results[i]
		if r.Variant != variant || r.Side || r.Replica == "" || !r.OK() || r.CachedTokens < 0 {
			continue
		}
		cached[r.Replica] += int64(r.CachedTokens)
		prompt[r.Replica] += int64(r.PromptTokens)
	}
	out := make(map[string]float64, len(prompt))
	for n, p := range prompt {
		out[n] = pct(float64(cached[n]), float64(p))
	}
	return out
}
