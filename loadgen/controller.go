package loadgen

import "time"

// Controller is what a world (the virtual event loop, the HTTP runner) needs
// of a variant's dispatcher: the closed loop of synthetic sessions (Loop), a
// Mooncake trace replay (TraceLoop) or an agent-session replay (AgentLoop).
// The contract: StartStage(i) at each window's start; Sent when a turn is
// written; Finish when it ends, which returns the turns it makes due; Stop
// once at the variant's end; Windows and Variant for the manifest.
type Controller interface {
	Name() string
	StartStage(i int, now time.Duration) []TurnRequest
	Sent(tr TurnRequest, now time.Duration)
	Finish(r *Result, now time.Duration) []TurnRequest
	Stop(now time.Duration)
	Windows() []StageWindow
	WindowIndex(t time.Duration) int
	Variant() Variant
	Active() int
	InFlightAt(now time.Duration) int
	Waiting(now time.Duration) int
}

var (
	_ Controller = (*Loop)(nil)
	_ Controller = (*TraceLoop)(nil)
	_ Controller = (*AgentLoop)(nil)
)

// Fleet is what a controller needs to know of the servers: their KV capacity
// together (tokens; 0 unknown) and max_model_len (0 unknown).
type Fleet struct {
	KVTokens    int64
	MaxModelLen int
}

// NewController returns the controller of variant for sc starting at start:
// an AgentLoop for shape agent or a claude-code trace, a TraceLoop for a
// Mooncake one, else a Loop over w.
func NewController(sc *Scenario, w *Workload, variant string, start time.Duration, fleet Fleet) (Controller, error) {
	switch {
	case sc.Shape == ShapeAgent, sc.Trace != nil && sc.Trace.Agent():
		return NewAgentLoop(sc, variant, start, fleet.MaxModelLen)
	case sc.Trace != nil:
		return NewTraceLoop(sc, variant, start, fleet.KVTokens)
	}
	return NewLoop(sc, w, variant, start), nil
}

// Ended reports whether c has nothing more to send before its last window
// ends (an agent replay that played every session once): the world may end
// the variant now.
func Ended(c Controller) bool {
	d, ok := c.(interface{ Done() bool })
	return ok && d.Done()
}

// RecordReplay adds a replay controller's record to m (after Stop) and
// returns the error it met reading its trace (nil for other controllers).
func RecordReplay(c Controller, m *Manifest) error {
	switch l := c.(type) {
	case *TraceLoop:
		m.Traces = append(m.Traces, l.Replay())
		return l.Err()
	case *AgentLoop:
		m.AgentTraces = append(m.AgentTraces, l.Replay())
		return l.Err()
	}
	return nil
}
