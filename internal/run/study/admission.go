package study

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router"
)

// ArmAdmitFit is working-set with the router's admission gate on at its
// defaults (router.AdmissionConfig, docs/routing.md "Admission").
const ArmAdmitFit = "admit-fit"

// AdmitFillTargets and AdmitMaxHolds are the variants of admit-fit the study
// knows: admit-fit-f<fill> changes the fill target, admit-fit-h<hold> the
// max_hold (h0 is working-set itself, hinf waits without limit): the frontier
// of results/study/admission/.
var (
	AdmitFillTargets = []float64{0.9, 1.05, 1.1, 1.2}
	AdmitMaxHolds    = []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 6 * time.Minute, 8 * time.Minute, -1}
)

func admitFitArm(name string, cfg router.AdmissionConfig) func() Arm {
	cfg.Mode = router.AdmissionFit
	return func() Arm {
		return Arm{Name: name, Affinity: true, Policy: router.PolicyWorkingSet, Admission: cfg}
	}
}

// admitHoldName is the arm name of max_hold d.
func admitHoldName(d time.Duration) string {
	if d < 0 {
		return ArmAdmitFit + "-hinf"
	}
	return ArmAdmitFit + "-h" + strconv.Itoa(int(d.Seconds())) + "s"
}

func init() {
	armTable[ArmAdmitFit] = admitFitArm(ArmAdmitFit, router.AdmissionConfig{})
	for _, f := range AdmitFillTargets {
		n := ArmAdmitFit + "-f" + strconv.FormatFloat(f, 'f', -1, 64)
		armTable[n] = admitFitArm(n, router.AdmissionConfig{FillTarget: f})
	}
	for _, d := range AdmitMaxHolds {
		armTable[admitHoldName(d)] = admitFitArm(admitHoldName(d), router.AdmissionConfig{MaxHold: d})
	}
}

// frontierArms is the order of the frontier: max_hold from 0 (working-set,
// nothing held) through the admit-fit-h arms and the default (admit-fit) to no
// limit; labels are the max_hold.
func frontierArms() (arms, labels []string) {
	arms, labels = []string{ArmWorkingSet}, []string{"0"}
	for _, d := range AdmitMaxHolds {
		if d >= 0 && d < router.DefaultMaxHold {
			arms, labels = append(arms, admitHoldName(d)), append(labels, d.String())
		}
	}
	arms, labels = append(arms, ArmAdmitFit), append(labels, router.DefaultMaxHold.String()+" (default)")
	return append(arms, admitHoldName(-1)), append(labels, "no limit")
}

// frontierFigure draws, for each stage of setup with at least minSessions
// sessions, output tokens/min against TTFB p95 as max_hold goes from 0 to no
// limit (frontierArms), means over samples; nil when the rows lack the arms.
func frontierFigure(setup string, rows []Row, minSessions int) (*plot.Plot, error) {
	arms, labels := frontierArms()
	byArm := map[string]map[int]Row{}
	var stages []int
	for _, r := range rows {
		if r.Setup != setup || r.Sessions < minSessions {
			continue
		}
		if byArm[r.Arm] == nil {
			byArm[r.Arm] = map[int]Row{}
		}
		if _, seen := byArm[ArmWorkingSet][r.Sessions]; !seen && r.Arm == ArmWorkingSet {
			stages = append(stages, r.Sessions)
		}
		byArm[r.Arm][r.Sessions] = r
	}
	n := 0
	for _, a := range arms {
		if byArm[a] != nil {
			n++
		}
	}
	if n < 3 || len(stages) == 0 {
		return nil, nil
	}
	p := newFigure()
	p.Title.Text = fmt.Sprintf("%s: output tokens/min vs TTFB p95 as max_hold grows (admit-fit)", setup)
	p.X.Label.Text = "TTFB p95 (s)"
	p.Y.Label.Text = "output tokens/min"
	p.Legend.Top, p.Legend.Left = true, true
	for si, sessions := range stages {
		var pts plotter.XYs
		var lab []string
		first, def := "", false // the first label of a run of arms at one point; the default among them
		for i, a := range arms {
			r, ok := byArm[a][sessions]
			if !ok {
				continue
			}
			x, y := r.Cells["ttfb_p95_s"].Mean, r.Cells["output_tokens_per_min"].Mean
			if math.IsNaN(x) || math.IsNaN(y) {
				continue
			}
			if k := len(pts) - 1; k >= 0 && pts[k].X == x && pts[k].Y == y {
				// max_holds past every wait give one point: one label
				if a == ArmAdmitFit {
					def = true
				}
				lab[k] = strings.TrimSuffix(first, " (default)") + " to " + labels[i]
				if def {
					lab[k] += " (default " + router.DefaultMaxHold.String() + ")"
				}
				continue
			}
			pts = append(pts, plotter.XY{X: x, Y: y})
			lab = append(lab, labels[i])
			first, def = labels[i], a == ArmAdmitFit
		}
		col := report.Palette(si)
		line, points, err := meanLine(pts, col)
		if err != nil {
			return nil, err
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: lab})
		if err != nil {
			return nil, err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Color = col
		}
		l.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
		p.Add(line, points, l)
		p.Legend.Add(fmt.Sprintf("%d sessions", sessions), line, points)
	}
	p.Add(plotter.NewGrid())
	// Room for the labels right of and above the last points.
	p.X.Max += (p.X.Max - p.X.Min) * 0.3
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.08
	return p, nil
}

// writeFrontier draws frontier-<setup>.png for every setup whose rows have the
// frontier's arms (stages of 24 sessions and more).
func writeFrontier(dir string, setups []string, rows []Row) error {
	for _, s := range setups {
		p, err := frontierFigure(s, rows, 24)
		if err != nil {
			return fmt.Errorf("writing study: frontier: %w", err)
		}
		if p == nil {
			continue
		}
		if err := savePlot(p, filepath.Join(dir, "frontier-"+s+".png")); err != nil {
			return err
		}
	}
	return nil
}
