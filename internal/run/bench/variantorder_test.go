package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// In virtual time every variant starts from a fresh router (Balancer: tie-break
// RNG, learned estimates) and fresh engines (caches), so the order of the
// variants does not matter: on,off and off,on give byte-identical per-variant
// rows of results.csv and turns_by_index.csv, and the same turns once their
// instants are taken from the variant's start. The old code shared one
// Balancer and the engines across variants (on/16 TTFB p50 3.02 s after off,
// 1.71 s alone, in the reference).
func TestVirtualVariantOrderDoesNotMatter(t *testing.T) {
	t.Parallel()
	sc := loadgen.DefaultScenario()
	sc.Stages, sc.StageDuration = []int{4, 16}, 2*time.Minute
	dirs := map[string]string{}
	for _, order := range [][]string{{"on", "off"}, {"off", "on"}} {
		s := *sc
		s.Variants = order
		dir := filepath.Join(t.TempDir(), strings.Join(order, "-"))
		if _, err := Run(context.Background(), Options{Scenario: &s, Virtual: true, OutDir: dir, RunID: "order"}); err != nil {
			t.Fatalf("variants %v: %v", order, err)
		}
		dirs[strings.Join(order, ",")] = dir
	}
	a, b := dirs["on,off"], dirs["off,on"]
	for _, f := range []string{report.ResultsCSVFile, report.TurnsByIndexCSVFile} {
		for _, v := range []string{"on", "off"} {
			ra, rb := variantRows(t, filepath.Join(a, f), v), variantRows(t, filepath.Join(b, f), v)
			if len(ra) == 0 || !bytes.Equal(bytes.Join(ra, nil), bytes.Join(rb, nil)) {
				t.Errorf("%s, variant %s: rows differ between on,off and off,on:\n%s\n---\n%s", f, v, bytes.Join(ra, nil), bytes.Join(rb, nil))
			}
		}
	}
	ta, tb := rebasedTurns(t, a), rebasedTurns(t, b)
	for _, v := range []string{"on", "off"} {
		if len(ta[v]) == 0 || !reflect.DeepEqual(ta[v], tb[v]) {
			t.Errorf("turns.jsonl, variant %s: %d and %d turns, not the same once rebased to the variant's start", v, len(ta[v]), len(tb[v]))
		}
	}
}

// variantRows returns the lines of a report CSV whose first cell is variant.
func variantRows(t *testing.T, path, variant string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(variant+",")) {
			out = append(out, line)
		}
	}
	return out
}

// rebasedTurns reads a run's turns by variant, every instant taken from the
// variant's start.
func rebasedTurns(t *testing.T, dir string) map[string][]loadgen.Result {
	t.Helper()
	m, results, _, err := loadgen.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := map[string]time.Duration{}
	for _, v := range m.Variants {
		start[v.Name] = v.Stages[0].Start
	}
	out := map[string][]loadgen.Result{}
	for _, r := range results {
		d := start[r.Variant]
		for _, p := range []*time.Duration{&r.Intended, &r.Sent, &r.Headers, &r.FirstEvent, &r.FirstToken, &r.LastToken, &r.Done} {
			if *p != 0 {
				*p -= d
			}
		}
		out[r.Variant] = append(out[r.Variant], r)
	}
	return out
}
