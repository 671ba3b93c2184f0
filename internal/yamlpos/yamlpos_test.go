package yamlpos

import (
	"testing"

	"gopkg.in/yaml.v3"
)

func TestKeyLines(t *testing.T) {
	doc := "name: x\nthink_time: {mean: 5s, jitter: 1s}\nmodels:\n  - name: m\n    replicas:\n      - url: http://a\n        dp_ranks: two\n      - {url: http://b}\nstages: [1, 2]\n"
	want := map[string]int{
		"name": 1, "think_time": 2, "think_time.mean": 2, "think_time.jitter": 2,
		"models": 3, "models[0].name": 4, "models[0].replicas": 5,
		"models[0].replicas[0].url": 6, "models[0].replicas[0].dp_ranks": 7,
		"models[0].replicas[1].url": 8, "stages": 9,
	}
	got := KeyLines([]byte(doc))
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, l := range want {
		if got[k] != l {
			t.Errorf("%s: line %d, want %d", k, got[k], l)
		}
	}
	if KeyLines([]byte("- a\n- b\n")) != nil || KeyLines([]byte("a: [")) != nil {
		t.Error("a top-level sequence or broken YAML should give nil")
	}
}

func TestNameField(t *testing.T) {
	lines := KeyLines([]byte("think_time: {mean: 5, jitter: 1}\nside_requests:\n  turn: [0]\nmodels:\n  - name: m\n    overflow_threshold: lots\n    dp_ranks: two\n    admission: {max_hold: 10}\n"))
	for _, tc := range []struct{ in, want string }{
		// An inline mapping on its key's line: the key, not an inner one.
		{`line 1: mean: "5" is not a duration`, `line 1: think_time: mean: "5" is not a duration`},
		// An inline mapping of one key: that key.
		{"line 8: cannot unmarshal !!int `10` into time.Duration", "line 8: models[0].admission.max_hold: cannot unmarshal !!int `10` into time.Duration"},
		// ... but the mapping when the message is about the mapping.
		{"line 8: cannot unmarshal !!map into time.Duration", "line 8: models[0].admission: cannot unmarshal !!map into time.Duration"},
		// A nested key on its own line.
		{"line 3: field turn not found", "line 3: side_requests.turn: field turn not found"},
		// A message that starts with its key gets the path in its place.
		{`line 6: overflow_threshold "lots": want "auto"`, `line 6: models[0].overflow_threshold "lots": want "auto"`},
		{"line 7: cannot unmarshal !!str `two` into int", "line 7: models[0].dp_ranks: cannot unmarshal !!str `two` into int"},
		// Already named, no key on the line, not a line message: unchanged.
		{"line 3: side_requests.turn: bad", "line 3: side_requests.turn: bad"},
		{"line 99: something", "line 99: something"},
		{"no line here", "no line here"},
	} {
		if got := NameField(tc.in, lines); got != tc.want {
			t.Errorf("NameField(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLocate(t *testing.T) {
	lines := KeyLines([]byte("name: x\nthink_time: {mean: 5, jitter: 1}\nside_requests:\n  turns: x\n"))
	for _, tc := range []struct {
		in   string
		want Location
	}{
		{"line 4: cannot unmarshal !!str `x` into []int", Location{4, "side_requests.turns", "side_requests.turns: cannot unmarshal !!str `x` into []int"}},
		{`line 2: mean: "5" is not a duration`, Location{2, "think_time", `think_time: mean: "5" is not a duration`}},
		{"line 1: field name not found", Location{1, "name", "field name not found"}}, // names its field already
		{"line 9: something", Location{9, "", "something"}},
		{"no line here", Location{0, "", "no line here"}},
		{"line x: not a number", Location{0, "", "line x: not a number"}},
	} {
		if got := Locate(tc.in, lines); got != tc.want {
			t.Errorf("Locate(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestKnownKeys(t *testing.T) {
	type inner struct {
		Mode string `yaml:"mode"`
	}
	type doc struct {
		Name      string `yaml:"name"`
		Admission string `yaml:"admission"`
		Skipped   string `yaml:"-"`
		Inline    inner  `yaml:",inline"`
		hidden    string // unexported: no key
	}
	for _, tc := range []struct{ in, want string }{
		{"line 3: field admision not found in type yamlpos.doc",
			"line 3: field admision not found in type yamlpos.doc (did you mean admission? have name, admission, mode)"},
		// Nothing close: the list only.
		{"line 3: field colour not found in type yamlpos.doc",
			"line 3: field colour not found in type yamlpos.doc (have name, admission, mode)"},
		// A type not given, another message: unchanged.
		{"line 3: field x not found in type other.T", "line 3: field x not found in type other.T"},
		{"line 3: cannot unmarshal", "line 3: cannot unmarshal"},
	} {
		if got := KnownKeys(tc.in, doc{}, &inner{}); got != tc.want {
			t.Errorf("KnownKeys(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	_ = doc{}.hidden // used, for linters
}

// yaml.v3's parser errors carry the 0-based line; SyntaxLine makes it the
// line the problem is on. Scanner errors (already 1-based) are left alone.
func TestSyntaxLine(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want string
	}{
		{"a: 1\nb: 2\nstages: [2, 4\nc: 3\n", "yaml: line 3: did not find expected ',' or ']'"},
		{"a: 1\nm: {x: 1\nc: 3\n", "yaml: line 2: did not find expected ',' or '}'"},
		{"a: 1\nb: 2\nc: @x\n", "yaml: line 3: found character that cannot start any token"},
	} {
		var v any
		err := yaml.Unmarshal([]byte(c.doc), &v)
		if err == nil {
			t.Fatalf("%q decoded", c.doc)
		}
		if got := SyntaxLine(err.Error()); got != c.want {
			t.Errorf("%q: SyntaxLine(%q) = %q, want %q", c.doc, err, got, c.want)
		}
	}
}
