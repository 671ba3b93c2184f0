package plan

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Reading the answer (docs/planning.md "Reading the answer"): the tail warning,
// the recommendation, why each policy fails where it does, and the cliff.
const (
	// TailFactor: the tail at a knee (its TTFB p95 or p99) is far past the SLO
	// when it exceeds TailFactor x the SLO's TTFB limit (SLO.TailLimit).
	TailFactor = 3
	// MovedStayedPct: below this share of later turns on their session's first
	// replica, a failing point is explained by turns landing on other replicas.
	MovedStayedPct = 50
	// EvictedHitsDrop: prefix hits this many points below the policy's best
	// point explain a failure by working sets evicted from the KV cache.
	EvictedHitsDrop = 10
	// HeldPct: from this share of turns held by the admission gate, the hold is
	// named among the causes.
	HeldPct = 10
)

// TailLimit is the TTFB limit the tail is judged against: ttfb_p95 when the SLO
// has it, else ttfb_p50, else goodput_ttfb; its name and value in seconds.
func (o SLO) TailLimit() (string, float64) {
	switch {
	case o.TTFBP95 > 0:
		return "ttfb_p95", o.TTFBP95.Seconds()
	case o.TTFBP50 > 0:
		return "ttfb_p50", o.TTFBP50.Seconds()
	}
	return "goodput_ttfb", o.GoodputTTFB.Seconds()
}

// TailWarning is the warning for pr's knee when its TTFB p95 or p99 exceeds
// TailFactor x the SLO's TailLimit; "" when within or without a knee.
func (r *Result) TailWarning(pr PolicyResult) string {
	k := pr.Knee
	if k == nil {
		return ""
	}
	name, lim := r.Config.SLO.TailLimit()
	var over []string
	for _, q := range []quantile{{"p95", func(p *Point) float64 { return p.TTFBP95S }}, {"p99", func(p *Point) float64 { return p.TTFBP99S }}} {
		if v := q.Get(k); v > TailFactor*lim {
			over = append(over, fmt.Sprintf("%s %s (%.0fx)", q.Name, seconds(v), v/lim))
		}
	}
	if len(over) == 0 {
		return ""
	}
	return fmt.Sprintf("warning: %s at its knee (%s) has TTFB %s, past %dx the SLO's %s limit of %s: the SLO holds while the slowest %s wait far longer (goodput within %s: %s)",
		pr.Policy, r.at(k), strings.Join(over, ", "), TailFactor, name, seconds(lim), r.turns(), r.Config.SLO.GoodputTTFB, f3(k.Goodput))
}

