package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The figures docs/planning.md shows come from committed directories under
// results/plan, and today's code still gives the reference one: a change
// that moves the plan fails here until the directory and the doc are
// regenerated (docs/planning.md, "Worked example").
const planningDoc = "../../docs/planning.md"

// readPlanCSV reads a committed plan.csv into rows keyed by policy, each a
// map from column name to cell.
func readPlanCSV(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	return readCSVByKey(t, path, "regenerate it: docs/planning.md names the command", 1)
}

// readCSVByKey reads a committed CSV into rows keyed by their first keyCols
// cells joined by "|", each a map from column name to cell; how says how to
// regenerate a missing file.
func readCSVByKey(t *testing.T, path, how string, keyCols int) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (%s)", err, how)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("%s: %d rows, %v", path, len(recs), err)
	}
	out := map[string]map[string]string{}
	for _, r := range recs[1:] {
		row := map[string]string{}
		for i, h := range recs[0] {
			row[h] = r[i]
		}
		out[strings.Join(r[:keyCols], "|")] = row
	}
	return out
}

// docSection returns the text of the docs/planning.md section under heading.
func docSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(planningDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section", planningDoc, heading)
	}
	s = s[i+len(heading)+2:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

func TestPlanningWorkedExampleIsTheCommittedPlan(t *testing.T) {
	const dir = "results/plan/reference"
	sec := docSection(t, "## Worked example: the reference cluster")
	if !strings.Contains(sec, dir) {
		t.Errorf("the worked example does not name %s, the directory its figures come from", dir)
	}
	want := readPlanCSV(t, filepath.Join("../..", dir, "plan.csv"))
	var header []string
	rows := 0
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "│") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "│"), "│")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header == nil {
			header = cells
			continue
		}
		row, ok := want[cells[0]]
		if !ok || len(cells) != len(header) {
			break // the next table (the cliff)
		}
		rows++
		for i, h := range header {
			if row[h] != cells[i] {
				t.Errorf("docs/planning.md %s %q = %q, %s/plan.csv has %q", cells[0], h, cells[i], dir, row[h])
			}
		}
	}
	if rows != len(want) {
		t.Errorf("the worked example's table has %d of the %d policies of %s/plan.csv", rows, len(want), dir)
	}
}

func TestPlanningFleetTableIsTheCommittedPlans(t *testing.T) {
	sec := docSection(t, "## The 7 x RTX 5090 fleet")
	plans := committedPlans(t, sec, map[string]string{"bf16": "results/plan/fleet-bf16", "fp8": "results/plan/fleet-fp8"})
	group := func(first string) string { k, _, _ := strings.Cut(first, " "); return k }
	rows := planTableRows(sec, 8, plans, group, func(kv string, cells []string, row map[string]string) {
		got := []string{cells[2], cells[3], cells[4], cells[5], cells[7]}
		want := []string{row["knee sessions"], "", "", "", row["KV-fit sessions"]}
		if row["knee sessions"] != "none" {
			want[1] = fmt.Sprintf("%s / %s / %s", round(t, row["TTFB p50 s"], 1), round(t, row["TTFB p95 s"], 0), round(t, row["TTFB p99 s"], 0))
			want[2], want[3] = row["goodput"], round(t, row["prefix hits %"], 0)
		}
		for i, name := range []string{"knee", "TTFB p50 / p95 / p99", "goodput", "prefix hits %", "KV-fit"} {
			if got[i] != want[i] {
				t.Errorf("docs/planning.md fleet %s %s %s = %q, results/plan/fleet-%s gives %q", kv, cells[1], name, got[i], kv, want[i])
			}
		}
	})
	if rows != 6 {
		t.Errorf("the fleet table has %d policy rows matched to the committed plans, want 6", rows)
	}
}

