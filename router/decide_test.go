package router

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestDecisionStepsDocumented fails when docs/router.md's table of decision
// steps (section 3) and decisionSteps disagree on the names or their order.
func TestDecisionStepsDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/router.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| [^|]+ \\| [^|]+ \\|$")
	var doc []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if slices.Contains(DecisionSteps(), m[1]) || len(doc) > 0 && len(doc) < len(decisionSteps) {
			doc = append(doc, m[1])
		}
	}
	if !slices.Equal(doc, DecisionSteps()) {
		t.Errorf("docs/router.md lists the decision steps\n  %q\nthe code runs\n  %q", doc, DecisionSteps())
	}
}
