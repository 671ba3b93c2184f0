package routerhttp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
)

// maxJSONDepth is the deepest nesting of objects and arrays json.Valid accepts
// (encoding/json scanner.go maxNestingDepth).
const maxJSONDepth = 10000

// validJSON reports whether b is exactly one JSON value (RFC 8259) with optional
// surrounding whitespace, accepting exactly what json.Valid accepts: string bytes
// are not checked for UTF-8 validity (only control bytes below 0x20 are refused),
// and nesting deeper than maxJSONDepth is refused. It exists for speed: json.Valid
// steps a state machine through a function call per byte (about 300 MB/s here,
// ~90% of ExtractKey on a Claude Code body), while most of a request body is
// string content, which validJSON skips 8 bytes at a time. FuzzValidJSON checks it
// against json.Valid.
func validJSON(b []byte) bool { return scanJSON(b, nil, nil) }

// scanJSON is validJSON that also calls visit, when not nil, with the name
// (unescaped) and raw value of each member of a top-level object, in order, as it
// passes them; and visitItem, when not nil, with the name of the top-level
// member, the name (unescaped) and the raw value of each member of an object
// that is an element of that member's array ("messages": [{"role": ...}]). On
// invalid input it returns false, possibly after some visits.
func scanJSON(b []byte, visit func(name, value []byte), visitItem func(top, name, value []byte)) bool {
	var (
		depth     [64]byte
		stack     = depth[:0] // open containers, '{' or '['
		name      []byte      // top-level member being read (visit, visitItem)
		valStart  int         // where its value starts
		item      []byte      // member of an array element being read (visitItem)
		itemStart int         // where its value starts
	)
	inItem := func() bool { return len(stack) == 3 && stack[1] == '[' && stack[2] == '{' }
	i := skipSpace(b, 0)
	// member reads an object member's name and colon at b[i], leaving i at its
	// value; for a top-level member it notes the name and where the value starts.
	member := func() bool {
		ns := i
		if i = validMemberName(b, i); i < 0 {
			return false
		}
		if (visit != nil || visitItem != nil) && len(stack) == 1 {
			name, valStart = memberName(b, ns), i
		} else if visitItem != nil && inItem() {
			item, itemStart = memberName(b, ns), i
		}
		return true
	}
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '{', '[':
			if len(stack) == maxJSONDepth {
				return false
			}
			open := b[i]
			stack = append(stack, open)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == open+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if open == '{' && !member() {
				return false
			}
			continue
		case '"':
			i = validString(b, i)
		case 't':
			i = validLiteral(b, i, "true")
		case 'f':
			i = validLiteral(b, i, "false")
		case 'n':
			i = validLiteral(b, i, "null")
		default:
			i = validNumber(b, i)
		}
		if i < 0 {
			return false
		}
		// A value ended at b[i-1], inside stack's last container: close
		// containers, or a comma and the next value.
		for {
			if visit != nil && len(stack) == 1 && stack[0] == '{' {
				visit(name, b[valStart:i])
			} else if visitItem != nil && inItem() && stack[0] == '{' {
				visitItem(name, item, b[itemStart:i])
			}
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			open := stack[len(stack)-1]
			if b[i] == open+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
			if open == '{' && !member() {
				return false
			}
			break
		}
	}
}

// memberName returns the name, unescaped, of the member whose name starts at
// b[i] == '"' (checked by validMemberName).
func memberName(b []byte, i int) []byte {
	end := validString(b, i)
	name := b[i+1 : end-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		if json.Unmarshal(b[i:end], &s) == nil {
			name = []byte(s)
		}
	}
	return name
}

// validMemberName checks an object member's name and colon starting at b[i] and
// returns the index of its value (after whitespace), or -1.
func validMemberName(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = validString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// SWAR constants: a byte of each in every lane of a uint64.
const (
	lanes01 = 0x0101010101010101
	lanes80 = 0x8080808080808080
)

// plainWord reports whether none of the 8 bytes of w is '"', '\' or below 0x20,
// the bytes that end a run of plain string content ("Bit Twiddling Hacks",
// Anderson: "determine if a word has a byte less than n" and "has a zero byte";
// the tests have no false negatives, and a false positive only sends the word to
// the byte loop).
func plainWord(w uint64) bool {
	quote := w ^ (lanes01 * '"')
	bslash := w ^ (lanes01 * '\\')
	hit := (quote - lanes01) &^ quote
	hit |= (bslash - lanes01) &^ bslash
	hit |= (w - lanes01*0x20) &^ w
	return hit&lanes80 == 0
}

// validString checks the JSON string starting at b[i] == '"' and returns the index
// just past its closing quote, or -1.
func validString(b []byte, i int) int {
	i++
	for {
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default: // a control byte
			return -1
		}
	}
}

// validLiteral checks that lit (true, false, null) starts at b[i] and returns the
// index past it, or -1. What follows is checked by the caller.
func validLiteral(b []byte, i int, lit string) int {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return -1
	}
	return i + len(lit)
}

// validNumber checks the number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// starting at b[i] and returns the index past it, or -1.
func validNumber(b []byte, i int) int {
	digits := func(i int) int { // at least one digit
		j := i
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	default:
		if b[i] < '1' || b[i] > '9' {
			return -1
		}
		i = digits(i)
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}

// objectMembers calls visit with the name (unescaped) and raw value of each member
// of obj, which must be a valid JSON object (checked by the caller with json.Valid);
// on anything else it stops without panicking.
func objectMembers(obj []byte, visit func(name, value []byte)) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return // '}' or malformed
		}
		ks := i
		i = skipString(obj, i)
		name := obj[ks+1 : max(ks+1, i-1)]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			if json.Unmarshal(obj[ks:i], &s) == nil {
				name = []byte(s)
			}
		}
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipSpace(obj, i+1)
		vs := i
		i = skipValue(obj, i)
		if i > len(obj) || i <= vs {
			return
		}
		visit(name, obj[vs:i])
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b) + 1
		}
		i += j
		// The quote is escaped when an odd number of backslashes precede it.
		bs := 0
		for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			return i
		}
	}
	return len(b) + 1
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b) + 1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b) + 1
	}
	for i < len(b) { // number, true, false, null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}