// The "Agent sessions" table of docs/planning.md: one row per policy of each
// committed plan over session trees, every cell as the directory's plan.csv
// gives it (session times rounded to whole seconds).
func TestPlanningAgentTableIsTheCommittedPlans(t *testing.T) {
	sec := docSection(t, "## Agent sessions")
	dirs := map[string]string{"results/plan/agent-reference": "results/plan/agent-reference", "results/plan/agent-fleet": "results/plan/agent-fleet"}
	plans := committedPlans(t, sec, dirs)
	group := func(first string) string {
		for d := range dirs {
			if strings.Contains(first, d) {
				return d
			}
		}
		return ""
	}
	rows := planTableRows(sec, 10, plans, group, func(dir string, cells []string, row map[string]string) {
		want := []string{row["knee sessions"], "", "", "", "", "", "", row["first failing"]}
		if row["failed term"] != "" {
			want[7] += " (" + row["failed term"] + ")"
		}
		if row["knee sessions"] != "none" {
			want[1] = row["TTFB p95 s"] + " / " + row["TTFB p99 s"]
			want[2], want[3], want[4] = row["goodput"], row["out tok/min"], row["trees done/h"]
			want[5] = round(t, row["session p50 s"], 0) + " / " + round(t, row["session p95 s"], 0)
			want[6] = row["prefix hits %"]
		}
		for i, name := range []string{"knee", "TTFB p95 / p99", "goodput", "out tok/min", "trees done/h", "session p50 / p95", "prefix hits %", "first failing"} {
			if cells[i+2] != want[i] {
				t.Errorf("docs/planning.md agent table, %s %s %s = %q, %s/plan.csv gives %q", dir, cells[1], name, cells[i+2], dir, want[i])
			}
		}
	})
	if rows != 6 {
		t.Errorf("the agent table has %d policy rows matched to the committed plans, want 6", rows)
	}
}

// round formats the number s with digits decimals.
func round(t *testing.T, s string, digits int) string {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// Today's code gives the committed reference plan byte for byte (the virtual
// world is deterministic; 18 points, a few seconds).
func TestReferencePlanIsToday(t *testing.T) {
	out := filepath.Join(t.TempDir(), "plan")
	if stdout, err := run(t, "plan", "--out", out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	for _, f := range []string{"plan.csv", "points.csv"} {
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../../results/plan/reference", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("results/plan/reference/%s is not what today's code gives: regenerate it with\n  ./bin/warden plan --out results/plan/reference\nand update docs/planning.md's worked example", f)
		}
	}
}

// Today's code gives the committed plans over session trees, for working-set
// (its points and its plan.csv row, byte for byte): a policy's search does
// not depend on the others', and working-set's is the cheap one (about 15 s
// each on 2 cores; admission-fit's high points take minutes).
func TestAgentPlansAreToday(t *testing.T) {
	if testing.Short() {
		t.Skip("short: reruns two plans over session trees (about 30 s)")
	}
	t.Parallel()
	for _, tc := range []struct{ dir, args string }{
		{"agent-reference", "--scenario ../../scenarios/agent-sessions.yaml"},
		{"agent-fleet", "--scenario ../../scenarios/agent-sessions-5090.yaml --profile rtx5090-27b-fp8kv --replicas 7"},
	} {
		out := filepath.Join(t.TempDir(), "plan")
		args := append(append([]string{"plan"}, strings.Fields(tc.args)...), "--policies", "working-set", "--out", out)
		if stdout, err := run(t, args...); err != nil {
			t.Fatalf("%s: %v\n%s", tc.dir, err, stdout)
		}
		for _, f := range []string{"plan.csv", "points.csv"} {
			got := policyLines(t, filepath.Join(out, f), "working-set")
			want := policyLines(t, filepath.Join("../../results/plan", tc.dir, f), "working-set")
			if strings.Count(want, "\n") == 0 {
				t.Errorf("results/plan/%s/%s has no working-set row", tc.dir, f)
			}
			if got != want {
				t.Errorf("results/plan/%s/%s: working-set's rows are not what today's code gives:\n%s\nwant\n%s\nregenerate with the command on the first line of its stdout.txt and update docs/planning.md's \"Agent sessions\"", tc.dir, f, got, want)
			}
		}
	}
}

// policyLines returns the header and the rows of policy of a plan CSV file.
func policyLines(t *testing.T, path, policy string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	out := []string{lines[0]}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, policy+",") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// committedPlans reads the plan.csv of each directory (by group name) and
// fails when sec does not name the directory.
func committedPlans(t *testing.T, sec string, dirs map[string]string) map[string]map[string]map[string]string {
	t.Helper()
	plans := map[string]map[string]map[string]string{}
	for g, dir := range dirs {
		if !strings.Contains(sec, dir) {
			t.Errorf("the section does not name %s", dir)
		}
		plans[g] = readPlanCSV(t, filepath.Join("../..", dir, "plan.csv"))
	}
	return plans
}

// planTableRows calls check for each row of sec's pipe tables with n cells
// whose policy (second cell) is in the plan of its group: the group a first
// cell names (group; "" none), else the last one named. It returns how many.
func planTableRows(sec string, n int, plans map[string]map[string]map[string]string, group func(first string) string,
	check func(g string, cells []string, row map[string]string)) int {
	g, rows := "", 0
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "| ") || len(cells) != n {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if k := group(cells[0]); plans[k] != nil {
			g = k
		}
		row := plans[g][cells[1]]
		if row == nil {
			continue
		}
		rows++
		check(g, cells, row)
	}
	return rows
}
