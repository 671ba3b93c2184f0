package loadgenhttp

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lmwarden/warden/loadgen"
)

// docClient is one line of doc.go's client list: the type and, for a client
// NewClient builds, its loadgen API name ("api <name>").
type docClient struct{ name, api string }

func docClients(t *testing.T) []docClient {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package doc")
	}
	var out []docClient
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		rest, ok := strings.CutPrefix(line, "  - ")
		if !ok {
			continue
		}
		name, desc, _ := strings.Cut(rest, ":")
		c := docClient{name: name}
		if a, ok := strings.CutPrefix(strings.TrimSpace(desc), "api "); ok {
			c.api = strings.TrimRight(strings.Fields(a)[0], ",")
		}
		out = append(out, c)
	}
	return out
}

// codeClients returns the exported types of the package's non-test files that
// have a Do method (the Client interface's one method).
func codeClients(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != "Do" {
				continue
			}
			typ := fd.Recv.List[0].Type
			if st, ok := typ.(*ast.StarExpr); ok {
				typ = st.X
			}
			if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
				out = append(out, id.Name)
			}
		}
	}
	return out
}

// scenarioAPIs returns the values of loadgen's API* string constants (the API
// names Scenario.API accepts), read from loadgen's source.
func scenarioAPIs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "scenario.go"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "scenario.go", b, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "API") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// TestDocListsEveryClient fails when doc.go's client list and the code
// disagree: a Client type (an exported type with a Do method) missing from the
// list or a listed name that is none; an API name of loadgen's (Scenario.API)
// no line carries, or one loadgen does not have; or a line whose api NewClient
// maps to another type.
func TestDocListsEveryClient(t *testing.T) {
	doc := docClients(t)
	if len(doc) == 0 {
		t.Fatal("no client list found in doc.go's package doc")
	}
	var docNames, docAPIs []string
	for _, c := range doc {
		docNames = append(docNames, c.name)
		if c.api != "" {
			docAPIs = append(docAPIs, c.api)
		}
	}
	code := codeClients(t)
	slices.Sort(docNames)
	slices.Sort(code)
	if !slices.Equal(docNames, code) {
		t.Errorf("doc.go lists the clients %v; the package's Client types are %v", docNames, code)
	}
	apis := scenarioAPIs(t)
	slices.Sort(apis)
	slices.Sort(docAPIs)
	if len(apis) == 0 || !slices.Equal(docAPIs, apis) {
		t.Errorf("doc.go gives the APIs %v; loadgen's Scenario.API names are %v", docAPIs, apis)
	}
	for _, c := range doc {
		if c.api == "" {
			continue
		}
		sc := loadgen.DefaultScenario()
		sc.API = c.api
		got := reflect.TypeOf(NewClient(sc, "http://127.0.0.1:1", nil, nil))
		if got.Kind() == reflect.Pointer {
			got = got.Elem()
		}
		if got.Name() != c.name {
			t.Errorf("doc.go: api %s is %s, but NewClient builds a %s for it", c.api, c.name, got.Name())
		}
	}
}
