package report

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/lmwarden/warden/loadgen"
)

// ErrEngineMismatch is wrapped by Compare's error when the two runs' replicas ran
// other engine kinds, or a series column came from another source (manifest
// Engines; see engineDiff), and CompareOptions.Force is false.
var ErrEngineMismatch = errors.New("engines differ")

// ErrThresholdExceeded is wrapped by Compare's error when a --fail-on threshold is
// crossed; the CLI maps it to a non-zero exit.
var ErrThresholdExceeded = errors.New("threshold exceeded")

// ErrScenarioMismatch is wrapped by Compare's error when the two runs used
// different scenarios (and CompareOptions.Force is false).
var ErrScenarioMismatch = errors.New("scenarios differ")

// ErrWorldMismatch is wrapped by Compare's error when one run ran in virtual
// time and the other over HTTP (manifest mode "virtual" vs "http", "http-sim"),
// and CompareOptions.Force is false: the worlds differ in more than the code
// under test (the HTTP world adds loopback latency, goroutine scheduling and
// wall-clock scrape timing), so a difference would not say what changed.
var ErrWorldMismatch = errors.New("worlds differ")

// Gate is a regression gate (a --fail-on threshold) on one metric, parsed from
// "[variant/]metric:<sign><limit>[%]", e.g. "output_tokens_per_min:-5%" (fail when
// output tokens/min drop by more than 5 % of run A's value) or "ttfb_p95_s:+20%"
// (fail when p95 TTFB rises by more than 20 %), "on/prefix_hits_pct:-3" (fail when
// the hit rate of variant "on" drops by more than 3 points). The sign is required:
// it says which direction is a regression. Without a variant the gate applies to
// every variant; it applies to every stage present in both runs.
type Gate struct {
	Variant   string  // "" = all variants
	Metric    string  // one of Metrics
	Direction int     // -1: a drop is a regression; +1: a rise is
	Limit     float64 // allowed change, >= 0, in percent of A when Relative, else in the metric's unit
	Relative  bool
}

// ParseGate parses a --fail-on gate (see Gate). It fails for an unknown metric,
// a missing sign or a malformed number.
func ParseGate(s string) (Gate, error) {
	var t Gate
	spec, limit, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return t, fmt.Errorf("parsing threshold %q: want [variant/]metric:+N%% or -N%%", s)
	}
	if v, m, ok := strings.Cut(spec, "/"); ok {
		t.Variant, spec = v, m
	}
	t.Metric = spec
	if !slices.Contains(Metrics, t.Metric) {
		return t, fmt.Errorf("parsing threshold %q: unknown metric %q (want one of %s)", s, t.Metric, strings.Join(Metrics, ", "))
	}
	switch {
	case strings.HasPrefix(limit, "+"):
		t.Direction = 1
	case strings.HasPrefix(limit, "-"):
		t.Direction = -1
	default:
		return t, fmt.Errorf("parsing threshold %q: limit %q needs a sign: + (a rise fails) or - (a drop fails)", s, limit)
	}
	limit = limit[1:]
	if strings.HasSuffix(limit, "%") {
		t.Relative = true
		limit = strings.TrimSuffix(limit, "%")
	}
	v, err := strconv.ParseFloat(limit, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return t, fmt.Errorf("parsing threshold %q: bad limit %q", s, limit)
	}
	t.Limit = v
	return t, nil
}

// String renders t in the syntax ParseGate reads.
func (t Gate) String() string {
	var b strings.Builder
	if t.Variant != "" {
		b.WriteString(t.Variant + "/")
	}
	b.WriteString(t.Metric + ":")
	if t.Direction < 0 {
		b.WriteByte('-')
	} else {
		b.WriteByte('+')
	}
	b.WriteString(strconv.FormatFloat(t.Limit, 'f', -1, 64))
	if t.Relative {
		b.WriteByte('%')
	}
	return b.String()
}

// check returns whether d violates t and why. A change that cannot be computed
// (n/a on either side, or a relative change from 0) is a violation: a gate must not
// pass on missing data. A change past the limit that the stage's own noise
// covers (d.Noise == WithinNoise) is not, unless strict: the same code run twice
// moves that much. A change with no noise estimate is judged on the limit alone.
func (t Gate) check(d Delta, strict bool) (bool, string) {
	change, unit := d.Diff, ""
	if t.Relative {
		change, unit = d.RelPct, "%"
	}
	if math.IsNaN(change) {
		return true, "change cannot be computed (n/a)"
	}
	if float64(t.Direction)*change > t.Limit {
		if d.Noise == WithinNoise && !strict {
			return false, ""
		}
		return true, fmt.Sprintf("change %+.4g%s beyond limit %s", change, unit, t)
	}
	return false, ""
}

