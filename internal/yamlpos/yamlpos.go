// Package yamlpos finds where the keys of a YAML document are, so that an error
// yaml.v3 reports by line ("line 7: cannot unmarshal ...") can also name the
// field it is about ("line 7: models[0].replicas[1].dp_ranks: cannot ..."). The
// scenario loader (loadgen) and the router's config loader share it.
package yamlpos

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// KeyLines maps the path of every mapping key in the first document of data to
// the line (1-based) it starts on. Paths join keys with "." and index sequence
// items with "[i]": "stages", "side_requests.turns",
// "models[0].replicas[1].url". A scalar sequence item is not a key and has no
// path. It returns nil when data is not YAML or not a mapping at the top.
func KeyLines(data []byte) map[string]int {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	lines := map[string]int{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				lines[p] = k.Line
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				walk(item, path+"["+strconv.Itoa(i)+"]")
			}
		}
	}
	walk(doc.Content[0], "")
	return lines
}

// NameField inserts the field a yaml.v3 "line N: ..." message is about ("line N:
// field: ..."), when a key starts on that line: the most nested one when several
// do ("side_requests.turns" on its own line under "side_requests"), but the key
// an inline mapping belongs to when that key is on the same line
// ("think_time: {mean: 5s, jitter: 2s}" gives "think_time"). A message that
// starts with the field's own key gets the path in its place; one that names
// the path already, or whose line starts no key, is returned unchanged.
func NameField(msg string, lines map[string]int) string {
	loc := Locate(msg, lines)
	if loc.Line == 0 {
		return msg
	}
	return "line " + strconv.Itoa(loc.Line) + ": " + loc.Text
}

// Location is a yaml.v3 message split into its line and text, with the field it
// is about (Locate).
type Location struct {
	Line int    // 1-based; 0 when the message gives no "line N: " (Text is then the message)
	Path string // the key starting on Line that the message is about (see NameField); "" if none
	Text string // the message after "line N: ", with the field named as NameField does
}

// Locate splits a yaml.v3 "line N: ..." message into a Location, naming its field
// from lines (KeyLines) as NameField does.
func Locate(msg string, lines map[string]int) Location {
	rest, ok := strings.CutPrefix(msg, "line ")
	if !ok {
		return Location{Text: msg}
	}
	n, tail, ok := strings.Cut(rest, ": ")
	line, err := strconv.Atoi(n)
	if !ok || err != nil || line <= 0 || strconv.Itoa(line) != n {
		return Location{Text: msg}
	}
	best := ""
	for k, l := range lines {
		if l == line && (len(k) > len(best) || (len(k) == len(best) && k < best)) {
			best = k
		}
	}
	// Inside an inline mapping written on its parent key's line, the line does
	// not tell which inner key the message is about: name the parent, unless
	// the mapping has that one key and the message is about its value
	// ("admission: {max_hold: 10}").
	for {
		i := strings.LastIndex(best, ".")
		if i <= 0 {
			break
		}
		parent := best[:i]
		for strings.HasSuffix(parent, "]") {
			parent = parent[:strings.LastIndex(parent, "[")]
		}
		leaf := best[i+1:]
		// About the key ("field x not found") or the mapping itself ("!!map
		// into int"), not the key's value.
		notValue := strings.Contains(tail, "field "+leaf+" not found") || strings.Contains(tail, "!!map") || strings.Contains(tail, "!!seq")
		if l, ok := lines[parent]; !ok || l != line || (!notValue && onlyChild(lines, best[:i], line)) {
			break
		}
		best = parent
	}
	loc := Location{Line: line, Path: best, Text: tail}
	if best == "" || strings.Contains(tail, best) {
		return loc // the message names its field already
	}
	// A message that starts with the field's own key ("overflow_threshold
	// \"lots\": want ...") gets the whole path in its place.
	if leaf := best[strings.LastIndex(best, ".")+1:]; strings.HasPrefix(tail, leaf+" ") || strings.HasPrefix(tail, leaf+":") {
		loc.Text = best + tail[len(leaf):]
		return loc
	}
	loc.Text = best + ": " + tail
	return loc
}

// onlyChild reports whether parent has one key on line in lines, its only key.
func onlyChild(lines map[string]int, parent string, line int) bool {
	n := 0
	for k := range lines {
		if rest, ok := strings.CutPrefix(k, parent+"."); ok && !strings.ContainsAny(rest, ".[") {
			n++
			if lines[k] != line {
				return false
			}
		}
	}
	return n == 1
}

