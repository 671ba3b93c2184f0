package study

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/sim"
)

// Setup names (LookupSetup).
const (
	SetupReference = "reference"
	SetupGap       = "reference-gap"
	SetupGapSide   = "reference-gap-side"
	SetupJitter    = "reference-jitter"
	SetupFleet     = "fleet"
	SetupFleetFP8  = "fleet-fp8kv"
)

// GapThinkTime and the jitters of the reference-gap setup: the reference workload
// with a client-side gap between turns and some spread in message sizes. The
// reference client ran over the internet (docs/measurements.md, "The reference
// measurement") and the real
// tokenizer counted 7.2-7.5k tokens for a nominal 6k message, so turns were
// neither back to back nor identical; these values are assumptions that break the
// lockstep of identical sessions, not measurements.
const (
	GapThinkTime    = 3 * time.Second
	GapFirstJitter  = 1000
	GapTurnJitter   = 100
	gapScenarioName = "claude-code-reference-gap"
)

// TokenizerFirstJitter and TokenizerTurnJitter are the size spread of the
// reference-jitter setup, in nominal tokens either side of the message's size:
// the reference generator's nominal 6k first message measured 7.2-7.5k real
// tokens (docs/measurements.md, "The reference measurement"), +-2.0 % around
// 7.35k, so +-120 of 6,000 nominal;
// the later 400-token messages get the same +-2 % (+-8). The spread of the later
// messages was not measured; 2 % is carried over from the first.
const (
	TokenizerFirstJitter = 120
	TokenizerTurnJitter  = 8
	jitterScenarioName   = "claude-code-reference-jitter"
)

// SetupNames lists the known setups.
func SetupNames() []string {
	return []string{SetupReference, SetupGap, SetupGapSide, SetupJitter, SetupFleet, SetupFleetFP8}
}

// LookupSetup returns a named setup. scenarios is the directory holding the
// scenario files (for the fleet setup, fleet-7x5090.yaml).
//
//   - reference: the built-in reference workload (loadgen.DefaultScenario) on 4
//     replicas of a4000-qwen3-4b, max_num_seqs 32, without the simulated network
//     and API-server processes (docs/simulator.md section 9), as
//     scenarios/reference-lockstep.yaml: turns back to back, the lock-step the
//     study's sections measure. So are the setups derived from it, and
//     results/study stays comparable with runs made before the network model.
//   - reference-gap: the same with GapThinkTime between turns and jittered sizes.
//   - reference-gap-side: reference-gap plus a side request beside every turn
//     (loadgen.SideRequests with its defaults: a 300-word prompt of its own, 32
//     output tokens), as Claude Code sends title and topic requests with the
//     conversation's session id (docs/router.md section 4). How often the real client
//     sends them was not measured; one per turn is the upper end.
//   - reference-jitter: the reference workload with the real tokenizer's spread of
//     sizes (TokenizerFirstJitter, TokenizerTurnJitter) and no gap: whether that
//     spread alone breaks the lockstep of identical sessions (docs/routing.md
//     section 7).
//   - fleet: scenarios/fleet-7x5090.yaml on 7 replicas of rtx5090-27b.
//   - fleet-fp8kv: the same on rtx5090-27b-fp8kv (fp8 KV cache: twice the
//     tokens), a fleet that can hold the 26 conversations when they are spread
//     evenly (sim.ProfileRTX5090Gemma3_27BFP8KV says why it exists).
func LookupSetup(name, scenarios string) (Setup, error) {
	switch name {
	case SetupReference, SetupGap, SetupGapSide, SetupJitter:
		// The reference workload without the simulated network and API server:
		// the same fields ForRealServers drops.
		sc := loadgen.DefaultScenario().ForRealServers()
		first, turn := 0, 0
		switch name {
		case SetupGap, SetupGapSide:
			sc.Name = gapScenarioName
			sc.ThinkTime = GapThinkTime
			first, turn = GapFirstJitter, GapTurnJitter
			if name == SetupGapSide {
				sc.Name = gapScenarioName + "-side"
				all := make([]int, sc.Turns)
				for i := range all {
					all[i] = i
				}
				sc.SideRequests = (&loadgen.Scenario{SideRequests: &loadgen.SideRequests{Turns: all}}).WithDefaults().SideRequests
			}
		case SetupJitter:
			sc.Name = jitterScenarioName
			first, turn = TokenizerFirstJitter, TokenizerTurnJitter
		}
		if first > 0 {
			sc.FirstTurnSpread = loadgen.TokenRange{Min: sc.FirstTurnTokens - first, Max: sc.FirstTurnTokens + first}
			sc.TurnSpread = loadgen.TokenRange{Min: sc.TurnTokens - turn, Max: sc.TurnTokens + turn}
		}
		return Setup{Name: name, Scenario: sc, Replicas: 4, Profile: sim.ProfileA4000Qwen3_4B, MaxNumSeqs: 32}, nil
	case SetupFleet, SetupFleetFP8:
		sc, err := loadgen.LoadScenario(filepath.Join(scenarios, "fleet-7x5090.yaml"))
		if err != nil {
			return Setup{}, fmt.Errorf("looking up setup %q: %w", name, err)
		}
		prof := sim.ProfileRTX5090Gemma3_27B
		if name == SetupFleetFP8 {
			prof = sim.ProfileRTX5090Gemma3_27BFP8KV
		}
		return Setup{Name: name, Scenario: sc, Replicas: 7, Profile: prof, MaxNumSeqs: 32}, nil
	}
	names := SetupNames()
	slices.Sort(names)
	return Setup{}, fmt.Errorf("looking up setup %q: unknown (have %s)", name, strings.Join(names, ", "))
}
