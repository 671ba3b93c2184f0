package study

import (
	"fmt"
	"io"
	"time"

	"github.com/lmwarden/warden/router"
)

// Placement is one router decision as the policy saw it (router.DecisionEvent),
// copied for the signals analysis.
type Placement struct {
	At     time.Duration
	Reason router.Reason
	Home   int
	Chosen int
	Prompt int
	View   []router.ReplicaState
}

func newPlacement(ev router.DecisionEvent) Placement {
	return Placement{
		At: ev.Now, Reason: ev.Decision.Reason, Home: ev.Home, Chosen: ev.Decision.Replica,
		Prompt: ev.Facts.PromptTokens, View: append([]router.ReplicaState(nil), ev.View...),
	}
}

// Signal is one placement input as a function of a replica's state.
type Signal struct {
	Name string
	Get  func(*router.ReplicaState) float64
}

// Signals are the placement inputs the study measures: those of the reference
// router's rule (docs/measurements.md, "The reference measurement") and those
// peer routers read (docs/routing.md, "What each placement input says").
var Signals = []Signal{
	{"in-flight (router, exact at decision)", func(r *router.ReplicaState) float64 { return float64(r.InFlight) }},
	{"running+waiting (scraped, <= 1 s old)", func(r *router.ReplicaState) float64 { return float64(r.Running + r.Waiting) }},
	{"KV usage gauge (scraped)", func(r *router.ReplicaState) float64 { return r.KVUsage }},
	{"sessions homed (1 h TTL)", func(r *router.ReplicaState) float64 { return float64(r.Sessions) }},
	{"sessions active (5 min window)", func(r *router.ReplicaState) float64 { return float64(r.Active) }},
	{"live conversations (adaptive window)", func(r *router.ReplicaState) float64 { return float64(r.Live) }},
	{"live working set (tokens)", func(r *router.ReplicaState) float64 { return float64(r.LiveTokens) }},
}

// SignalScore is how well one signal ranked the replicas at the placements of a
// run, against the ground truth (Trace): the live conversations and their working
// set per replica just before each placement.
type SignalScore struct {
	Signal string
	// Agree is the mean over placements of the chance that a replica drawn at
	// random among the signal's minima has the fewest live conversations.
	Agree float64
	// ExcessTokens is the mean over placements of the working set of that drawn
	// replica minus the smallest working set, in tokens (0 = always a best one).
	ExcessTokens float64
	Placements   int
}

// ScoreSignals scores every Signal on the placements of r (needs r.Trace and
// r.Placements). A router placement is matched to the trace's placement at the
// same instant on the same replica.
func ScoreSignals(r *RunResult) []SignalScore {
	if r.Trace == nil {
		return nil
	}
	type tk struct {
		at      float64
		replica int
	}
	truth := map[tk]*TracePlacement{}
	for i := range r.Trace.Placements {
		p := &r.Trace.Placements[i]
		truth[tk{p.T, p.Replica}] = p
	}
	out := make([]SignalScore, len(Signals))
	for si, s := range Signals {
		out[si].Signal = s.Name
	}
	for _, pl := range r.Placements {
		if pl.Reason != router.ReasonPlaced {
			continue
		}
		tp := truth[tk{(pl.At - r.Trace.Start).Seconds(), pl.Chosen}]
		if tp == nil || len(tp.Live) != len(pl.View) {
			continue
		}
		minLive, minWS := tp.Live[0], tp.WorkingSet[0]
		for i := range tp.Live {
			minLive, minWS = min(minLive, tp.Live[i]), min(minWS, tp.WorkingSet[i])
		}
		for si, s := range Signals {
			best := s.Get(&pl.View[0])
			for i := range pl.View {
				best = min(best, s.Get(&pl.View[i]))
			}
			var n, agree, excess float64
			for i := range pl.View {
				if s.Get(&pl.View[i]) != best {
					continue
				}
				n++
				if tp.Live[i] == minLive {
					agree++
				}
				excess += tp.WorkingSet[i] - minWS
			}
			out[si].Agree += agree / n
			out[si].ExcessTokens += excess / n
			out[si].Placements++
		}
	}
	for i := range out {
		if n := float64(out[i].Placements); n > 0 {
			out[i].Agree /= n
			out[i].ExcessTokens /= n
		}
	}
	return out
}

// WriteSignals appends the signal scores of r as a Markdown table.
func WriteSignals(w io.Writer, r *RunResult) {
	sc := ScoreSignals(r)
	if len(sc) == 0 || sc[0].Placements == 0 {
		return
	}
	fmt.Fprintf(w, "## %s, %s, seed %d: %d placements\n\n", r.Setup, r.Arm, r.Seed, sc[0].Placements)
	fmt.Fprintf(w, "| signal | picks a replica with the fewest live conversations | excess working set of the pick (tokens) |\n|---|---|---|\n")
	for _, s := range sc {
		fmt.Fprintf(w, "| %s | %.0f%% | %.0f |\n", s.Signal, 100*s.Agree, s.ExcessTokens)
	}
	fmt.Fprintln(w)
}