// CompareOptions tunes Compare.
type CompareOptions struct {
	FailOn []Gate // gates; any violation makes Compare return ErrThresholdExceeded
	// StrictGates makes a gate fire on a change past its limit even when the
	// change is within the stage's noise (95 % interval from sub-windows; see
	// Delta). By default such a change passes.
	StrictGates bool
	// Force compares runs Compare would refuse: of different worlds
	// (ErrWorldMismatch), scenarios (ErrScenarioMismatch) or engines
	// (ErrEngineMismatch).
	Force bool
	// Markdown, when set and the runs are an affinity pair (run A's variants
	// all affinity off, run B's all on: warden bench --variants off, then
	// --variants on), receives the off -> on table as markdown, with the noise
	// marks of summary.md. Unused otherwise.
	Markdown io.Writer
}

// StageComparison is one stage of one variant in both runs.
type StageComparison struct {
	Variant  string  `json:"variant"`
	Stage    int     `json:"stage"`
	Sessions int     `json:"sessions"`
	Deltas   []Delta `json:"deltas"` // A -> B, one per name in Metrics
}

// Violation is one crossed threshold.
type Violation struct {
	Gate     Gate
	Variant  string
	Sessions int
	Delta    Delta
	Reason   string
}

// GateCheck is one gate checked on one stage of one variant (Comparison.Checks).
type GateCheck struct {
	Gate     Gate
	Variant  string // the stage's variant (a pair: the affinity-on one)
	Stage    int    // stage index; -1 when the gate could not be checked
	Sessions int
	Delta    Delta
	// Failed: the check is a violation (Reason says why). WithinNoise: the
	// change is past the limit but within the stage's noise, so it passed.
	Failed, WithinNoise bool
	Reason              string
}

// Comparison is the result of Compare: run A as base, run B as candidate.
type Comparison struct {
	A, B       string // directories
	Stages     []StageComparison
	Violations []Violation
	Notes      []string // variants or stages present in only one run
	// Settings names the router settings that differ between the runs and
	// act in their affinity-on variants (policy, admission: settingsDiff),
	// printed first: the differences include their effect.
	Settings []string
	// Checks lists every (gate, stage) pair checked against opts.FailOn, in
	// the order checked, with its verdict, then a failed check for each gate
	// naming a variant not in both runs (Stage -1): what --junit writes.
	Checks []GateCheck
	// GateChecks counts the (gate, stage) pairs checked against opts.FailOn;
	// GatesWithinNoise those of them past their limit that passed because the
	// change was within the stage's noise (never with StrictGates).
	GateChecks, GatesWithinNoise int
	// Pair is set when A and B are the two halves of one off -> on comparison
	// (run A's variants all affinity off, run B's all on): A's first variant's
	// name and B's (its row name in the table). Stages then compare A's off
	// with B's on, stage by stage.
	Pair []string
}

