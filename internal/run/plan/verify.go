package plan

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/lmwarden/warden/internal/run/bench"
	"github.com/lmwarden/warden/report"
)

// Agreement tolerances of the two worlds, as the agreement tests check them
// (internal/run/bench agreement_test.go compareWorlds, docs/simulator.md "Virtual and
// HTTP worlds"): the HTTP run against the mean of the virtual seeds, prefix hits
// within 3 points and TTFB p50 within 15 %, or within AgreeSDs standard
// deviations of the seeds when those spread more (one HTTP run is one draw of a
// noisy quantity: affinity off in particular, docs/simulator.md).
const (
	AgreeHitsPoints = 3.0
	AgreeP50Frac    = 0.15
	AgreeSDs        = 3.0
)

// DefaultVerifySpeed is the HTTP world's speed for --verify: real time, the
// agreement test's speed (agreement_test.go agreementSpeed), which leaves the HTTP
// world only its own wall-clock cost per request. Faster multiplies that cost in
// simulated time: at 4, with the machine's load average at 12, the reference knees'
// TTFB p50 read 0.2 s above the virtual world's (60 %). Real time costs the point's
// simulated duration in wall time per policy (4 minutes on the reference).
const DefaultVerifySpeed = 1.0

// Verification is one knee run again over HTTP on the embedded cluster.
type Verification struct {
	Policy   string
	Sessions int
	Replicas int
	Seed     uint64
	Virtual  sample // the search's run of the same seed
	HTTP     sample
	// The knee's seeds: mean and standard deviation of prefix hits (points) and
	// TTFB p50 (s), what the HTTP run is compared with.
	HitsMean, HitsSD, P50Mean, P50SD float64
	// HitsLimit and P50Limit are the tolerances applied: the documented ones or
	// AgreeSDs x the seeds' sd, whichever is larger; HitsAgree and P50Agree the
	// verdicts.
	HitsLimit, P50Limit float64
	HitsAgree, P50Agree bool
}

// sd is the sample standard deviation (0 for fewer than two values).
func sd(v []float64) float64 {
	_, se := report.MeanStdErr(v)
	if len(v) < 2 || math.IsNaN(se) {
		return 0
	}
	return se * math.Sqrt(float64(len(v)))
}