// at names a point by what the search varies: "32 sessions", "9 replicas".
func (r *Result) at(p *Point) string {
	switch {
	case r.inverse():
		return plural(p.Replicas, "replica")
	case r.trees():
		return plural(p.Sessions, "live tree")
	}
	return plural(p.Sessions, "session")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// Recommendation is the one answer the planner suggests.
type Recommendation struct {
	Policy string
	Knee   *Point
	Reason string
}

// Recommend picks one policy: among those with a knee whose TailWarning does
// not fire, the largest knee (inverse: the fewest replicas), ties broken by
// goodput then output tokens/min at the knee; when every knee's tail warns, the
// knee with the best goodput. ok false when no policy has a knee.
func (r *Result) Recommend() (rec Recommendation, ok bool) {
	var bounded, all []PolicyResult
	for _, pr := range r.Policies {
		if pr.Knee == nil {
			continue
		}
		all = append(all, pr)
		if r.TailWarning(pr) == "" {
			bounded = append(bounded, pr)
		}
	}
	if len(all) == 0 {
		return rec, false
	}
	name, lim := r.Config.SLO.TailLimit()
	if len(bounded) > 0 {
		best := bounded[0]
		for _, pr := range bounded[1:] {
			if r.betterKnee(pr.Knee, best.Knee) {
				best = pr
			}
		}
		reason := fmt.Sprintf("the largest knee among the policies whose tail stays within %dx the %s limit (%s); TTFB p95 %s, goodput %s",
			TailFactor, name, seconds(TailFactor*lim), seconds(best.Knee.TTFBP95S), f3(best.Knee.Goodput))
		if len(bounded) < len(all) {
			reason += "; the others: " + r.others(all, best.Policy)
		}
		return Recommendation{best.Policy, best.Knee, reason}, true
	}
	best := all[0]
	for _, pr := range all[1:] {
		if pr.Knee.Goodput > best.Knee.Goodput || (math.IsNaN(best.Knee.Goodput) && !math.IsNaN(pr.Knee.Goodput)) {
			best = pr
		}
	}
	reason := fmt.Sprintf("every knee's tail is past %dx the %s limit, so the best goodput at its knee (%s; %s)",
		TailFactor, name, f3(best.Knee.Goodput), r.others(all, best.Policy))
	if len(all) == 1 {
		reason = fmt.Sprintf("the only knee, and its tail is past %dx the %s limit (goodput %s)", TailFactor, name, f3(best.Knee.Goodput))
	}
	reason += "; " + r.Config.SLO.boundTail()
	return Recommendation{best.Policy, best.Knee, reason}, true
}

// boundTail is the advice when every knee's tail warns: add the terms that
// bound it, or, when the SLO has them, tighten them.
func (o SLO) boundTail() string {
	switch {
	case o.TTFBP95 == 0 && o.Goodput == 0:
		return "to bound the tail, add a ttfb_p95 or goodput term to the SLO"
	case o.TTFBP95 == 0:
		return "to bound the tail, add a ttfb_p95 term to the SLO or raise goodput"
	case o.Goodput == 0:
		return "to bound the tail, add a goodput term to the SLO or lower ttfb_p95"
	}
	return "to bound the tail, raise goodput or lower goodput_ttfb (the SLO already has ttfb_p95 and goodput terms)"
}

// betterKnee: a is the larger knee (inverse: fewer replicas), then the better
// goodput, then more output tokens/min.
func (r *Result) betterKnee(a, b *Point) bool {
	if ca, cb := r.count(a), r.count(b); ca != cb {
		return (ca > cb) != r.inverse()
	}
	if a.Goodput != b.Goodput {
		return a.Goodput > b.Goodput
	}
	return a.OutputTokensPerMin > b.OutputTokensPerMin
}

// others lists the knees of all but the named policy: "admission-fit 448
// sessions, p95 662.87 s, goodput 0.141".
func (r *Result) others(all []PolicyResult, except string) string {
	var s []string
	for _, pr := range all {
		if pr.Policy != except {
			s = append(s, fmt.Sprintf("%s %s, p95 %s, goodput %s", pr.Policy, r.at(pr.Knee), seconds(pr.Knee.TTFBP95S), f3(pr.Knee.Goodput)))
		}
	}
	return strings.Join(s, "; ")
}

// WhyFails explains pr's first failing point: the terms it failed and what the
// point's measured placement says of the cause (turns on other replicas when
// fewer than MovedStayedPct % stayed; working sets evicted when prefix hits are
// EvictedHitsDrop points below the policy's best point; the gate's holds from
// HeldPct % of turns; else queueing for compute). "" without a failing point.
func (r *Result) WhyFails(pr PolicyResult) string {
	f := pr.FirstFail
	if f == nil {
		return r.whyNoFail(pr)
	}
	var causes []string
	turns, turn, conv := "turns", "turn", "their session's first"
	if r.trees() {
		turns, turn, conv = "calls", "call", "their conversation's first (a subagent being a conversation of its own;"
	}
	if f.StayedPct < MovedStayedPct {
		open := " ("
		if r.trees() {
			open = " "
		}
		causes = append(causes, fmt.Sprintf("%.0f %% of later %s ran on another replica than %s%sstayed %.0f %%, prefix hits %.0f %%): each such %s prefills its whole context again",
			100-f.StayedPct, turns, conv, open, f.StayedPct, f.HitsPct, turn))
	}
	var best *Point
	for _, p := range pr.Points {
		if best == nil || p.HitsPct > best.HitsPct {
			best = p
		}
	}
	if best != nil && best.HitsPct-f.HitsPct >= EvictedHitsDrop && f.StayedPct >= MovedStayedPct {
		causes = append(causes, fmt.Sprintf("%s stayed (%.0f %%) but prefix hits fell to %.0f %% from %.0f %% at %s: the working sets no longer fit in the KV cache and are evicted between %s",
			turns, f.StayedPct, f.HitsPct, best.HitsPct, r.at(best), turns))
	}
	if f.HeldPct >= HeldPct {
		causes = append(causes, fmt.Sprintf("the admission gate held %.0f %% of the %s (the hold counts in their TTFB)", f.HeldPct, turns))
	}
	if len(causes) == 0 {
		causes = append(causes, fmt.Sprintf("%s stayed (%.0f %%) with prefix hits at %.0f %%: the wait is queueing for compute", turns, f.StayedPct, f.HitsPct))
	}
	return fmt.Sprintf("%s fails at %s: %s; %s", pr.Policy, r.at(f), f.Failed(), strings.Join(causes, "; "))
}

// whyNoFail: a policy that met the SLO at every point it tried, and the
// gate's holds at its knee when they reach HeldPct %.
func (r *Result) whyNoFail(pr PolicyResult) string {
	k := pr.Knee
	if k == nil || pr.Budget {
		return ""
	}
	bound := "up to"
	if r.inverse() {
		bound = "down to"
	}
	s := fmt.Sprintf("%s meets the SLO at every point tried, %s %s", pr.Policy, bound, r.at(k))
	if k.HeldPct >= HeldPct {
		t := r.turns()
		s += fmt.Sprintf("; there the admission gate held %.0f %% of the %s: held conversations send few %s, so a quantile over %s stays low while their wait grows (TTFB p95 %s)", k.HeldPct, t, t, t, seconds(k.TTFBP95S))
	}
	return s
}

// advice is the text after the table: tail warnings, why each policy fails,
// the recommendation.
func (r *Result) advice() string {
	var b strings.Builder
	for _, pr := range r.Policies {
		if w := r.TailWarning(pr); w != "" {
			b.WriteString(w + "\n")
		}
	}
	for _, pr := range r.Policies {
		if w := r.WhyFails(pr); w != "" {
			b.WriteString("why: " + w + "\n")
		}
	}
	if rec, ok := r.Recommend(); ok {
		fmt.Fprintf(&b, "recommended: %s at %s: %s\n", rec.Policy, r.at(rec.Knee), rec.Reason)
		b.WriteString(r.treesThroughput(rec))
	}
	return b.String()
}

// writeCliff prints, per policy with a knee and a failing point beside it, the
// two points' figures side by side ("knee -> next").
func (r *Result) writeCliff(w io.Writer) error {
	qs := r.Config.SLO.quantiles()
	header := []string{"cliff: policy", r.word()}
	for _, q := range qs {
		header = append(header, "TTFB "+q.Name+" s")
	}
	header = append(header, "goodput", "out tok/min", "prefix hits %", "stayed %")
	var rows [][]string
	for _, pr := range r.Policies {
		k, f := pr.Knee, pr.FirstFail
		if k == nil || f == nil {
			continue
		}
		pair := func(a, b string) string { return a + " -> " + b }
		row := []string{pr.Policy, pair(strconv.Itoa(r.count(k)), strconv.Itoa(r.count(f)))}
		for _, q := range qs {
			row = append(row, pair(f2(q.Get(k)), f2(q.Get(f))))
		}
		row = append(row, pair(f3(k.Goodput), f3(f.Goodput)), pair(fmtFloat(k.OutputTokensPerMin, 0), fmtFloat(f.OutputTokensPerMin, 0)),
			pair(f1(k.HitsPct), f1(f.HitsPct)), pair(f1(k.StayedPct), f1(f.StayedPct)))
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil
	}
	t := newTable(w)
	t.Header(toAny(header)...)
	for _, row := range rows {
		if err := t.Append(row); err != nil {
			return err
		}
	}
	return t.Render()
}

func (r *Result) word() string {
	if r.inverse() {
		return "replicas: knee -> largest failing"
	}
	return "sessions: knee -> first failing"
}

// treesThroughput, for session trees, sets the knees' work beside the
// recommendation: a live tree is a concurrency, not a rate, and a tree the
// admission gate holds counts as live while it waits, so the largest knee
// need not complete the most trees. "" for the chain.
func (r *Result) treesThroughput(rec Recommendation) string {
	if !r.trees() || r.inverse() {
		return ""
	}
	var s []string
	var more []string
	for _, pr := range r.Policies {
		k := pr.Knee
		if k == nil {
			continue
		}
		s = append(s, fmt.Sprintf("%s %s trees done/h, %s out tok/min (%s)", pr.Policy, f1(k.SessionsPerH), fmtFloat(k.OutputTokensPerMin, 0), r.at(k)))
		if pr.Policy != rec.Policy && k.SessionsPerH > rec.Knee.SessionsPerH {
			more = append(more, pr.Policy)
		}
	}
	line := "work at the knees: " + strings.Join(s, "; ")
	if len(more) > 0 {
		verb := "completes"
		if len(more) > 1 {
			verb = "complete"
		}
		line += fmt.Sprintf("; %s %s more trees per hour than %s: a knee counts live trees, not their rate", strings.Join(more, " and "), verb, rec.Policy)
		if rec.Knee.HeldPct > 0 {
			line += fmt.Sprintf(", and a tree whose call the admission gate holds (%.1f %% of the calls at %s's knee) is live while it waits", rec.Knee.HeldPct, rec.Policy)
		}
	}
	return line + "\n"
}
