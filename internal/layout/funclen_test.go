package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a non-test function may be, in lines from its
// func keyword to its closing brace: long orchestration is split into named
// steps.
const maxFuncLines = 100

// longFuncsAllowed names the functions (module-relative file, then function
// name) that may be longer because they are table data, not logic, or that are
// being changed on another branch. Each entry says which; shorten the list, do
// not lengthen it.
var longFuncsAllowed = map[string]string{}

// TestNoLongFunctions fails on a function of a non-test .go file of the module
// longer than maxFuncLines that is not in longFuncsAllowed, and on an allowed
// entry that no longer exists or is short now (so the list stays true).
func TestNoLongFunctions(t *testing.T) {
	root := "../.."
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "results" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		relPath, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		relPath = filepath.ToSlash(relPath)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start := fset.Position(fd.Pos())
			n := fset.Position(fd.End()).Line - start.Line
			key := relPath + " " + fd.Name.Name
			if _, ok := longFuncsAllowed[key]; ok {
				seen[key] = n > maxFuncLines
				continue
			}
			if n > maxFuncLines {
				t.Errorf("%s:%d: func %s is %d lines, over %d: split it into named steps (or, if it is table data, add it to longFuncsAllowed with the reason)", relPath, start.Line, fd.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key, why := range longFuncsAllowed {
		long, ok := seen[key]
		switch {
		case !ok:
			t.Errorf("longFuncsAllowed has %q (%s), which names no function: remove the entry", key, why)
		case !long:
			t.Errorf("longFuncsAllowed has %q (%s), which is %d lines or shorter now: remove the entry", key, why, maxFuncLines)
		}
	}
}
