// Package layout holds checks of the module's layout and docs (no code of its own):
// the package table of docs/DESIGN-NOTES.md against go list (layout_test.go) and
// every relative link of README.md and docs/*.md (links_test.go), that no
// non-test function is over 100 lines (funclen_test.go), and that comments and
// docs cite only what a reader can open (cite_test.go).
package layout

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is the module path; the table names packages relative to it.
const module = "github.com/lmwarden/warden"

// designNotes holds the package table this test checks (docs/DESIGN-NOTES.md).
const designNotes = "../../docs/DESIGN-NOTES.md"

// topPackages are the four top packages a ground helper must not import
// (docs/DESIGN-NOTES.md: internal/ holds ground helpers beside the
// orchestrators).
var topPackages = []string{"router", "loadgen", "sim", "report"}

// kinds are the values of the table's kind column.
var kinds = []string{"core", "shell", "ground", "orchestrator", "main", "tests"}

// row is one line of the package table.
type row struct {
	line      int
	pkg, kind string
	forbidden []string // module-relative package paths, or a standard one (net/http)
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseTable reads the table under the header "| package | kind | owns | must
// not import |" from the Markdown at path. Cells name packages in backticks.
func parseTable(t *testing.T, path string) []row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !in {
			in = line == "| package | kind | owns | must not import |"
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("%s:%d: %d cells, want 4 (package | kind | owns | must not import): %q", path, n, len(cells), line)
		}
		pkg := backticked.FindAllStringSubmatch(cells[0], -1)
		if len(pkg) != 1 {
			t.Fatalf("%s:%d: package cell %q, want one `path`", path, n, cells[0])
		}
		r := row{line: n, pkg: pkg[0][1], kind: strings.TrimSpace(cells[1])}
		if !slices.Contains(kinds, r.kind) {
			t.Errorf("%s:%d: %s: kind %q, want one of %v", path, n, r.pkg, r.kind, kinds)
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
			r.forbidden = append(r.forbidden, m[1])
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package table (header %q)", path, "| package | kind | owns | must not import |")
	}
	return rows
}

// moduleDeps returns every package of the module (relative path) with its
// dependencies, direct and indirect, as go list -deps reports them (.Deps).
func moduleDeps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[rel(f[0])] = f[1:]
	}
	return deps
}

// rel strips the module path: "github.com/lmwarden/warden/router" -> "router".
func rel(p string) string {
	if p == module {
		return "."
	}
	return strings.TrimPrefix(p, module+"/")
}

// reaches reports the first dependency in deps that is forbidden itself or lies
// under it (a module package) or equals it (a standard package such as net/http).
func reaches(deps []string, forbidden string) (string, bool) {
	for _, d := range deps {
		if d == forbidden {
			return d, true
		}
		if r := rel(d); r != d && (r == forbidden || strings.HasPrefix(r, forbidden+"/")) {
			return r, true
		}
	}
	return "", false
}

// TestDesignNotesTable checks docs/DESIGN-NOTES.md's package table against the
// module: every package has a row and every row a package; no package reaches
// what its row forbids; ground packages reach no top package; core rows forbid
// net/http. A failure names the package, the dependency and the table line.
func TestDesignNotesTable(t *testing.T) {
	rows := parseTable(t, designNotes)
	deps := moduleDeps(t)
	seen := map[string]int{}
	for _, r := range rows {
		if prev, dup := seen[r.pkg]; dup {
			t.Errorf("%s:%d: %s has a row already (line %d)", designNotes, r.line, r.pkg, prev)
		}
		seen[r.pkg] = r.line
		d, ok := deps[r.pkg]
		if !ok {
			t.Errorf("%s:%d: row for %s, which is not a package of the module (go list %s/...)", designNotes, r.line, r.pkg, module)
			continue
		}
		rules := r.forbidden
		switch r.kind {
		case "ground":
			if !strings.HasPrefix(r.pkg, "internal/") {
				t.Errorf("%s:%d: %s is marked ground but is not under internal/", designNotes, r.line, r.pkg)
			}
			rules = append(slices.Clip(rules), topPackages...)
		case "core":
			if !slices.Contains(r.forbidden, "net/http") {
				t.Errorf("%s:%d: core package %s does not list net/http under must not import", designNotes, r.line, r.pkg)
			}
		}
		for _, f := range rules {
			if dep, bad := reaches(d, f); bad {
				t.Errorf("%s depends on %s (go list -deps), which %s:%d forbids (%s, kind %s); move the code that needs it to another package", r.pkg, dep, designNotes, r.line, f, r.kind)
			}
		}
	}
	for pkg := range deps {
		if _, ok := seen[pkg]; !ok {
			t.Errorf("package %s has no row in %s's package table: classify it (kind, what it owns, what it must not import)", pkg, designNotes)
		}
	}
}
