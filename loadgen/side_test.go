package loadgen

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// side_requests parses with its defaults, and its problems are reported with the
// file's line, all at once.
func TestSideRequestsScenario(t *testing.T) {
	sc, err := ParseScenario([]byte("name: s\nturns: 3\nside_requests:\n  turns: [0, 2]\n"), "s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := sc.WithDefaults().SideRequests
	if s == nil || len(s.Turns) != 2 || s.PromptTokens != DefaultSidePromptTokens || s.MaxOutputTokens != DefaultSideMaxOutputTokens {
		t.Fatalf("side requests %+v, want turns [0 2] with the defaults", s)
	}
	if d := DefaultScenario(); d.SideRequests != nil {
		t.Errorf("the reference scenario sends side requests: %+v", d.SideRequests)
	}
	_, err = ParseScenario([]byte("name: s\nturns: 3\nside_requests:\n  turns: [3, 1, 1]\n  prompt_tokens: -2\n"), "s.yaml")
	for _, want := range []string{
		"s.yaml:4: side_requests.turns[0]: turn 3 is not one of the session's turns 0..2",
		"s.yaml:4: side_requests.turns[2]: turn 1 listed twice",
		"s.yaml:5: side_requests.prompt_tokens: must be at least 1 token, got -2",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := ParseScenario([]byte("side_requests:\n  turns: []\n"), "s.yaml"); err == nil || !strings.Contains(err.Error(), "side_requests.turns: list the turns") {
		t.Errorf("empty turns: err = %v", err)
	}
	if _, err := ParseScenario([]byte("side_requests:\n  turn: [0]\n"), "s.yaml"); err == nil || !strings.Contains(err.Error(), "field turn not found") {
		t.Errorf("misspelt field: err = %v", err)
	}
}

// The loop sends a side request beside each listed turn, at the same instant and
// with the session's key, but never waits for one: finishing it changes nothing,
// and the accounting (docs/bench.md, failure case 5) stays that of the turns alone.
func TestLoopSendsSideRequestsBesideTurns(t *testing.T) {
	sc := TinyScenario()
	sc.Turns, sc.Stages = 3, []int{2, 3}
	sc.SideRequests = &SideRequests{Turns: []int{0, 2}}
	s := newSim(sc, "on", 4)
	var sides, turns []TurnRequest
	s.dur = func(_ *rand.Rand, tr TurnRequest) time.Duration {
		if tr.Side != nil {
			sides = append(sides, tr)
		} else {
			turns = append(turns, tr)
		}
		return 700 * time.Millisecond
	}
	v := s.runAll()
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	var counted int
	for _, w := range v.Stages {
		counted += w.Completed + w.Failed
	}
	last := v.Stages[len(v.Stages)-1]
	if counted+last.InFlight != len(turns) {
		t.Errorf("accounting counts %d + %d in flight, %d turns were sent (and %d side requests)", counted, last.InFlight, len(turns), len(sides))
	}
	if len(sides) == 0 {
		t.Fatal("no side request sent")
	}
	byTurn := map[[2]int64]TurnRequest{}
	for _, tr := range turns {
		byTurn[[2]int64{tr.Session.ID, int64(tr.Turn)}] = tr
	}
	for _, sr := range sides {
		tr, ok := byTurn[[2]int64{sr.Session.ID, int64(sr.Turn)}]
		switch {
		case sr.Turn != 0 && sr.Turn != 2:
			t.Errorf("side request beside turn %d", sr.Turn)
		case !ok:
			t.Errorf("side request of session %d turn %d without its turn", sr.Session.ID, sr.Turn)
		case sr.Intended != tr.Intended || sr.Session.Key != tr.Session.Key:
			t.Errorf("side request at %v key %s, its turn at %v key %s", sr.Intended, sr.Session.Key, tr.Intended, tr.Session.Key)
		}
		if len(sr.Messages) != 1 || len(strings.Fields(sr.Messages[0].Content)) != DefaultSidePromptTokens || sr.Side.MaxTokens != DefaultSideMaxOutputTokens {
			t.Errorf("side request content: %d messages, max_tokens %d", len(sr.Messages), sr.Side.MaxTokens)
		}
		if r := sr.NewResult(); !r.Side || r.LastTurn {
			t.Errorf("side request's result: side %v last turn %v", r.Side, r.LastTurn)
		}
	}
	// A side request's prompt shares nothing with its conversation's.
	if sys := sides[0].Side.System; sys == "" || strings.HasPrefix(sides[0].Session.System, sys[:40]) {
		t.Errorf("side system prompt %q... is the session's", sys[:min(40, len(sys))])
	}
}

// Type errors inside side_requests name the nested field on its own line, and a
// field that failed to decode gets no second, derived message.
func TestSideRequestsTypeErrorsNameTheField(t *testing.T) {
	for yaml, want := range map[string]string{
		"side_requests:\n  turns: [0]\n  prompt_tokens: {mean: 50}\n": "s.yaml:3: side_requests.prompt_tokens: cannot unmarshal",
		"side_requests:\n  turns: [\"a\"]\n":                          "s.yaml:2: side_requests.turns: cannot unmarshal",
		"side_requests:\n  turn: [0]\n":                               "s.yaml:2: side_requests.turn: field turn not found",
		"side_requests: 5\n":                                          "s.yaml:1: side_requests: cannot unmarshal !!int `5` into a map (turns, prompt_tokens, max_output_tokens)",
	} {
		_, err := ParseScenario([]byte(yaml), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", yaml, err, want)
			continue
		}
		if strings.Contains(yaml, "turn:") {
			continue // turns really is missing there
		}
		if strings.Contains(err.Error(), "list the turns") {
			t.Errorf("%q: a derived message after the type error: %v", yaml, err)
		}
	}
}
