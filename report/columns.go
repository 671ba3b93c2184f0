package report

import (
	"math"
	"strconv"
)

// column is one column of results.csv, in CSV order: the one table that the CSV
// header (CSVColumns), its rows (ResultsCSV), the metric set (Metrics,
// Summary.Metric, Compare's thresholds and deltas) and the reference table's
// columns come from. A column with a value is a metric.
type column struct {
	name string
	cell func(s *Summary) string // the results.csv cell; nil for a metric: csvFloat(value)

	// Metrics only.
	value  func(s *Summary) float64
	stdErr func(s *Summary) float64 // of the per-sub-window estimate; nil: no noise estimate
	header string                   // reference-table header
	prec   int                      // reference-table decimals; -1: whole, grouped by thousands
}

// columns: the metrics follow the reference measurement's columns
// (docs/measurements.md, "The reference measurement"), plus the usage-based hit rate as a cross-check of the counter-based one.
var columns = []column{
	{name: "variant", cell: func(s *Summary) string { return s.Variant }},
	intColumn("sessions", func(s *Summary) int { return s.Sessions }),
	{name: MetricSessionsPerH, header: "sessions/h", prec: -1,
		value: func(s *Summary) float64 { return s.SessionsPerH }},
	{name: MetricOutputTokensPerMin, header: "out tok/min", prec: -1,
		value:  func(s *Summary) float64 { return s.OutputTokensPerMin },
		stdErr: func(s *Summary) float64 { return s.OutputTokensPerMinStdErr }},
	{name: MetricTTFBP50S, header: "TTFB p50 (s)", prec: 2,
		value:  func(s *Summary) float64 { return s.TTFBP50S },
		stdErr: func(s *Summary) float64 { return s.TTFBP50StdErrS }},
	{name: MetricTTFBP95S, header: "TTFB p95 (s)", prec: 2,
		value:  func(s *Summary) float64 { return s.TTFBP95S },
		stdErr: func(s *Summary) float64 { return s.TTFBP95StdErrS }},
	{name: MetricReplicasBusy, header: "replicas busy", prec: 2,
		value: func(s *Summary) float64 { return s.ReplicasBusy }},
	{name: MetricPrefixHitsPct, header: "prefix hits %", prec: 1,
		value: func(s *Summary) float64 { return s.PrefixHitsPct }},
	{name: MetricStayedPct, header: "stayed %", prec: 1,
		value: func(s *Summary) float64 { return s.StayedPct }},
	{name: MetricUsageCachedPct, header: "usage cached %", prec: 1,
		value: func(s *Summary) float64 { return s.UsageCachedPct }},
	intColumn("turns_ok", func(s *Summary) int { return s.TurnsOK }),
	intColumn("turns_failed", func(s *Summary) int { return s.TurnsFailed }),
	floatColumn("prompt_tokens_mean", func(s *Summary) float64 { return s.PromptTokensMean }),
	floatColumn("nominal_prompt_tokens_mean", func(s *Summary) float64 { return s.NominalPromptTokensMean }),
	{name: "complete", cell: func(s *Summary) string { return strconv.FormatBool(s.Complete) }},
	floatColumn("send_lag_p50_s", func(s *Summary) float64 { return s.SendLagP50S }),
	floatColumn("send_lag_p99_s", func(s *Summary) float64 { return s.SendLagP99S }),
	intColumn("side_requests_ok", func(s *Summary) int { return s.SideOK }),
	intColumn("side_requests_failed", func(s *Summary) int { return s.SideFailed }),
	floatColumn("side_on_home_pct", func(s *Summary) float64 { return s.SideOnHomePct }),
	intColumn("turns_no_output", func(s *Summary) int { return s.TurnsNoOutput }),
	floatColumn("turns_in_flight_mean", func(s *Summary) float64 { return s.Concurrency.TurnsInFlightMean }),
	floatColumn("concurrency_pct", func(s *Summary) float64 { return s.Concurrency.Pct }),
	floatColumn("engine_requests_mean", func(s *Summary) float64 { return s.Concurrency.EngineRequestsMean }),
	// Admission (router.AdmissionConfig): turns the router held, and their hold.
	intColumn("held_turns", func(s *Summary) int { return s.HeldTurns }),
	floatColumn("hold_p50_s", func(s *Summary) float64 { return s.HoldP50S }),
	floatColumn("hold_p95_s", func(s *Summary) float64 { return s.HoldP95S }),
	// Goodput under the scenario's slo (empty without one).
	floatColumn("goodput_pct", func(s *Summary) float64 { return s.GoodputPct }),
	floatColumn("goodput_per_min", func(s *Summary) float64 { return s.GoodputPerMin }),
	// Conversation completion time (Summary.ConversationP50S): what an agent
	// waits for a whole task, holds and think time included.
	{name: MetricConversationP50S, header: "conv p50 (s)", prec: 1,
		value: func(s *Summary) float64 { return s.ConversationP50S }},
	{name: MetricConversationP95S, header: "conv p95 (s)", prec: 1,
		value: func(s *Summary) float64 { return s.ConversationP95S }},
	// The hit rate implied by the engines' computed-prompt counters.
	floatColumn("computed_cached_pct", func(s *Summary) float64 { return s.ComputedCachedPct }),
}

func intColumn(name string, v func(s *Summary) int) column {
	return column{name: name, cell: func(s *Summary) string { return strconv.Itoa(v(s)) }}
}

func floatColumn(name string, v func(s *Summary) float64) column {
	return column{name: name, cell: func(s *Summary) string { return csvFloat(v(s)) }}
}

// metricColumns are the columns that are metrics, in table order; metricByName
// indexes them.
var (
	metricColumns = filterColumns(func(c *column) bool { return c.value != nil })
	metricByName  = indexColumns(metricColumns)
)

func filterColumns(keep func(c *column) bool) []*column {
	var out []*column
	for i := range columns {
		if keep(&columns[i]) {
			out = append(out, &columns[i])
		}
	}
	return out
}

func indexColumns(cs []*column) map[string]*column {
	out := make(map[string]*column, len(cs))
	for _, c := range cs {
		out[c.name] = c
	}
	return out
}

func columnNames(cs []*column) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// csvCell renders the column's results.csv cell for s.
func (c *column) csvCell(s *Summary) string {
	if c.cell != nil {
		return c.cell(s)
	}
	return csvFloat(c.value(s))
}

// hasNoise reports whether the metric has a per-sub-window noise estimate.
func (c *column) hasNoise() bool { return c.stdErr != nil }

// format renders a metric's value as the reference table shows it ("n/a" for NaN).
func (c *column) format(v float64) string {
	if c.prec < 0 {
		return fmtThousands(v)
	}
	return fmtPrec(c.prec)(v)
}

// metric returns a metric's value for s and the standard error of its
// per-sub-window estimate (NaN without one).
func (c *column) metric(s *Summary) (value, stdErr float64) {
	stdErr = math.NaN()
	if c.stdErr != nil {
		stdErr = c.stdErr(s)
	}
	return c.value(s), stdErr
}
