package loadgen

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultScenarioIsTheReference(t *testing.T) {
	sc := DefaultScenario()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	if sc.SystemPromptTokens != 3500 || sc.FirstTurnTokens != 6000 || sc.TurnTokens != 400 || sc.Turns != 6 ||
		sc.MaxOutputTokens != 256 || sc.StageDuration != 3*time.Minute ||
		!reflect.DeepEqual(sc.Stages, []int{4, 8, 16, 24, 32}) || !reflect.DeepEqual(sc.Variants, []string{"off", "on"}) ||
		!*sc.ResetCache {
		t.Errorf("default scenario differs from the reference workload: %+v", sc)
	}
	// The shipped reference file spells out the same scenario.
	fromFile, err := LoadScenario(filepath.Join("..", "scenarios", "claude-code-reference.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fromFile.source, fromFile.lines = "", nil
	if !reflect.DeepEqual(fromFile, sc) {
		t.Errorf("claude-code-reference.yaml differs from DefaultScenario:\nfile    %+v\ndefault %+v", fromFile, sc)
	}
}

func TestShippedScenariosLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "scenarios", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("scenario files: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sc, err := LoadScenario(f)
			if err != nil {
				t.Fatal(err)
			}
			if sc.Name == "" {
				t.Error("no name")
			}
		})
	}
	sm, _ := LoadScenario(filepath.Join("..", "scenarios", "smoke.yaml"))
	if len(sm.Stages) != 2 || sm.StageDuration > time.Minute {
		t.Errorf("smoke scenario is not short: stages %v x %s", sm.Stages, sm.StageDuration)
	}
	fl, _ := LoadScenario(filepath.Join("..", "scenarios", "fleet-7x5090.yaml"))
	if !reflect.DeepEqual(fl.Stages, []int{26, 16}) {
		t.Errorf("fleet stages %v, want [26 16]", fl.Stages)
	}
	// ~58k nominal tokens by the last turn (replies counted at their maximum).
	last := fl.SystemPromptTokens + fl.FirstTurnTokens + (fl.Turns-1)*(fl.TurnTokens+fl.MaxOutputTokens)
	if last < 52_000 || last > 64_000 {
		t.Errorf("fleet session reaches %d nominal tokens, want ~58k", last)
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	yaml := `name: bad
api: grpc
session_header: cookie
turns: -1
max_output_tokens: -5
think_time: -1s
stages: [4, 0, -2]
stage_duration: 1m
warmup: 2m
variants: ["off", "sideways", "off"]
first_turn_tokens: {mean: 10, jitter: 20}
request_timeout: -1s
`
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadScenario(path)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	want := []string{
		path + ":2: api:",
		path + ":3: session_header:",
		path + ":4: turns:",
		path + ":5: max_output_tokens:",
		path + ":6: think_time:",
		path + ":7: stages[1]:",
		path + ":7: stages[2]:",
		path + ":9: warmup:",
		path + ":10: variants[1]:",
		path + ":10: variants[2]: duplicate",
		path + ":11: first_turn_tokens: smallest draw",
		path + ":12: request_timeout:",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(msg, w)
		if i < 0 {
			t.Errorf("error lacks %q", w)
			continue
		}
		if i < last {
			t.Errorf("%q is reported before an earlier line's problem (want file order):\n%s", w, msg)
		}
		last = i
	}
	if n := strings.Count(msg, "\n") + 1; n != len(want) {
		t.Errorf("%d problems reported, want %d:\n%s", n, len(want), msg)
	}
	// Implausible sizes (a typo's extra zeros) fail before any memory is spent,
	// with the estimate; min > max is reported once, not also as "outside".
	big := &Scenario{Turns: MaxTurns + 1, Stages: []int{4, MaxSessions + 1}, TurnTokens: 8, TurnSpread: TokenRange{Min: 10, Max: 5}}
	err = big.Validate()
	if err == nil || !strings.Contains(err.Error(), "turns: 10001 is more than 10000") ||
		!strings.Contains(err.Error(), "stages[1]: 20001 sessions is more than 20000") || !strings.Contains(err.Error(), "GB") {
		t.Errorf("Validate of huge sizes: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "outside") {
		t.Errorf("min > max also reported as nominal outside the range: %v", err)
	}
	if err := (&Scenario{Turns: MaxTurns, Stages: []int{MaxSessions}}).Validate(); err != nil {
		t.Errorf("the limits themselves are refused: %v", err)
	}
	// Validate on a scenario built in code names the fields without a file.
	sc := &Scenario{Turns: -1, Stages: []int{0}}
	err = sc.Validate()
	if err == nil || !strings.Contains(err.Error(), "turns: must be") || !strings.Contains(err.Error(), "stages[0]:") {
		t.Errorf("Validate: %v", err)
	}
}

func TestLoadScenarioStrict(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown field", "name: x\nstagez: [1]\n", []string{"x.yaml:2:", `field stagez not found (did you mean stages? have name, seed`}},
		{"two unknown fields reported together", "nam: x\nstagez: [1]\n", []string{"x.yaml:1:", "x.yaml:2:"}},
		{"bare number duration", "stage_duration: 180\n", []string{"x.yaml:1:", "Go duration strings"}},
		{"bad duration", "think_time: 3 minutes\n", []string{"x.yaml:1:"}},
		{"negative seed", "seed: -1\n", []string{"x.yaml:1:"}},
		{"unknown token field", "turn_tokens: {mean: 400, sigma: 3}\n", []string{"x.yaml:1:", `"sigma"`}},
		{"mixed token forms", "turn_tokens: {mean: 400, min: 3, max: 9}\n", []string{"x.yaml:1:", "want an integer"}},
		{"token list", "turn_tokens: [1, 2]\n", []string{"x.yaml:1:", "want an integer"}},
		{"token string", "turn_tokens: many\n", []string{"x.yaml:1:", `"many"`}},
		{"empty", "", []string{"empty"}},
		{"two documents", "name: a\n---\nname: b\n", []string{"one YAML document"}},
		{"min above max", "turn_tokens: {min: 9, max: 3}\n", []string{"turn_tokens: min 9 is greater than max 3"}},
		// A decoding problem and a validation problem are reported together.
		{"decode and validate", "stagez: 1\napi: grpc\n", []string{"x.yaml:1: field stagez", "x.yaml:2: api:"}},
		// A type error names its field; a fractional integer is not truncated; an
		// empty list is not read as "the default".
		{"wrong type names the field", "name: x\nturns: three\n", []string{"x.yaml:2: turns: cannot unmarshal"}},
		{"fractional integer", "max_output_tokens: 1.5\n", []string{"x.yaml:1: max_output_tokens: 1.5 is not an integer"}},
		{"empty stages", "name: x\nstages: []\n", []string{"x.yaml:2: stages: empty list"}},
		{"empty variants", "variants: []\n", []string{"x.yaml:1: variants: empty list"}},
		{"stages not a list", "name: x\nstages: 4,8\n", []string{"x.yaml:2: stages: cannot unmarshal"}},
		{"think time number", "name: x\nthink_time: 3\n", []string{"x.yaml:2:", `think time "3": want a duration`}},
		{"think time jitter above mean", "think_time: {mean: 1s, jitter: 2s}\n", []string{"x.yaml:1: think_time: smallest draw (min, or mean - jitter) must not be negative, got -1s"}},
		{"think time negative min", "think_time: {min: -2s, max: 1s}\n", []string{"think_time: smallest draw (min, or mean - jitter) must not be negative, got -2s"}},
		{"think time min alone", "think_time: {min: 1s}\n", []string{"x.yaml:1:", "min and max go together"}},
		{"think time mixed forms", "think_time: {mean: 1s, min: 1s}\n", []string{"x.yaml:1:", "mixes {mean, jitter} with {min, max}"}},
		{"token jitter alone", "turn_tokens: {jitter: 5}\n", []string{"x.yaml:1:", "jitter needs a mean"}},
		{"inline mapping names its field", "name: x\nthink_time: {mean: 5, jitter: 1}\n", []string{"x.yaml:2: think_time: mean:", "x.yaml:2: think_time: jitter:"}},
		{"think time min above max", "think_time: {min: 9s, max: 3s}\n", []string{"think_time: min 9s is greater than max 3s"}},
		{"think time bad field", "think_time: {mean: 5s, sd: 1s}\n", []string{"x.yaml:1:", `unknown think time distribution field "sd"`}},
		{"think time bad value", "think_time: {min: 1s, max: soon}\n", []string{"x.yaml:1:", `max: "soon" is not a duration`}},
		{"not a mapping", "- a\n", []string{"x.yaml:1: cannot unmarshal !!seq into a scenario (a mapping of fields)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tt.yaml), "x.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestTokenDistributions(t *testing.T) {
	tests := []struct {
		yaml    string
		nominal int
		spread  TokenRange
	}{
		{"turn_tokens: 400", 400, TokenRange{}},
		{"turn_tokens: {mean: 400}", 400, TokenRange{}},
		{"turn_tokens: {mean: 400, jitter: 0}", 400, TokenRange{}},
		{"turn_tokens: {mean: 400, jitter: 50}", 400, TokenRange{350, 450}},
		{"turn_tokens: {min: 350, max: 450}", 400, TokenRange{350, 450}},
		{"turn_tokens: {min: 10, max: 10}", 10, TokenRange{}},
		{"turn_tokens: {min: 1, max: 4}", 2, TokenRange{1, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			sc, err := ParseScenario([]byte(tt.yaml), "")
			if err != nil {
				t.Fatal(err)
			}
			if sc.TurnTokens != tt.nominal || sc.TurnSpread != tt.spread {
				t.Errorf("got %d %+v, want %d %+v", sc.TurnTokens, sc.TurnSpread, tt.nominal, tt.spread)
			}
		})
	}
}

func TestAffinityOf(t *testing.T) {
	tests := map[string]bool{"off": false, "on": true, "on-2": true, "off_cold": false}
	for name, want := range tests {
		got, err := AffinityOf(name)
		if err != nil || got != want {
			t.Errorf("AffinityOf(%q) = %v, %v", name, got, err)
		}
	}
	for _, bad := range []string{"", "onn", "sticky", "on-"} {
		if _, err := AffinityOf(bad); err == nil {
			t.Errorf("AffinityOf(%q): no error", bad)
		}
	}
}

// A field that failed to decode gets no second, derived message ("empty list"),
// with a source or without one.
func TestUndecodedStagesHaveOneMessage(t *testing.T) {
	for _, source := range []string{"x.yaml", ""} {
		_, err := ParseScenario([]byte("name: x\nstages: 4,8\n"), source)
		if err == nil || strings.Contains(err.Error(), "empty list") {
			t.Errorf("source %q: err = %v", source, err)
		}
	}
}

// Without a source, problems still come in file order, each with its line.
func TestParseScenarioWithoutSource(t *testing.T) {
	_, err := ParseScenario([]byte("api: grpc\nturns: x\nwarmup: -1s\n"), "")
	want := "line 1: api: unknown API \"grpc\" (want \"openai-chat\", \"anthropic-messages\" or \"openai-responses\")\n" +
		"line 2: turns: cannot unmarshal !!str `x` into int\n" +
		"line 3: warmup: must not be negative, got -1s"
	if err == nil || err.Error() != want {
		t.Errorf("err =\n%v\nwant\n%s", err, want)
	}
}

func TestThinkTimeDistributions(t *testing.T) {
	tests := []struct {
		yaml    string
		nominal time.Duration
		spread  DurationRange
	}{
		{"think_time: 3s", 3 * time.Second, DurationRange{}},
		{"think_time: {mean: 5s, jitter: 4s}", 5 * time.Second, DurationRange{time.Second, 9 * time.Second}},
		{"think_time: {min: 1s, max: 9s}", 5 * time.Second, DurationRange{time.Second, 9 * time.Second}},
		{"think_time: {min: 2s, max: 2s}", 2 * time.Second, DurationRange{}},
		{"think_time: {mean: 500ms}", 500 * time.Millisecond, DurationRange{}},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			sc, err := ParseScenario([]byte(tt.yaml), "")
			if err != nil {
				t.Fatal(err)
			}
			if sc.ThinkTime != tt.nominal || sc.ThinkSpread != tt.spread {
				t.Errorf("got %s %+v, want %s %+v", sc.ThinkTime, sc.ThinkSpread, tt.nominal, tt.spread)
			}
		})
	}
}

func TestNetworkAndAPIServerFields(t *testing.T) {
	sc, err := ParseScenario([]byte("name: x\nrtt: {mean: 50ms, jitter: 5ms}\napi_servers: 4\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if sc.RTT != 50*time.Millisecond || sc.RTTSpread != (DurationRange{Min: 45 * time.Millisecond, Max: 55 * time.Millisecond}) || sc.APIServers != 4 {
		t.Fatalf("got rtt %s spread %+v api_servers %d", sc.RTT, sc.RTTSpread, sc.APIServers)
	}
	w := NewWorkload(sc.WithDefaults())
	for turn := range 20 {
		if ow := w.OneWay(3, turn); ow < 22500*time.Microsecond || ow > 27500*time.Microsecond {
			t.Errorf("turn %d: one way %s outside [22.5ms, 27.5ms]", turn, ow)
		}
		if w.OneWay(3, turn) != w.OneWay(3, turn) {
			t.Errorf("turn %d: draws differ", turn)
		}
	}
	for _, bad := range []string{"rtt: -1ms\n", "api_servers: -1\n", "rtt: {min: 10ms, max: 5ms}\n"} {
		if _, err := ParseScenario([]byte("name: x\n"+bad), "x.yaml"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestVLLMBalancerField(t *testing.T) {
	sc, err := ParseScenario([]byte("name: x\napi_servers: 4\nvllm_balancer: v0.26\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if sc.VLLMBalancer != "v0.26" || !sc.SimulatesServerSide() || sc.ForRealServers().VLLMBalancer != "" {
		t.Fatalf("vllm_balancer %q, simulates server side %v", sc.VLLMBalancer, sc.SimulatesServerSide())
	}
	for _, bad := range []string{"vllm_balancer: v0.26\n", "api_servers: 4\nvllm_balancer: v9\n"} {
		if _, err := ParseScenario([]byte("name: x\n"+bad), "x.yaml"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A key given twice makes yaml.v3 skip its whole mapping, so every other check
// would report a field as missing or empty: the duplicate is the one message.
func TestParseScenarioDuplicateKeyGivesOneMessage(t *testing.T) {
	src := "turns: 3\nstages: [2, 4]\nturns: 4\nvariants: [off, on]\n"
	for _, tc := range []struct{ source, want string }{
		{"x.yaml", `x.yaml:3: turns: key given twice (first at line 1)`},
		{"", `line 3: turns: key given twice (first at line 1)`},
	} {
		_, err := ParseScenario([]byte(src), tc.source)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source %q: err =\n%v\nwant\n%s", tc.source, err, tc.want)
		}
	}
}

// An unclosed flow sequence is reported on its own line: yaml.v3 says one line
// earlier for parser errors (yamlpos.SyntaxLine).
func TestParseScenarioSyntaxErrorLine(t *testing.T) {
	data := "name: t\nturns: 3\nstages: [2, 4\nstage_duration: 20s\n"
	_, err := ParseScenario([]byte(data), "bad.yaml")
	if err == nil || !strings.Contains(err.Error(), "line 3: did not find expected ',' or ']'") {
		t.Fatalf("err %v, want line 3 (the stages line)", err)
	}
}

// A bad trace option is named once as trace.<field>, not "trace: trace: ...".
func TestParseScenarioTraceFieldNamedOnce(t *testing.T) {
	_, err := ParseScenario([]byte("name: t\ntrace:\n  file: x.jsonl\n  sample: 1.5\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "t.yaml:2: trace.sample 1.5 is not a fraction in (0, 1]") || strings.Contains(err.Error(), "trace: trace") {
		t.Fatalf("err %v, want trace.sample named once at line 2", err)
	}
}
