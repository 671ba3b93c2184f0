package study

import (
	"strconv"
	"time"

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
	AdmitFillTargets = []float64{0.8, 0.9, 1.1, 1.2, 1.3}
	AdmitMaxHolds    = []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 3 * time.Minute, -1}
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
