package routerhttp

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/router"
)

// TestDocListsEveryDecision fails when doc.go's list of X-Warden-Decision
// values ("  - <value>: ..." lines after the header's name) and router.Reasons
// disagree, in order; and when router.Reasons itself misses a Reason (the
// value after its last one must be "unknown").
func TestDocListsEveryDecision(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package doc")
	}
	var doc []string
	in := false
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if strings.Contains(line, "X-Warden-Decision") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "  - "); ok {
			name, _, found := strings.Cut(rest, ":")
			if !found {
				t.Errorf("doc.go: decision line %q has no \"value:\"", line)
			}
			doc = append(doc, name)
		}
	}
	var code []string
	for _, r := range router.Reasons {
		code = append(code, r.String())
	}
	if !slices.Equal(doc, code) {
		t.Errorf("doc.go lists the decisions %v; router.Reasons are %v", doc, code)
	}
	if s := router.Reason(len(router.Reasons)).String(); s != "unknown" {
		t.Errorf("router.Reasons has %d entries but Reason(%d) is %q: add it to router.Reasons (and to doc.go)", len(router.Reasons), len(router.Reasons), s)
	}
}
