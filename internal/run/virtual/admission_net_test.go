package virtual

import (
	"context"
	"testing"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// With the network and API-server model (the default scenario), the router sees a
// request end when its stream's end reaches it (evRelease); that release
// must reach the admission gate too, or every conversation keeps counting and
// each new one waits out max_hold (a fresh-user run: 8 sessions, 0 turns done,
// every hold 240 s). At 4 and 8 sessions nothing is held, as without the model.
func TestAdmissionWithNetworkModelHoldsNothingBelowTheCliff(t *testing.T) {
	sc := loadgen.DefaultScenario()
	if !sc.SimulatesServerSide() {
		t.Fatal("the default scenario no longer models the network: this test needs one that does")
	}
	sc.Stages, sc.Variants = []int{4, 8}, []string{"on"}
	prof, err := sim.LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	var held, ok int
	m, err := Run(context.Background(), Config{
		Scenario: sc, Replicas: 4, Engine: sim.EngineConfig{Profile: prof}, RunID: "admit-net",
		Balancer: router.BalancerConfig{Admission: router.AdmissionConfig{Mode: router.AdmissionFit}},
		OnResult: func(r loadgen.Result) {
			if r.Held > 0 {
				held++
			}
			if r.OK() {
				ok++
			}
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if held > 0 {
		t.Errorf("%d turns held at 4 and 8 sessions, want 0", held)
	}
	for _, st := range m.Variants[0].Stages {
		if st.Completed < 10*st.Sessions {
			t.Errorf("%d sessions: %d turns completed, want at least %d (%d OK in all)", st.Sessions, st.Completed, 10*st.Sessions, ok)
		}
	}
}
