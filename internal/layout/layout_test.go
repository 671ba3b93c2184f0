// Package layout holds checks of the module's layout and docs (no code of its own):
// the package table of docs/DESIGN-NOTES.md against go list and the kind each
// package's path gives (layout_test.go) and
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
// (docs/DESIGN-NOTES.md).
var topPackages = []string{"router", "loadgen", "sim", "report"}

// Folders of internal/ that group packages by kind (docs/DESIGN-NOTES.md):
// orchestrators under runDir, ground packages used by tests only under
// testkitDir; the other ground packages sit directly under internal/.
const (
	runDir     = "internal/run"
	testkitDir = "internal/testkit"
)

// testsPackages are the packages of kind tests, named by path.
var testsPackages = []string{"e2e", "internal/layout", "deploy"}

// pathKinds returns the kinds a package's module-relative path allows
// (docs/DESIGN-NOTES.md, "The path gives the kind"), or none when the path
// fits no group.
func pathKinds(pkg string) []string {
	parts := strings.Split(pkg, "/")
	switch {
	case slices.Contains(testsPackages, pkg):
		return []string{"tests"}
	case parts[0] == "cmd" && len(parts) == 2:
		return []string{"main"}
	case strings.HasPrefix(pkg, runDir+"/") && len(parts) == 3:
		return []string{"orchestrator"}
	case strings.HasPrefix(pkg, testkitDir+"/") && len(parts) == 3:
		return []string{"ground"}
	case parts[0] == "internal" && len(parts) == 2 && pkg != runDir && pkg != testkitDir:
		return []string{"ground"}
	case parts[0] == "internal", parts[0] == "cmd", parts[0] == "e2e", pkg == ".":
		return nil
	case len(parts) == 1:
		return []string{"core"}
	default:
		return []string{"core", "shell"}
	}
}

// testOnly reports whether pkg may import internal/testkit/ packages from its
// non-test files: a testkit package itself, or a tests package.
func testOnly(pkg string) bool {
	return strings.HasPrefix(pkg, testkitDir+"/") || slices.Contains(testsPackages, pkg)
}

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
// dependencies, direct and indirect, as go list -deps reports them (.Deps), and
// with the packages its non-test files import directly (.Imports).
func moduleDeps(t *testing.T) (deps, imports map[string][]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{join .Deps \" \"}}\t{{join .Imports \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps, imports = map[string][]string{}, map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("go list: line %q, want 3 tab-separated fields", line)
		}
		deps[rel(f[0])] = strings.Fields(f[1])
		imports[rel(f[0])] = strings.Fields(f[2])
	}
	return deps, imports
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
// module: every package has a row and every row a package; a row's kind is one
// its path allows (pathKinds); no package reaches what its row forbids; ground
// packages reach no top package; core rows forbid net/http; no package but a
// testkit or tests one imports internal/testkit/ from its non-test files. A
// failure names the package, the dependency and the table line.
func TestDesignNotesTable(t *testing.T) {
	rows := parseTable(t, designNotes)
	deps, imports := moduleDeps(t)
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
		if want := pathKinds(r.pkg); want == nil {
			t.Errorf("%s:%d: %s: its path gives no kind: put an orchestrator under %s/, a ground package used by tests only under %s/, another ground package directly under internal/ (docs/DESIGN-NOTES.md)", designNotes, r.line, r.pkg, runDir, testkitDir)
		} else if !slices.Contains(want, r.kind) {
			t.Errorf("%s:%d: %s is marked %s, but its path gives %s: move the package or correct the row (docs/DESIGN-NOTES.md, \"The path gives the kind\")", designNotes, r.line, r.pkg, r.kind, strings.Join(want, " or "))
		}
		if !testOnly(r.pkg) {
			// Direct imports suffice: a chain of non-test imports into
			// testkit/ enters it where a package that is not testOnly
			// imports a testkit one (no package imports a tests package),
			// and that package is reported.
			for _, imp := range imports[r.pkg] {
				if dep, bad := reaches([]string{imp}, testkitDir); bad {
					t.Errorf("%s imports %s from its non-test files (%s:%d), a package for tests only: import it from _test.go files only, or move it out of %s/", r.pkg, dep, designNotes, r.line, testkitDir)
				}
			}
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

// TestPathKinds pins the kind each kind of path gives, and the paths that give
// none.
func TestPathKinds(t *testing.T) {
	for pkg, want := range map[string]string{
		"internal/run/bench":           "orchestrator",
		"internal/testkit/testredis":   "ground",
		"internal/wire":                "ground",
		"internal/layout":              "tests",
		"e2e":                          "tests",
		"deploy":                       "tests",
		"cmd/warden":                   "main",
		"router":                       "core",
		"router/routerhttp":            "core or shell",
		"loadgen/trace":                "core or shell",
		"internal/run":                 "",
		"internal/testkit":             "",
		"internal/engines/x":           "",
		"internal/run/bench/x":         "",
		"internal/testkit/testredis/x": "",
		"cmd/warden/x":                 "",
		"e2e/x":                        "",
	} {
		if got := strings.Join(pathKinds(pkg), " or "); got != want {
			t.Errorf("pathKinds(%q) = %q, want %q", pkg, got, want)
		}
	}
}
