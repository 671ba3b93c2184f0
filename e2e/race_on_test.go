//go:build race

package e2e

// raceSlowdown divides the simulator speed of the two-router admission tests
// under -race. The routers run on the simulator's clock, so a client's wall
// stall is a pause of speed times as long to them: at 20x a 60 ms stall of
// the race-slowed client between a conversation's turns is 1.2 s, past the
// gate's 1 s idle window (router.MinIdleWindow), and the first router stops
// counting the conversation before the second router counts its next turn
// (TestSharedAdmissionTurnsAlternate, 2 of 8 runs under stress -c 2).
const raceSlowdown = 4
