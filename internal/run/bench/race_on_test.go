//go:build race

package bench

// raceSlowdown divides the simulator speed of tests whose stage is short in
// wall time: under -race the harness and the simulator's step loop run several
// times slower, and at 20x a 30 s trace stage (1.5 s of wall) ended before any
// request finished (TestTraceReplayHTTPSimulator: 0 OK of 17).
const raceSlowdown = 4
