package report

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lmwarden/warden/loadgen"
)

// maxReasonRunes bounds a failure reason's text (Summary.FailedBy).
const maxReasonRunes = 120

var digits = regexp.MustCompile(`[0-9]+`)

// failureReason groups a failed turn: its HTTP status and its error text
// (loadgen.Result.Err: the server's body for a non-200, else the client's
// error) with every number replaced by N, so "prompt of 35,121 tokens" and
// "prompt of 40,007 tokens" count together; at most maxReasonRunes runes.
func failureReason(r *loadgen.Result) string {
	text := strings.Join(strings.Fields(digits.ReplaceAllString(r.Err, "N")), " ")
	if text == "" {
		text = "no error text"
	}
	if utf8.RuneCountInString(text) > maxReasonRunes {
		text = string([]rune(text)[:maxReasonRunes]) + "..."
	}
	if r.Status == 0 {
		return "no response: " + text
	}
	return fmt.Sprintf("status %d: %s", r.Status, text)
}

// mdFailuresSection writes the failed turns of every stage by reason
// (Summary.FailedBy), most frequent first; nothing when none failed.
func mdFailuresSection(b *strings.Builder, keys stageKeys, sums []Summary) {
	var rows [][]string
	for _, s := range sums {
		reasons := make([]string, 0, len(s.FailedBy))
		for r := range s.FailedBy {
			reasons = append(reasons, r)
		}
		slices.SortFunc(reasons, func(x, y string) int {
			if d := s.FailedBy[y] - s.FailedBy[x]; d != 0 {
				return d
			}
			return strings.Compare(x, y)
		})
		for _, r := range reasons {
			rows = append(rows, []string{s.Variant, keys.label(&s), fmt.Sprint(s.FailedBy[r]), strings.ReplaceAll(r, "|", `\|`)})
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Failed turns by reason\n\n" +
		"Turns done in each window that failed, grouped by HTTP status and error text (numbers shown as N; " +
		"each turn's own text is its `err` in turns.jsonl).\n\n")
	mdTable(b, []string{"variant", "window", "turns", "reason"}, rows)
}