// Compare reads two results directories (run A as base, run B as candidate),
// summarises both the same way Generate does, and prints per variant and stage
// each metric in A and B, the difference, its 95 % interval and whether it is beyond
// noise (see Delta). Variants are matched by name, stages by index and
// concurrency level. It refuses runs whose scenarios differ (ErrScenarioMismatch,
// naming the fields), whose worlds differ (ErrWorldMismatch: one virtual, one
// HTTP) or whose engines differ (ErrEngineMismatch: engine kinds, or a series
// column's source; manifest Engines) unless opts.Force.
//
// Two runs that are the halves of one off -> on comparison (run A's variants
// all affinity off, run B's all on, as warden bench --variants off and then
// --variants on write them) are an affinity pair: their scenarios may differ in
// variants only (and their replica counts not at all), and Compare prints the
// off -> on table of a one-run report across them, with the same sub-window
// noise, then A's off against B's on per metric (comparePair). When a threshold in opts.FailOn is crossed it still prints
// everything and returns the Comparison with an error wrapping
// ErrThresholdExceeded. It writes nothing to either directory.
func Compare(a, b string, w io.Writer, opts CompareOptions) (*Comparison, error) {
	runA, err := Load(a)
	if err != nil {
		return nil, fmt.Errorf("comparing runs: %w", err)
	}
	runB, err := Load(b)
	if err != nil {
		return nil, fmt.Errorf("comparing runs: %w", err)
	}
	pair := isAffinityPair(&runA.Manifest, &runB.Manifest)
	var skip []string
	reordered := !pair && sameVariantsReordered(runA.Manifest.Scenario, runB.Manifest.Scenario)
	if pair || reordered {
		// What the two runs of a pair differ in; or the same variants in
		// another order, which each variant starting fresh makes like for like.
		skip = []string{"variants"}
	}
	if diff := worldDiff(&runA.Manifest, &runB.Manifest); diff != "" && !opts.Force {
		return nil, fmt.Errorf("comparing runs %s and %s: %w: %s", a, b, ErrWorldMismatch, diff)
	}
	if diff := scenarioDiff(runA.Manifest.Scenario, runB.Manifest.Scenario, skip...); diff != "" && !opts.Force {
		return nil, fmt.Errorf("comparing runs %s and %s: %w: %s", a, b, ErrScenarioMismatch, diff)
	}
	if diff := engineDiff(&runA.Manifest, &runB.Manifest); diff != "" && !opts.Force {
		return nil, fmt.Errorf("comparing runs %s and %s: %w: %s", a, b, ErrEngineMismatch, diff)
	}
	if pair {
		if n, m := len(runA.Manifest.Replicas), len(runB.Manifest.Replicas); n != m && !opts.Force {
			return nil, fmt.Errorf("comparing runs %s and %s: %w: replicas (%d vs %d)", a, b, ErrScenarioMismatch, n, m)
		}
	}
	sumsA, err := Summarize(runA)
	if err != nil {
		return nil, fmt.Errorf("comparing runs: %s: %w", a, err)
	}
	sumsB, err := Summarize(runB)
	if err != nil {
		return nil, fmt.Errorf("comparing runs: %s: %w", b, err)
	}

	c := &Comparison{A: a, B: b}
	if reordered {
		c.Notes = append(c.Notes, fmt.Sprintf("the runs ran the same variants in another order (%s vs %s): like for like when every variant started on a fresh router and caches (docs/DESIGN-NOTES.md, \"Variants start fresh\"; runs made before that shared them)",
			strings.Join(runA.Manifest.Scenario.Variants, ","), strings.Join(runB.Manifest.Scenario.Variants, ",")))
	}
	if d := fleetDiff(&runA.Manifest, &runB.Manifest); d != "" {
		c.Notes = append(c.Notes, "the runs served different fleets ("+d+"): the differences include the fleet's own effect, not only the change under test")
	}
	if pair {
		return c, c.comparePair(runA, runB, sumsA, sumsB, w, opts)
	}
	if sa, sb := runA.Manifest.Scenario, runB.Manifest.Scenario; sa != nil && sb != nil && sa.Seed != sb.Seed {
		c.Notes = append(c.Notes, fmt.Sprintf("the runs used different seeds (%d vs %d): the differences include the workload's own randomness", sa.Seed, sb.Seed))
	}
	c.Settings = settingsDiff(&runA.Manifest, &runB.Manifest)
	for _, v := range runA.Manifest.Variants {
		if variantIndex(&runB.Manifest, v.Name) < 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("variant %q only in %s", v.Name, a))
			continue
		}
		for i := range sumsA {
			sa := &sumsA[i]
			if sa.Variant != v.Name {
				continue
			}
			k := slices.IndexFunc(sumsB, func(s Summary) bool {
				return s.Variant == sa.Variant && s.Stage == sa.Stage && s.Sessions == sa.Sessions
			})
			if k < 0 {
				c.Notes = append(c.Notes, fmt.Sprintf("variant %q stage %d (%d sessions) only in %s", v.Name, sa.Stage, sa.Sessions, a))
				continue
			}
			c.Stages = append(c.Stages, c.compareStage(v.Name, sa, &sumsB[k], opts))
		}
	}
	for _, v := range runB.Manifest.Variants {
		if variantIndex(&runA.Manifest, v.Name) < 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("variant %q only in %s", v.Name, b))
		}
	}
	if err := c.checkGateVariants(&runA.Manifest, &runB.Manifest, opts); err != nil {
		return nil, err
	}

	if err := c.print(w); err != nil {
		return c, err
	}
	return c, c.finish(w, opts)
}

