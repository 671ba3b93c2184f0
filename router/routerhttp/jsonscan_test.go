package routerhttp

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// validJSONCases are inputs on which validJSON must agree with json.Valid; want
// is json.Valid's answer, written out so a change in either shows.
var validJSONCases = []struct {
	name, in string
	want     bool
}{
	{"empty", ``, false},
	{"spaces only", " \t\r\n", false},
	{"object", `{"model":"m","stream":true}`, true},
	{"empty object and array", ` { "a" : { } , "b" : [ ] } `, true},
	{"top-level scalars", `"s"`, true},
	{"top-level number", `-0.5e+10`, true},
	{"top-level literal", `null`, true},
	{"nested arrays", `[[1,[2,[3]]],{"x":[true,false,null]}]`, true},
	{"trailing comma in object", `{"a":1,}`, false},
	{"trailing comma in array", `[1,]`, false},
	{"leading comma", `[,1]`, false},
	{"missing colon", `{"a" 1}`, false},
	{"unquoted name", `{a:1}`, false},
	{"number name", `{1:1}`, false},
	{"mismatched close", `{"a":[1}]`, false},
	{"unclosed object", `{"a":1`, false},
	{"extra close", `{"a":1}}`, false},
	{"two values", `{} {}`, false},
	{"trailing garbage", `{"a":1}x`, false},
	{"leading zero", `01`, false},
	{"minus alone", `-`, false},
	{"dot without digits", `1.`, false},
	{"exponent without digits", `1e+`, false},
	{"plus sign", `+1`, false},
	{"leading dot", `.5`, false},
	{"number then letter", `[1x]`, false},
	{"literal prefix", `tru`, false},
	{"literal then letter", `truex`, false},
	{"capital literal", `True`, false},
	// Escapes: the eight single-letter ones and \u with exactly four hex digits.
	{"all escapes", `"\" \\ \/ \b \f \n \r \t \u00e9 \uABCD"`, true},
	{"bad escape", `"\x41"`, false},
	{"short unicode escape", `"\u12"`, false},
	{"non-hex unicode escape", `"\u12g4"`, false},
	{"escape at end", `"abc\`, false},
	{"unterminated string", `"abc`, false},
	{"escaped quote then end", `"a\"`, false},
	// json.Valid does not check UTF-8: invalid bytes inside a string are accepted.
	{"invalid utf-8 in string", "\"\xff\xfe\"", true},
	{"utf-8 in string", `"héllo – 世界"`, true},
	{"tab in string", "\"a\tb\"", false},
	{"newline in string", "\"a\nb\"", false},
	{"nul in string", "\"a\x00b\"", false},
	{"DEL in string", "\"a\x7fb\"", true},
	{"byte outside string", "{\"a\":1}\x00", false},
	// Long runs exercise the 8-byte loop and its hand-over at every offset.
	{"long plain string", `"` + strings.Repeat("abcdefg", 100) + `"`, true},
	{"long string with late quote escape", `"` + strings.Repeat("x", 77) + `\"` + strings.Repeat("y", 13) + `"`, true},
	{"long string with late control byte", `"` + strings.Repeat("x", 77) + "\x1f" + strings.Repeat("y", 13) + `"`, false},
	{"high bytes near quote", `"` + strings.Repeat("\xe2\x80\x94", 11) + `"`, true},
	{"depth at the limit", strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth), true},
	{"depth over the limit", strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1), false},
	{"objects at the limit", strings.Repeat(`{"a":`, maxJSONDepth-1) + "{}" + strings.Repeat("}", maxJSONDepth-1), true},
}

func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	for _, tc := range validJSONCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := json.Valid([]byte(tc.in)); got != tc.want {
				t.Fatalf("json.Valid = %v, the table says %v", got, tc.want)
			}
			if got := validJSON([]byte(tc.in)); got != tc.want {
				t.Errorf("validJSON = %v, json.Valid = %v", got, tc.want)
			}
		})
	}
}

func TestValidJSONOnRecordedBodies(t *testing.T) {
	for _, name := range []string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json", "claude-code-request-1.json"} {
		t.Run(name, func(t *testing.T) {
			body := loadFixture(t, name).Body
			if !json.Valid(body) || !validJSON(body) {
				t.Fatalf("json.Valid %v, validJSON %v; want both true", json.Valid(body), validJSON(body))
			}
			// Every prefix of a valid object is invalid; check a spread of cuts.
			for cut := 0; cut < len(body)-1; cut += 1 + len(body)/97 {
				if got, want := validJSON(body[:cut]), json.Valid(body[:cut]); got != want {
					t.Fatalf("cut at %d: validJSON %v, json.Valid %v", cut, got, want)
				}
			}
		})
	}
}

// members lists what visit gets, name and value joined by a tab, in order.
func members(scan func(visit func(name, value []byte))) []string {
	var out []string
	scan(func(name, value []byte) { out = append(out, string(name)+"\t"+string(value)) })
	return out
}

// checkScanJSON checks scanJSON against json.Valid and, on a valid object,
// its visits against objectMembers (the member walk it replaced in
// readRequestBody).
func checkScanJSON(t *testing.T, b []byte) {
	t.Helper()
	want := json.Valid(b)
	var got bool
	gotMembers := members(func(visit func(name, value []byte)) { got = scanJSON(b, visit, nil) })
	if got != want {
		t.Fatalf("scanJSON(%.200q) = %v, json.Valid = %v", b, got, want)
	}
	if !want {
		return
	}
	wantMembers := members(func(visit func(name, value []byte)) { objectMembers(b, visit) })
	if !slices.Equal(gotMembers, wantMembers) {
		t.Fatalf("scanJSON(%.200q) visited %q, objectMembers %q", b, gotMembers, wantMembers)
	}
}

func TestScanJSONMembers(t *testing.T) {
	for _, in := range []string{
		`{"model":"m","metadata":{"user_id":"{\"session_id\":\"s\"}"},"user":7}`,
		` { "a" : [ 1 , { "b" : [] } ] , "c" : {} , "d" : "x" , "e":null } `,
		`{"mo\u0064el":"escaped name","model":"last wins","":""}`,
		`{"deep":{"a":{"b":{"c":[[[]]]}}},"after":true}`,
		`[{"not":"top-level object"}]`,
		`{}`,
	} {
		t.Run(in, func(t *testing.T) { checkScanJSON(t, []byte(in)) })
	}
	for _, name := range []string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json", "claude-code-request-1.json"} {
		t.Run(name, func(t *testing.T) { checkScanJSON(t, loadFixture(t, name).Body) })
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, tc := range validJSONCases {
		if len(tc.in) < 1000 {
			f.Add([]byte(tc.in))
		}
	}
	f.Add([]byte(`{"model":"m","metadata":{"user_id":"u"},"x":[1,{"y":2}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
		checkScanJSON(t, b)
	})
}

// BenchmarkValidJSON compares validJSON with json.Valid on a recorded Claude Code
// body (the check ExtractKey runs on every request).
func BenchmarkValidJSON(b *testing.B) {
	body := loadFixture(b, "claude-code-2.1.328-turn2.json").Body
	for _, impl := range []struct {
		name  string
		valid func([]byte) bool
	}{{"encoding-json", json.Valid}, {"validJSON", validJSON}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !impl.valid(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
