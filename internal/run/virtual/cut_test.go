package virtual

import (
	"context"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// OnCut reports the turns open when each variant ends: as many as the
// manifest counts in flight at the last stage's end (no network here, so none
// is on its way), each sent and without Done. Admission is on (24
// conversations on 2 replicas) so that held turns, which are open too, can be
// among them.
func TestOnCutReportsOpenTurns(t *testing.T) {
	sc := &loadgen.Scenario{
		Name: "cut", Seed: 5, Stages: []int{24}, StageDuration: 90 * time.Second,
		Variants: []string{"off", "on"},
	}
	cut := map[string]int{}
	m, err := Run(context.Background(), Config{
		Scenario: sc,
		Replicas: 2,
		Engine:   sim.EngineConfig{Profile: sim.ProfileA4000Qwen3_4B},
		Balancer: router.BalancerConfig{Admission: router.AdmissionConfig{Mode: router.AdmissionFit}},
		OnCut: func(r loadgen.Result) {
			if r.Done != 0 || r.Sent == 0 {
				t.Errorf("cut turn %+v: want Sent set and Done 0", r)
			}
			if !r.Side {
				cut[r.Variant]++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range m.Variants {
		st := v.Stages[len(v.Stages)-1]
		if st.InFlight == 0 || cut[v.Name] != st.InFlight {
			t.Errorf("variant %s: %d turns cut, the manifest counts %d in flight at the end (want equal, > 0)", v.Name, cut[v.Name], st.InFlight)
		}
	}
}
