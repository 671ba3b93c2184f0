package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lmwarden/warden/loadgen"
)

// seriesFeeds names the report columns computed from a series.csv column (the
// other series columns feed the figures only).
var seriesFeeds = map[string]string{
	"running":        "replicas busy",
	"prefix_queries": "prefix hits %",
	"prefix_hits":    "prefix hits %",
}

// MissingColumns says, per reason, which series.csv columns a run lacks on
// which replicas and which report columns are n/a because of it, from the
// manifest's Engines (ColumnSource.Missing), e.g. "replicas busy, prefix hits %
// n/a (series running, prefix_queries, prefix_hits, ...) on r0, r1: metrics
// off: GET /metrics answered 501 (llama-server needs --metrics)". Nil for a
// manifest without Engines (vLLM runs, virtual runs), whose columns all come
// from vLLM's series. summary.md lists these lines; warden bench prints them.
func MissingColumns(m *loadgen.Manifest) []string {
	type group struct {
		reason   string
		columns  []string
		replicas []string
	}
	var groups []*group
	for _, e := range m.Engines {
		for _, c := range e.Columns {
			if c.Missing == "" {
				continue
			}
			i := slices.IndexFunc(groups, func(g *group) bool { return g.reason == c.Missing })
			if i < 0 {
				groups = append(groups, &group{reason: c.Missing})
				i = len(groups) - 1
			}
			g := groups[i]
			if !slices.Contains(g.columns, c.Column) {
				g.columns = append(g.columns, c.Column)
			}
			if !slices.Contains(g.replicas, e.Replica) {
				g.replicas = append(g.replicas, e.Replica)
			}
		}
	}
	var out []string
	for _, g := range groups {
		var feeds []string
		for _, c := range g.columns {
			if f, ok := seriesFeeds[c]; ok && !slices.Contains(feeds, f) {
				feeds = append(feeds, f)
			}
		}
		what := "no report column"
		if len(feeds) > 0 {
			what = strings.Join(feeds, ", ")
		}
		out = append(out, fmt.Sprintf("%s n/a (series %s) on %s: %s", what, strings.Join(g.columns, ", "), strings.Join(g.replicas, ", "), g.reason))
	}
	return out
}
