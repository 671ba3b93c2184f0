package loadgen

import (
	"reflect"
	"testing"
)

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte("stages: [2, 4]\nstage_duration: 20s\nturn_tokens: {mean: 80, jitter: 20}\n"))
	f.Add([]byte("name: x\nturns: 0\nvariants: [on-2, off]\n"))
	f.Add([]byte("first_turn_tokens: {min: 1, max: 3}\nwarmup: 1s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario does not validate: %v", err)
		}
		if d := sc.WithDefaults(); !reflect.DeepEqual(d, sc) {
			t.Fatalf("defaults not applied:\n%+v\n%+v", d, sc)
		}
		// A workload can be built and a session started from anything accepted
		// (sizes are kept small to bound the fuzzer's memory).
		if sc.SystemPromptTokens+sc.FirstTurnTokens+sc.FirstTurnSpread.Max+sc.SystemPromptSpread.Max < 100_000 {
			w := NewWorkload(sc)
			if _, ok := w.Session(0).NextTurn(0); !ok {
				t.Fatal("no first turn")
			}
		}
	})
}