// compareStage compares one stage of variant in the two runs (sa from A, sb
// from B) and checks opts.FailOn's gates on it into c.
func (c *Comparison) compareStage(variant string, sa, sb *Summary, opts CompareOptions) StageComparison {
	sc := StageComparison{Variant: variant, Stage: sa.Stage, Sessions: sa.Sessions}
	for _, name := range Metrics {
		d, _ := NewDelta(name, sa, sb) // names from Metrics are known
		sc.Deltas = append(sc.Deltas, d)
		c.checkGates(opts, name, d, sa.Stage, sa.Sessions, variant)
	}
	return sc
}

// checkGates checks opts.FailOn's gates on metric name against d, the delta of
// stage stage (of sessions sessions), into c: a gate applies when it names no
// variant or one of variants; a check and a violation are recorded under
// variants[0].
func (c *Comparison) checkGates(opts CompareOptions, name string, d Delta, stage, sessions int, variants ...string) {
	for _, t := range opts.FailOn {
		if t.Metric != name || (t.Variant != "" && !slices.Contains(variants, t.Variant)) {
			continue
		}
		c.GateChecks++
		gc := GateCheck{Gate: t, Variant: variants[0], Stage: stage, Sessions: sessions, Delta: d}
		if bad, why := t.check(d, opts.StrictGates); bad {
			gc.Failed, gc.Reason = true, why
			c.Violations = append(c.Violations, Violation{Gate: t, Variant: variants[0], Sessions: sessions, Delta: d, Reason: why})
		} else if bad, _ := t.check(d, true); bad {
			gc.WithinNoise = true
			c.GatesWithinNoise++
		}
		c.Checks = append(c.Checks, gc)
	}
}

// checkGateVariants returns an error for a gate naming a variant in neither run
// (ma, mb), and records a violation for one naming a variant not in both.
func (c *Comparison) checkGateVariants(ma, mb *loadgen.Manifest, opts CompareOptions) error {
	var names []string
	for _, m := range []*loadgen.Manifest{ma, mb} {
		for _, v := range m.Variants {
			if !slices.Contains(names, v.Name) {
				names = append(names, v.Name)
			}
		}
	}
	for _, t := range opts.FailOn {
		if t.Variant != "" && !slices.Contains(names, t.Variant) {
			// A typo, not a regression: a usage error, before anything is printed.
			return fmt.Errorf("comparing runs: gate %s: variant %q is in neither run (variants: %s)", t, t.Variant, strings.Join(names, ", "))
		}
	}
	for _, t := range opts.FailOn {
		if t.Variant != "" && !slices.ContainsFunc(c.Stages, func(s StageComparison) bool { return s.Variant == t.Variant }) {
			why := fmt.Sprintf("variant %q not in both runs: gate cannot be checked", t.Variant)
			c.Violations = append(c.Violations, Violation{Gate: t, Reason: why})
			c.Checks = append(c.Checks, GateCheck{Gate: t, Variant: t.Variant, Stage: -1, Failed: true, Reason: why})
		}
	}
	return nil
}

// finish prints the gates' verdict and returns an error wrapping
// ErrThresholdExceeded when any gate was crossed.
func (c *Comparison) finish(w io.Writer, opts CompareOptions) error {
	if len(opts.FailOn) > 0 && len(c.Violations) == 0 {
		msg := fmt.Sprintf("gates: %d check(s) of %d gate(s), all passed", c.GateChecks, len(opts.FailOn))
		if c.GatesWithinNoise > 0 {
			msg += fmt.Sprintf(" (%d past a limit but within the stage's noise; --strict-gates fails them)", c.GatesWithinNoise)
		}
		if _, err := fmt.Fprintln(w, msg); err != nil {
			return fmt.Errorf("printing comparison: %w", err)
		}
	}
	if len(c.Violations) > 0 {
		return fmt.Errorf("comparing runs %s and %s: %w: %d violation(s)", c.A, c.B, ErrThresholdExceeded, len(c.Violations))
	}
	return nil
}

