package main

import (
	"os"
	"strings"
	"testing"
)

// agentsTable is the committed agent-session comparison: the means
// scripts/agent_table.py computed from the runs under results/agents/.
const agentsTable = "../../results/agents/table.csv"

// The agent-session tables in README.md and docs/routing.md come from
// results/agents/table.csv: every row of a table keyed by workload, fleet and
// variant must be a row of it, and every cell under one of its columns equal
// to it (thousands separators aside). Editing a number by hand fails here.
func TestAgentTablesAreTheCommittedRuns(t *testing.T) {
	want := readCSVByKey(t, agentsTable, "scripts/agent-study.sh, then scripts/agent_table.py --csv="+agentsTable, 3)
	for _, doc := range []string{"../../README.md", "../../docs/routing.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, tab := range markdownTables(string(b)) {
			h := tab[0]
			if len(h) < 3 || h[0] != "workload" || h[1] != "fleet" || h[2] != "variant" {
				continue
			}
			for _, row := range tab[1:] {
				w, ok := want[row[0]+"|"+row[1]+"|"+row[2]]
				if !ok {
					t.Errorf("%s: row %v is not in %s", doc, row[:3], agentsTable)
					continue
				}
				for i := 3; i < len(row) && i < len(h); i++ {
					if v, ok := w[h[i]]; ok && strings.ReplaceAll(row[i], ",", "") != v {
						t.Errorf("%s: %v %s = %s, %s has %s", doc, row[:3], h[i], row[i], agentsTable, v)
					}
				}
				checked++
			}
		}
		if checked == 0 {
			t.Errorf("%s: no agent-session table (header workload | fleet | variant) found", doc)
		}
	}
}

// markdownTables returns the pipe tables of a markdown text, each as rows of
// trimmed cells, its header first (the separator row left out).
func markdownTables(s string) [][][]string {
	var out [][][]string
	var cur [][]string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if len(cur) > 0 {
				out, cur = append(out, cur), nil
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) > 0 && strings.Trim(cells[0], "-: ") == "" {
			continue // the separator
		}
		cur = append(cur, cells)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
