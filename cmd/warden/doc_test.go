package main

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// docCommand is one line of the package doc's command list.
type docCommand struct {
	path   string // "warden trace stats"
	hidden bool   // marked "(hidden)"
}

// packageDocCommands reads the command list of main.go's package doc: the
// indented lines that start with "warden", the command path ending at the
// first run of two spaces.
func packageDocCommands(t *testing.T) []docCommand {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("main.go has no package doc")
	}
	var out []docCommand
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		rest, ok := strings.CutPrefix(line, "\twarden ")
		if !ok {
			continue
		}
		path, desc, _ := strings.Cut(rest, "  ")
		out = append(out, docCommand{path: "warden " + strings.TrimSpace(path), hidden: strings.HasPrefix(strings.TrimSpace(desc), "(hidden)")})
	}
	return out
}

// treeCommands walks the command tree under c, depth first in the order the
// commands were added (cobra sorts Commands() by name; the order is not
// checked).
func treeCommands(c *cobra.Command) []docCommand {
	var out []docCommand
	for _, sub := range c.Commands() {
		out = append(out, docCommand{path: sub.CommandPath(), hidden: sub.Hidden})
		out = append(out, treeCommands(sub)...)
	}
	return out
}

// TestPackageDocListsCommands fails when main.go's package doc and the cobra
// tree of newRootCmd disagree: a command missing from the doc, a listed one
// that does not exist, or a "(hidden)" mark that is not the command's Hidden.
// It also checks the root's --help list (its Long) names every visible
// top-level command and no other.
func TestPackageDocListsCommands(t *testing.T) {
	root := newRootCmd()
	tree := treeCommands(root)
	doc := packageDocCommands(t)
	if len(doc) == 0 {
		t.Fatal("no command list found in main.go's package doc")
	}
	byPath := func(cs []docCommand) map[string]docCommand {
		m := map[string]docCommand{}
		for _, c := range cs {
			if _, dup := m[c.path]; dup {
				t.Errorf("%q listed twice", c.path)
			}
			m[c.path] = c
		}
		return m
	}
	inTree, inDoc := byPath(tree), byPath(doc)
	for p, c := range inTree {
		d, ok := inDoc[p]
		switch {
		case !ok:
			t.Errorf("command %q is missing from main.go's package doc", p)
		case d.hidden != c.hidden:
			t.Errorf("command %q: the package doc marks it hidden=%v, the command has Hidden=%v", p, d.hidden, c.hidden)
		}
	}
	for p := range inDoc {
		if _, ok := inTree[p]; !ok {
			t.Errorf("main.go's package doc lists %q, which is no command", p)
		}
	}

	var visible, inLong []string
	for _, c := range root.Commands() {
		if !c.Hidden {
			visible = append(visible, c.Name())
		}
	}
	for _, line := range strings.Split(root.Long, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "warden "); ok {
			inLong = append(inLong, strings.Fields(rest)[0])
		}
	}
	slices.Sort(visible)
	slices.Sort(inLong)
	if !slices.Equal(visible, inLong) {
		t.Errorf("the root's --help lists %v, the visible commands are %v", inLong, visible)
	}
}