// sameVariantsReordered reports whether a and b list the same variants in a
// different order.
func sameVariantsReordered(a, b *loadgen.Scenario) bool {
	if a == nil || b == nil || slices.Equal(a.Variants, b.Variants) {
		return false
	}
	x, y := slices.Clone(a.Variants), slices.Clone(b.Variants)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// World is the world a run's manifest mode names: "virtual" for mode
// "virtual", "http" for every other mode ("http", "http-sim"; an empty mode, as
// manifests before the field, is "http", the only world then).
func World(mode string) string {
	if mode == "virtual" {
		return "virtual"
	}
	return "http"
}

// worldDiff says how the worlds of a and b differ, "" when they are the same.
func worldDiff(a, b *loadgen.Manifest) string {
	wa, wb := World(a.Mode), World(b.Mode)
	if wa == wb {
		return ""
	}
	return fmt.Sprintf("run A ran in the %s world (mode %q), run B in the %s world (mode %q): "+
		"the HTTP world adds loopback latency, goroutine scheduling and wall-clock scrape timing that virtual time does not have, "+
		"so a difference would not say what changed", wa, a.Mode, wb, b.Mode)
}

// scenarioDiff names the scenario fields that differ, with both values, "" when
// equal (two nil scenarios are equal). Fields are named as in the manifest's JSON
// and printed by readable (durations as "3m0s", a nil trace as "none"). An empty model on one side
// matches any model: it means "the server's model", which an HTTP run records
// once resolved and a virtual run leaves empty. Seeds are not compared, nor the
// fields named (JSON names) in skip.
func scenarioDiff(a, b *loadgen.Scenario, skip ...string) string {
	if a == nil || b == nil {
		if a == b {
			return ""
		}
		return "one manifest has no scenario"
	}
	ca, cb := *a, *b
	if ca.Model == "" || cb.Model == "" {
		ca.Model, cb.Model = "", ""
	}
	// Two seeds of one scenario are how a user gauges noise: not a mismatch
	// (Compare notes it).
	ca.Seed, cb.Seed = 0, 0
	va, vb := reflect.ValueOf(ca), reflect.ValueOf(cb)
	var diff []string
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		if reflect.DeepEqual(x, y) {
			continue
		}
		name := f.Name
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
			name = tag
		}
		if slices.Contains(skip, name) {
			continue
		}
		diff = append(diff, fmt.Sprintf("%s (%s vs %s)", name, readable(va.Field(i)), readable(vb.Field(i))))
	}
	slices.Sort(diff)
	return strings.Join(diff, ", ")
}

