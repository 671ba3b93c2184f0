package report

import (
	"fmt"
	"math"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// Concurrency is what a stage achieved against the sessions it was configured
// for, over its measured window W = [Start+Warmup, End).
type Concurrency struct {
	// TurnsInFlightMean is the client-side time-average of the turns in flight
	// over W: the sum over turns (side requests left out) of the length of
	// [Sent, Done) inside W, from turns.jsonl, plus the manifest's
	// loadgen.StageWindow.UnrecordedInFlight for the turns still in flight when
	// the variant stopped (they have no record), divided by |W|. It is below the
	// sessions whenever sessions are between turns: think time, a failed turn's
	// replacement waiting out failure_backoff, a hold at the router.
	TurnsInFlightMean float64 `json:"turns_in_flight_mean"`
	// Target is the mean the closed loop can hold (loadgen.ConcurrencyTarget):
	// sessions * turn / (turn + think time) with turn the mean Done - Sent of the
	// turns done in W, OK or failed (a stream that hangs until it times out holds
	// its session on the wire as long as it hangs), and the scenario's (nominal)
	// think time; the sessions without think time or without a turn done. Turns
	// still in flight at W's end count in TurnsInFlightMean but not in turn, so a
	// stage whose streams hang past its end can read above 100 %; it gets a note.
	Target float64 `json:"turns_in_flight_target"`
	// Pct is 100 * TurnsInFlightMean / Target; a stage under
	// loadgen.MinConcurrencyPct gets a note.
	Pct float64 `json:"concurrency_pct"`
	// EngineRequestsMean is the server-side view: the mean over polls in W of
	// vllm:num_requests_running + vllm:num_requests_waiting summed over replicas
	// (per replica the mean over its own polls, summed, as ReplicasBusy); it
	// includes side requests and anything else the engines serve. NaN without
	// series or when a gauge is missing.
	EngineRequestsMean float64 `json:"engine_requests_mean"`
}

// MaxConcurrencyPct is the concurrency_pct above which a stage gets a note: a
// closed loop cannot hold more turns than its target except for turns longer
// than those the target's turn time was taken from (Concurrency.Target); 110
// leaves room for the think time estimate (nominal, not drawn) and the ramp.
const MaxConcurrencyPct = 110.0

// summarizeConcurrency fills s.Concurrency from the variant's results, its
// series (grouped by replica) and the stage's manifest window, and notes a stage
// below loadgen.MinConcurrencyPct. A report window of a trace replay (windows)
// holds no level: its Target and Pct are NaN, without notes (the whole-run
// table of an agent replay has the live trees and calls).
func summarizeConcurrency(s *Summary, results []*loadgen.Result, replicas []replicaSeries, st loadgen.StageWindow, sc *loadgen.Scenario, windows bool) {
	nan := math.NaN()
	c := Concurrency{TurnsInFlightMean: nan, Target: nan, Pct: nan, EngineRequestsMean: nan}
	defer func() { s.Concurrency = c }()

	if w := s.WindowEnd - s.WindowStart; w > 0 {
		busy := st.UnrecordedInFlight
		var turnSum time.Duration
		turnN := 0
		for _, r := range results {
			if r.Side {
				continue
			}
			busy += max(0, min(r.Done, s.WindowEnd)-max(r.Sent, s.WindowStart))
			if contains(s.WindowStart, s.WindowEnd, r.Done) {
				turnSum += r.Done - r.Sent
				turnN++
			}
		}
		var think, turn time.Duration
		if sc != nil {
			think = sc.ThinkTime
		}
		if turnN > 0 {
			turn = turnSum / time.Duration(turnN)
		}
		c.TurnsInFlightMean = busy.Seconds() / w.Seconds()
		if !windows {
			c.Target = loadgen.ConcurrencyTarget(s.Sessions, turn, think)
			c.Pct = pct(c.TurnsInFlightMean, c.Target)
			if msg := loadgen.ConcurrencyShortfall(c.TurnsInFlightMean, c.Target); msg != "" {
				s.note(msg + ": the stage measured fewer concurrent turns than it was configured for " +
					"(failed turns' replacements waiting out failure_backoff, router holds or a late harness); turns_in_flight_mean, concurrency_pct")
			}
			if c.Pct > MaxConcurrencyPct {
				s.note(fmt.Sprintf("%.2f turns in flight on average, %.0f %% of the %.2f the loop can hold (above %.0f %%): "+
					"turns still in flight at the window's end (%d, e.g. hung streams) held sessions on the wire longer than the turns done in it, "+
					"from which the target's turn time is taken; concurrency_pct", c.TurnsInFlightMean, c.Pct, c.Target, MaxConcurrencyPct, st.InFlight))
			}
		}
	}

	total, polled := 0.0, 0
	for _, rs := range replicas {
		n, sum := 0, 0.0
		for _, x := range rs.samples {
			if contains(s.WindowStart, s.WindowEnd, x.T) {
				n++
				sum += x.Running + x.Waiting // NaN stays NaN
			}
		}
		if n > 0 {
			polled++
			total += sum / float64(n)
		}
	}
	if polled > 0 && !math.IsNaN(total) {
		c.EngineRequestsMean = total
	}
}

// MarshalJSON writes c with NaN as null, as Summary does.
func (c Concurrency) MarshalJSON() ([]byte, error) { return marshalFinite(c) }

// UnmarshalJSON reads what MarshalJSON writes (null as NaN).
func (c *Concurrency) UnmarshalJSON(b []byte) error {
	type plain Concurrency
	return unmarshalFinite(b, (*plain)(c))
}
