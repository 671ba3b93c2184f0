package plan

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

// point builds a judged point from two identical seeds of s.
func point(t *testing.T, policy string, n int, slo SLO, s sample) *Point {
	t.Helper()
	return judge(policy, n, 7, []sample{s, s}, slo)
}

func mustSLO(t *testing.T, s string) SLO {
	t.Helper()
	o, err := ParseSLO(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A real small plan under a p50 SLO prints a p50 column beside p95 and p99, in
// the table and plan.csv; the knee's quantiles are ordered; the cliff, the
// reason of each failure and the recommendation follow the table.
func TestTableQuantileColumns(t *testing.T) {
	c := smokeConfig(t)
	c.SLO = mustSLO(t, "ttfb_p50=100ms")
	c.Policies = []Policy{mustPolicy(t, "working-set")}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"TTFB p50 s", "TTFB p95 s", "TTFB p99 s", "recommended: working-set", "KV-fit rule of thumb"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	pr := r.Policies[0]
	if k := pr.Knee; k == nil || !(k.TTFBP50S <= k.TTFBP95S && k.TTFBP95S <= k.TTFBP99S) {
		t.Fatalf("knee %+v: want p50 <= p95 <= p99", k)
	}
	if f := pr.FirstFail; f == nil || !strings.Contains(out, "cliff") || !strings.Contains(out, "why: working-set fails at "+plural(f.Sessions, "session")) ||
		!strings.Contains(out, fmt.Sprintf("%d -> %d", pr.Knee.Sessions, f.Sessions)) {
		t.Errorf("want a failing point above the knee (16 sessions make p50 > 100 ms), its why line and the cliff knee -> first failing:\n%s", out)
	}
	header, _ := r.planRows()
	if strings.Join(header[2:5], ",") != "TTFB p50 s,TTFB p95 s,TTFB p99 s" {
		t.Errorf("plan.csv header %q", header)
	}
	r.Config.SLO = mustSLO(t, "ttfb_p95=1s")
	if header, _ := r.planRows(); strings.Join(header[2:4], ",") != "TTFB p95 s,TTFB p99 s" {
		t.Errorf("p95 SLO: header %q; want p95 and p99, no p50", header)
	}
}

// The tail warning fires when the knee's p95 or p99 exceeds TailFactor x the
// SLO's TTFB limit, and not at or below it.
func TestTailWarning(t *testing.T) {
	p50 := mustSLO(t, "ttfb_p50=10s")
	for _, tc := range []struct {
		slo           SLO
		p95, p99      float64
		want, notWant string
	}{
		{p50, 29, 30, "", ""},
		{p50, 31, 32, "p95 31.00 s", ""},
		{p50, 20, 31, "p99 31.00 s", "p95"},
		{mustSLO(t, "ttfb_p95=10s"), 9, 31, "ttfb_p95 limit of 10.00 s", ""},
		{mustSLO(t, "goodput=0.9,goodput_ttfb=5s"), 14, 16, "goodput_ttfb limit of 5.00 s", ""},
	} {
		r := &Result{Config: Config{SLO: tc.slo}}
		pr := PolicyResult{Policy: "working-set", Knee: point(t, "working-set", 32, tc.slo, sample{TTFBP50S: 2, TTFBP95S: tc.p95, TTFBP99S: tc.p99, Goodput: 0.95})}
		w := r.TailWarning(pr)
		if tc.want == "" {
			if w != "" {
				t.Errorf("%s, p95 %v p99 %v: warning %q, want none (limit x %d not exceeded)", tc.slo, tc.p95, tc.p99, w, TailFactor)
			}
			continue
		}
		if !strings.Contains(w, tc.want) || !strings.Contains(w, "32 sessions") || (tc.notWant != "" && strings.Contains(w, tc.notWant)) {
			t.Errorf("%s, p95 %v p99 %v: warning %q; want %q, not %q", tc.slo, tc.p95, tc.p99, w, tc.want, tc.notWant)
		}
	}
}

// The recommendation: the largest knee whose tail does not warn (inverse: the
// fewest replicas), else the best goodput at the knee.
func TestRecommend(t *testing.T) {
	slo := mustSLO(t, "ttfb_p50=10s")
	knee := func(name string, n int, p95, goodput float64) PolicyResult {
		return PolicyResult{Policy: name, Knee: point(t, name, n, slo, sample{TTFBP50S: 3, TTFBP95S: p95, TTFBP99S: p95, Goodput: goodput})}
	}
	r := &Result{Config: Config{SLO: slo}, Policies: []PolicyResult{
		{Policy: "shortest-queue"},
		knee("admission-fit", 44, 600, 0.5), // largest knee, tail warns
		knee("working-set", 20, 25, 0.9),
		knee("sticky", 12, 20, 0.99),
	}}
	rec, ok := r.Recommend()
	if !ok || rec.Policy != "working-set" || !strings.Contains(rec.Reason, "admission-fit 44 sessions") {
		t.Errorf("recommended %+v; want working-set, naming admission-fit as left out", rec)
	}
	// Every tail warns: the best goodput, whatever the knee.
	r.Policies[2], r.Policies[3] = knee("working-set", 20, 125, 0.49), knee("sticky", 12, 90, 0.55)
	if rec, ok := r.Recommend(); !ok || rec.Policy != "sticky" || !strings.Contains(rec.Reason, "best goodput") {
		t.Errorf("every tail warns: recommended %+v; want sticky (goodput 0.55)", rec)
	}
	// Inverse: fewer replicas is the better knee.
	inv := &Result{Config: Config{SLO: slo, InverseSessions: 24}, Policies: []PolicyResult{knee("a", 24, 20, 0.9), knee("b", 24, 20, 0.9)}}
	inv.Policies[0].Knee.Replicas, inv.Policies[1].Knee.Replicas = 9, 8
	if rec, _ := inv.Recommend(); rec.Policy != "b" {
		t.Errorf("inverse: recommended %q; want b (8 replicas)", rec.Policy)
	}
	if _, ok := (&Result{Policies: []PolicyResult{{Policy: "x"}}}).Recommend(); ok {
		t.Error("no knee: want no recommendation")
	}
}

// WhyFails names the failed term and reads the cause from the point's
// measured placement, not from the policy's name.
func TestWhyFails(t *testing.T) {
	slo := mustSLO(t, "ttfb_p50=10s")
	r := &Result{Config: Config{SLO: slo}}
	fail := func(stayed, hits, held float64) PolicyResult {
		good := point(t, "working-set", 14, slo, sample{TTFBP50S: 1, TTFBP95S: 40, Goodput: 0.9, PrefixHitsPct: 90, StayedPct: 99})
		f := point(t, "working-set", 33, slo, sample{TTFBP50S: 30, TTFBP95S: 120, Goodput: 0.4, PrefixHitsPct: hits, StayedPct: stayed, HeldPct: held})
		return PolicyResult{Policy: "working-set", Knee: good, FirstFail: f, Points: []*Point{good, f}}
	}
	for _, tc := range []struct {
		stayed, hits, held float64
		want, notWant      string
	}{
		{11, 32, 0, "89 % of later turns ran on another replica", "evicted"},
		{100, 51, 0, "prefix hits fell to 51 % from 90 % at 14 sessions", "another replica"},
		{100, 88, 40, "held 40 %", "evicted"},
		{100, 88, 0, "queueing", "another replica"},
	} {
		w := r.WhyFails(fail(tc.stayed, tc.hits, tc.held))
		if !strings.Contains(w, "fails at 33 sessions: ttfb_p50 30.00 s > 10.00 s") || !strings.Contains(w, tc.want) || strings.Contains(w, tc.notWant) {
			t.Errorf("stayed %v hits %v held %v: %q; want %q, not %q", tc.stayed, tc.hits, tc.held, w, tc.want, tc.notWant)
		}
	}
}

// On the 7 x RTX 5090 fleet (fp8 KV) under ttfb_p50=10s, capped at 7 sessions:
// shortest-queue fails already at 1 session and its reason follows the measured
// stayed % there; working-set's knee at 7 has a p95 past 3 x 10 s (the first
// turns' ~44k-token prefills take ~38 s), and the table warns of it.
func TestFleetWhyAndTail(t *testing.T) {
	sc, err := loadgen.LoadScenario("../../../scenarios/fleet-7x5090.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := FleetFromProfile("rtx5090-27b-fp8kv", 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Fleet: f, Scenario: sc, SLO: mustSLO(t, "ttfb_p50=10s"), Seeds: 2, Warmup: -1, MaxSessions: 7, Workers: 1,
		Policies: []Policy{mustPolicy(t, "shortest-queue"), mustPolicy(t, "working-set")}}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	sq, ws := r.Policies[0], r.Policies[1]
	if sq.Knee != nil || sq.FirstFail == nil || sq.FirstFail.Sessions != 1 {
		t.Fatalf("shortest-queue knee %v, first failing %v: want none met, failing at 1", sq.Knee, sq.FirstFail)
	}
	why := r.WhyFails(sq)
	if moved := strings.Contains(why, "ran on another replica"); moved != (sq.FirstFail.StayedPct < MovedStayedPct) || !moved {
		t.Errorf("stayed %.1f %% at 1 session, why %q: want the moved explanation, as stayed < %d %%", sq.FirstFail.StayedPct, why, MovedStayedPct)
	}
	k := ws.Knee
	if k == nil || k.Sessions != 7 {
		t.Fatalf("working-set knee %v: want 7", k)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	warned := strings.Contains(b.String(), "warning: working-set at its knee (7 sessions)")
	if want := k.TTFBP95S > TailFactor*10 || k.TTFBP99S > TailFactor*10; warned != want || !warned {
		t.Errorf("knee p95 %.1f s, p99 %.1f s, warned %v: want a warning past %d x 10 s\n%s", k.TTFBP95S, k.TTFBP99S, warned, TailFactor, b.String())
	}
	if !strings.Contains(b.String(), "TTFB p50 s") || !strings.Contains(b.String(), "why: shortest-queue fails at 1 session") {
		t.Errorf("table lacks the p50 column or the why line:\n%s", b.String())
	}
}

// When every knee's tail warns, the advice names the terms the SLO lacks, and
// does not tell an SLO that has ttfb_p95 and goodput to add them.
func TestBoundTailAdvice(t *testing.T) {
	for _, tc := range []struct{ slo, want string }{
		{"ttfb_p50=10s", "add a ttfb_p95 or goodput term"},
		{"goodput=0.9", "add a ttfb_p95 term"},
		{"ttfb_p95=10s", "add a goodput term"},
		{"ttfb_p95=10s,goodput=0.9", "raise goodput or lower goodput_ttfb"},
	} {
		o, err := ParseSLO(tc.slo)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.boundTail(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q in it", tc.slo, got, tc.want)
		}
	}
}