// Verify runs each policy's knee with the first seed over HTTP (the embedded
// simulated cluster and router on loopback, bench.Run) at speed and compares it
// with the virtual run of the same seed. The fleet must be a built-in profile's:
// the embedded cluster cannot take a real server's KV figures. progress gets the
// bench's lines.
func Verify(ctx context.Context, r *Result, speed float64, progress io.Writer) ([]Verification, error) {
	c := r.Config
	if speed <= 0 {
		speed = DefaultVerifySpeed
	}
	var out []Verification
	for i, pr := range r.Policies {
		if pr.Knee == nil {
			continue
		}
		k := pr.Knee
		p := c.Policies[i]
		seed := c.seeds()[0]
		sc := pointScenario(c.Scenario, k.Sessions, c.Warmup, p.variant(), seed)
		dir, err := os.MkdirTemp("", "warden-plan-verify-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		pol := p.Router
		_, err = bench.Run(ctx, bench.Options{
			Scenario: sc, SimReplicas: k.Replicas, Profile: c.Fleet.Profile.Name, Speed: speed,
			MaxNumSeqs: c.Fleet.MaxNumSeqs, Policy: pol, Admission: p.Admission,
			OutDir: filepath.Join(dir, "http"), RunID: "plan-verify", Progress: progress,
		})
		if err != nil {
			return nil, fmt.Errorf("verifying %s at %d sessions over HTTP: %w", p.Name, k.Sessions, err)
		}
		run, err := report.Load(filepath.Join(dir, "http"))
		if err != nil {
			return nil, err
		}
		sums, err := report.Summarize(run)
		if err != nil || len(sums) != 1 {
			return nil, fmt.Errorf("verifying %s: summarizing the HTTP run: %d stages, %v", p.Name, len(sums), err)
		}
		s := sums[0]
		h := sample{Seed: seed, TTFBP50S: s.TTFBP50S, TTFBP95S: s.TTFBP95S,
			Goodput:            Goodput(run.Results, nil, s.Variant, s.WindowStart, s.WindowEnd, c.SLO.GoodputTTFB),
			OutputTokensPerMin: s.OutputTokensPerMin, SessionsPerH: s.SessionsPerH, PrefixHitsPct: s.PrefixHitsPct,
			TurnsOK: s.TurnsOK, Failed: s.TurnsFailed, PeakContext: peakContext(run.Results)}
		var hits, p50 []float64
		for _, s := range k.Samples {
			hits, p50 = append(hits, s.PrefixHitsPct), append(p50, s.TTFBP50S)
		}
		vf := Verification{Policy: p.Name, Sessions: k.Sessions, Replicas: k.Replicas, Seed: seed, Virtual: k.Samples[0], HTTP: h,
			HitsSD: sd(hits), P50SD: sd(p50)}
		vf.HitsMean, _ = report.MeanStdErr(hits)
		vf.P50Mean, _ = report.MeanStdErr(p50)
		vf.HitsLimit = max(AgreeHitsPoints, AgreeSDs*vf.HitsSD)
		vf.P50Limit = max(AgreeP50Frac*h.TTFBP50S, AgreeSDs*vf.P50SD)
		vf.HitsAgree = math.Abs(vf.HitsMean-h.PrefixHitsPct) <= vf.HitsLimit
		vf.P50Agree = math.Abs(vf.P50Mean-h.TTFBP50S) <= vf.P50Limit
		out = append(out, vf)
	}
	return out, nil
}

// WriteVerification prints the two worlds side by side.
func WriteVerification(w io.Writer, vs []Verification, speed float64) error {
	fmt.Fprintf(w, "verify: each knee again over HTTP (embedded cluster + router on loopback, speed %g), seed %s, against the virtual seeds' mean as the agreement tests judge it: prefix hits within %.0f points and TTFB p50 within %.0f %%, or %.0f sd of the seeds if larger; the HTTP world's goodput counts only turns done (its open turns at the end have no record)\n",
		speed, seedText(vs), AgreeHitsPoints, 100*AgreeP50Frac, AgreeSDs)
	header, rows := verifyRows(vs)
	t := newTable(w)
	t.Header(toAny(header)...)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return err
		}
	}
	return t.Render()
}

func seedText(vs []Verification) string {
	if len(vs) == 0 {
		return "-"
	}
	return fmt.Sprint(vs[0].Seed)
}

func verifyRows(vs []Verification) ([]string, [][]string) {
	header := []string{"policy", "sessions", "world", "TTFB p50 s", "TTFB p95 s", "goodput", "out tok/min", "prefix hits %", "turns ok/failed", "agree (|diff| <= limit)"}
	var rows [][]string
	for _, v := range vs {
		agree := "yes"
		switch {
		case !v.HitsAgree && !v.P50Agree:
			agree = "no: hits and p50"
		case !v.HitsAgree:
			agree = "no: hits"
		case !v.P50Agree:
			agree = "no: p50"
		}
		for i, s := range []sample{v.Virtual, v.HTTP} {
			world, a := fmt.Sprintf("virtual seed %d", v.Seed), ""
			if i == 1 {
				world = "http"
				a = fmt.Sprintf("%s (hits %.1f <= %.1f, p50 %.2f <= %.2f s)", agree,
					math.Abs(v.HitsMean-s.PrefixHitsPct), v.HitsLimit, math.Abs(v.P50Mean-s.TTFBP50S), v.P50Limit)
			}
			rows = append(rows, []string{v.Policy, fmt.Sprint(v.Sessions), world, f2(s.TTFBP50S), f2(s.TTFBP95S), f3(s.Goodput),
				fmtFloat(s.OutputTokensPerMin, 0), f1(s.PrefixHitsPct), fmt.Sprintf("%d/%d", s.TurnsOK, s.Failed), a})
		}
		rows = append(rows, []string{v.Policy, fmt.Sprint(v.Sessions), "virtual seeds mean", f2(v.P50Mean), "", "", "", f1(v.HitsMean), "", fmt.Sprintf("sd hits %.1f, p50 %.2f s", v.HitsSD, v.P50SD)})
	}
	return header, rows
}