// goTypeSuffix matches yaml.v3's " in type pkg.Type" tail of a field error.
var goTypeSuffix = regexp.MustCompile(` in type [A-Za-z0-9_.\[\]*]+`)

// Tidy rewrites a yaml.v3 decoding message for someone who wrote YAML, not Go:
// it drops the Go type names (" in type router.Config") and, when a duration
// failed to decode, says how durations are written.
func Tidy(msg string) string {
	msg = goTypeSuffix.ReplaceAllString(msg, "")
	if strings.Contains(msg, "time.Duration") {
		msg += ` (durations are Go duration strings such as "5s", "3m" or "500ms")`
	}
	return msg
}

// notFound matches yaml.v3's unknown-key message (decode.go, KnownFields).
var notFound = regexp.MustCompile(`field (\S+) not found in type (\S+)`)

// KnownKeys completes a yaml.v3 "field x not found in type T" message with the
// keys T has, when T is the type of one of structs (values or pointers of the
// structs the document decodes into): "... (have a, b, c)", led by "did you
// mean k?" when one key is within two edits of x. Other messages are returned
// unchanged. Call it before Tidy, which drops the type name.
func KnownKeys(msg string, structs ...any) string {
	m := notFound.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	for _, s := range structs {
		t := reflect.TypeOf(s)
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct || t.String() != m[2] {
			continue
		}
		return msg + " (" + Suggest(m[1], yamlKeys(t)) + ")"
	}
	return msg
}

// yamlKeys lists the keys of struct type t in field order, as yaml.v3 names
// them: the tag's name, else the field's name in lower case; "-" and
// unexported fields have none, ",inline" structs add theirs.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			keys = append(keys, yamlKeys(f.Type)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}

// Suggest is the hint for an unknown key among keys: "did you mean k? have a,
// b, c", the "did you mean" only when one key is within two edits.
func Suggest(key string, keys []string) string {
	best, bestD := "", 3
	for _, k := range keys {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	hint := ""
	if best != "" {
		hint = "did you mean " + best + "? "
	}
	return hint + "have " + strings.Join(keys, ", ")
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// WithoutDuplicateKeys parses data's first document and drops from every mapping
// the later occurrences of a key given twice, keeping the first. yaml.v3 reports a
// duplicate key and then leaves its whole mapping undecoded, so a checker of the
// decoded value would report that mapping's fields as missing too; decoding the
// returned node gives the value without that false follow-on. dropped says
// whether any key was dropped; doc is nil when data is not YAML.
func WithoutDuplicateKeys(data []byte) (doc *yaml.Node, dropped bool) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, false
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			seen := map[string]bool{}
			kept := n.Content[:0]
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.Kind == yaml.ScalarNode && seen[k.Value] {
					dropped = true
					continue
				}
				seen[k.Value] = true
				kept = append(kept, k, n.Content[i+1])
			}
			n.Content = kept
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	return &root, dropped
}

// parserProblems are the problems yaml.v3's parser (parserc.go, v3.0.1) reports;
// its scanner's are other strings.
var parserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"did not find expected '-' indicator", "did not find expected <document start>",
	"did not find expected <stream-start>", "did not find expected key",
	"did not find expected node content", "found undefined tag handle",
	"found duplicate %TAG directive", "found duplicate %YAML directive",
	"found incompatible YAML document",
}

// SyntaxLine corrects the line of a yaml.v3 syntax error message ("yaml: line
// N: ..."). yaml.v3 (decode.go, parser.fail) prints its marks' 0-based line,
// adding 1 only for scanner errors: a parser error such as an unclosed "[2, 4"
// on line 14 reads "line 13". SyntaxLine adds the 1 to those; any other
// message is returned unchanged.
func SyntaxLine(msg string) string {
	rest, ok := strings.CutPrefix(msg, "yaml: line ")
	if !ok {
		return msg
	}
	n, tail, ok := strings.Cut(rest, ": ")
	line, err := strconv.Atoi(n)
	if !ok || err != nil || line <= 0 {
		return msg
	}
	for _, p := range parserProblems {
		if strings.HasPrefix(tail, p) {
			return "yaml: line " + strconv.Itoa(line+1) + ": " + tail
		}
	}
	return msg
}