// readable formats a scenario field for scenarioDiff: a nil pointer or slice
// is "none", a pointer its value, a struct without a String method its
// non-zero exported fields as "json-name value" joined by commas ("defaults"
// when all are zero), anything else as fmt's %v.
func readable(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Pointer, reflect.Slice:
		if v.IsNil() {
			return "none"
		}
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	if v.Kind() == reflect.Pointer {
		return readable(v.Elem())
	}
	if v.Kind() != reflect.Struct {
		return fmt.Sprint(v.Interface())
	}
	var parts []string
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || tag == "-" || v.Field(i).IsZero() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		parts = append(parts, tag+" "+readable(v.Field(i)))
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

// settingsDiff names, with both values, the router settings that act with
// affinity on and differ between a and b: the policy, the subagent rule
// (Manifest.Subagents), and the admission gate
// (loadgen.Admission, all its settings). Nothing when either run has no
// affinity-on variant, where they do not act. A run that did not record its
// admission (before it was recorded, or through an external router) differs
// only from one whose gate was on.
func settingsDiff(a, b *loadgen.Manifest) []string {
	on := func(m *loadgen.Manifest) bool {
		return slices.ContainsFunc(m.Variants, func(v loadgen.Variant) bool { return v.Affinity })
	}
	if !on(a) || !on(b) {
		return nil
	}
	var diff []string
	if a.Policy != b.Policy {
		diff = append(diff, fmt.Sprintf("policy %s vs %s", cmp.Or(a.Policy, "not recorded"), cmp.Or(b.Policy, "not recorded")))
	}
	if a.Subagents != b.Subagents {
		diff = append(diff, fmt.Sprintf("subagent rule %s vs %s", cmp.Or(a.Subagents, "keep"), cmp.Or(b.Subagents, "keep")))
	}
	aa, ab := a.Admission, b.Admission
	switch {
	case !aa.On() && !ab.On():
	case aa == nil || ab == nil || *aa != *ab:
		diff = append(diff, fmt.Sprintf("admission %s vs %s", aa, ab))
	}
	return diff
}

// fleetDiff names, with both values, how the fleets of a and b differ: the
// replica count, the simulator profile, the mode (virtual or over HTTP); ""
// when they do not.
func fleetDiff(a, b *loadgen.Manifest) string {
	var diff []string
	if len(a.Replicas) != len(b.Replicas) {
		diff = append(diff, fmt.Sprintf("%d vs %d replicas", len(a.Replicas), len(b.Replicas)))
	}
	if a.Profile != b.Profile {
		diff = append(diff, fmt.Sprintf("profile %s vs %s", cmp.Or(a.Profile, "none (real servers)"), cmp.Or(b.Profile, "none (real servers)")))
	}
	if a.Mode != b.Mode {
		diff = append(diff, fmt.Sprintf("mode %s vs %s", cmp.Or(a.Mode, "not recorded"), cmp.Or(b.Mode, "not recorded")))
	}
	return strings.Join(diff, ", ")
}

// verdict is the comparison table's word for d: "identical" when both sides
// hold the same value, else its noise verdict.
func verdict(d Delta) string {
	if d.Base == d.Value {
		return "identical"
	}
	return string(d.Noise)
}

// formatFor returns the display format of a metric, as in the reference table.
func formatFor(metric string) func(float64) string {
	if c, ok := metricByName[metric]; ok {
		return c.format
	}
	return fmtPrec(2)
}

// diffFormatFor returns the display format of a difference (B - A, the 95 %
// interval) of a metric: whole numbers grouped by thousands for the counts and
// rates shown that way, one decimal more than the metric's own for the others,
// so a change smaller than the table's last digit still shows.
func diffFormatFor(metric string) func(float64) string {
	if c, ok := metricByName[metric]; ok {
		if c.prec < 0 {
			return fmtThousands
		}
		return fmtPrec(c.prec + 1)
	}
	return fmtPrec(3)
}

// print writes one table per variant (rows: stage x metric) and the violations.
func (c *Comparison) print(w io.Writer) error {
	pf := func(format string, args ...any) error {
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return fmt.Errorf("printing comparison: %w", err)
		}
		return nil
	}
	if err := pf("A: %s\nB: %s\n", c.A, c.B); err != nil {
		return err
	}
	for _, d := range c.Settings {
		if err := pf("note: the runs' router settings differ: %s; the affinity-on differences include its effect\n", d); err != nil {
			return err
		}
	}
	var variants []string
	for _, s := range c.Stages {
		if !slices.Contains(variants, s.Variant) {
			variants = append(variants, s.Variant)
		}
	}
	for _, v := range variants {
		heading := "variant " + v
		if len(c.Pair) == 2 {
			heading = fmt.Sprintf("%s (A) -> %s (B), per metric", c.Pair[0], v)
		}
		if err := pf("\n%s\n", heading); err != nil {
			return err
		}
		t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAlignment(tw.AlignRight))
		t.Header("sessions", "metric", "A", "B", "B - A", "change %", "95% CI +-", "verdict")
		for _, s := range c.Stages {
			if s.Variant != v {
				continue
			}
			for _, d := range s.Deltas {
				f, df := formatFor(d.Metric), diffFormatFor(d.Metric)
				diff, ci := df(d.Diff), df(d.CIHalf)
				rel := "n/a"
				if !math.IsNaN(d.RelPct) {
					rel = fmt.Sprintf("%+.1f", d.RelPct)
				}
				if err := t.Append([]string{strconv.Itoa(s.Sessions), d.Metric, f(d.Base), f(d.Value), diff, rel, ci, verdict(d)}); err != nil {
					return fmt.Errorf("printing comparison: %w", err)
				}
			}
		}
		if err := t.Render(); err != nil {
			return fmt.Errorf("printing comparison: %w", err)
		}
	}
	for _, n := range c.Notes {
		if err := pf("note: %s\n", n); err != nil {
			return err
		}
	}
	if len(c.Settings) > 0 {
		// Again below the tables, where a long comparison ends.
		if err := pf("note: the runs' router settings differ (above): %s\n", strings.Join(c.Settings, "; ")); err != nil {
			return err
		}
	}
	for _, v := range c.Violations {
		where := ""
		if v.Variant != "" {
			where = fmt.Sprintf(" (variant %s, %d sessions)", v.Variant, v.Sessions)
		}
		if err := pf("FAIL %s%s: %s\n", v.Gate, where, v.Reason); err != nil {
			return err
		}
	}
	return nil
}
