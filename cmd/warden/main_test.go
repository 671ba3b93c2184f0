package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/report"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/spf13/pflag"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// A virtual smoke run passes `report --check`; the same run with one turn dropped
// from the accounting (docs/bench.md, failure case 5: sessions that vanish) must exit 3.
func TestReportCheckFailsWhenTurnsVanish(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/smoke.yaml", "--out", dir); err != nil {
		t.Fatalf("bench --virtual: %v", err)
	}
	if out, err := run(t, "report", dir, "--check"); err != nil {
		t.Fatalf("report --check on a good run: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	stage := m["variants"].([]any)[0].(map[string]any)["stages"].([]any)[0].(map[string]any)
	stage["turns_started"] = stage["turns_started"].(float64) + 1 // one turn started and never accounted for
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "report", dir, "--check")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitAccounting {
		t.Fatalf("report --check with a vanished turn: err = %v, want exit code 3", err)
	}
	if !strings.Contains(err.Error(), "accounting") {
		t.Errorf("error does not say what is wrong: %v", err)
	}

	// A turn record the manifest does not count (the loop never saw it finish,
	// while the writer recorded it): the two counts must disagree.
	dir2 := filepath.Join(t.TempDir(), "run2")
	if _, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/smoke.yaml", "--out", dir2); err != nil {
		t.Fatalf("bench --virtual: %v", err)
	}
	turns := filepath.Join(dir2, "turns.jsonl")
	tb, err := os.ReadFile(turns)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(tb, []byte("\n"))
	if err := os.WriteFile(turns, append(tb, append(first, '\n')...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "report", dir2, "--check")
	if !errors.As(err, &ee) || ee.code != ExitAccounting || !strings.Contains(err.Error(), "turn records") {
		t.Fatalf("report --check with an extra turn record: err = %v, want exit code 3 naming the turn records", err)
	}
}

// Out-of-range values are refused with a message naming the flag, never replaced
// by defaults.
// A benchmark in which every turn failed (here: a 1 ns request timeout) writes
// its results but exits 3, as `report --check` would, not 0 (fresh-user finding).
func TestBenchExitsNonZeroWhenNoTurnSucceeded(t *testing.T) {
	sc := filepath.Join(t.TempDir(), "timeout.yaml")
	if err := os.WriteFile(sc, []byte("stages: [2]\nstage_duration: 10s\nrequest_timeout: 1ns\nvariants: [\"on\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	_, err := run(t, "bench", "--virtual", "--scenario", sc, "--out", dir)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitAccounting {
		t.Fatalf("bench with every turn failing: err = %v, want exit code 3", err)
	}
	if !strings.Contains(err.Error(), `variant "on" stage 1/1 (2 sessions): no successful turn`) {
		t.Errorf("error does not say which stage failed: %v", err)
	}
	if !strings.Contains(err.Error(), "; first: status 200: timeout") {
		t.Errorf("error does not say why the turns failed: %v", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "results.csv")); statErr != nil {
		t.Errorf("results not written: %v", statErr)
	}
}

func TestBenchRejectsOutOfRangeFlags(t *testing.T) {
	cases := [][]string{
		{"--speed", "0"},
		{"--sim-replicas", "0"},
		{"--max-num-seqs", "-1"},
		{"--dp-ranks", "4"},
		{"--profile", "nope"},
		{"--virtual", "--replicas", "http://127.0.0.1:9"},
		{"--api-key", "k", "--virtual"},
		// Admission settings without the gate on changed nothing, silently
		// (fresh-user finding); with an external router the gate is not ours.
		{"--admission-fill", "0.5", "--admission-max-hold", "1s", "--virtual"},
		{"--admission-on-limit", "refuse", "--admission", "off", "--virtual"},
		{"--router", "http://127.0.0.1:9", "--admin-url", "http://127.0.0.1:9", "--admission", "fit"},
		{"--policy", "sticky", "--router", "http://127.0.0.1:9", "--admin-url", "http://127.0.0.1:9"},
	}
	for _, c := range cases {
		_, err := run(t, append([]string{"bench"}, c...)...)
		if err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Errorf("bench %v: err = %v, want an error naming the flag", c, err)
		}
	}
}

// The admission settings name --admission fit when given without it, and are
// accepted with it.
func TestBenchAdmissionSettingsNeedFit(t *testing.T) {
	_, err := run(t, "bench", "--virtual", "--admission-fill", "0.5", "--admission-max-hold", "1s", "--out", t.TempDir())
	var ee *exitError
	if err == nil || !strings.Contains(err.Error(), "--admission-fill, --admission-max-hold: need --admission fit") || errors.As(err, &ee) {
		t.Errorf("err = %v, want a usage error (exit 1) naming both flags and --admission fit", err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/smoke.yaml", "--admission", "fit", "--admission-fill", "0.5", "--out", dir); err != nil {
		t.Fatalf("with --admission fit: %v", err)
	}
	// The run records its gate (fresh-user finding: it did not).
	m, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"admission": {
    "mode": "fit",
    "fill_target": 0.5,
    "max_hold": "10m0s",
    "max_queue": 1024,
    "on_limit": "admit",
    "keepalive_after": "1m0s"
  }`; !strings.Contains(string(m), want) {
		t.Errorf("manifest.json lacks %s:\n%s", want, m)
	}
	md, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "- admission with affinity on: fit (fill_target 0.5, max_hold 10m0s,"; !strings.Contains(string(md), want) {
		t.Errorf("summary.md lacks %q", want)
	}
}

// Bad stage lengths for the phase-sampled study are refused before any run,
// naming the flag; a repeated length would count one run twice.
func TestStudyRejectsBadStageDurations(t *testing.T) {
	cases := []struct{ args []string }{
		{[]string{"--stage-durations", "0s"}},
		{[]string{"--stage-durations", "abc"}},
		{[]string{"--stage-durations", "150s,150s"}},
		{[]string{"--stage-durations", "2m", "--stage-duration", "3m"}},
	}
	for _, c := range cases {
		args := append([]string{"study", "--setups", "reference", "--arms", "working-set", "--seeds", "1", "--out", ""}, c.args...)
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--stage-durations") {
			t.Errorf("study %v: err = %v, want an error naming --stage-durations", c.args, err)
		}
	}
}

// A stage under one session is refused naming --stages, before any run (the
// scenario's own check would blame the scenario file, once per run).
func TestStagesFlagRefusesEmptyStages(t *testing.T) {
	for _, args := range [][]string{
		{"study", "--setups", "reference,fleet", "--arms", "working-set", "--seeds", "1", "--out", "", "--stages", "0"},
		{"bench", "--virtual", "--stages", "4,0", "--out", t.TempDir()},
	} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--stages") || strings.Contains(err.Error(), "yaml") {
			t.Errorf("%v: err = %v, want one error naming --stages", args, err)
		}
	}
}

// An --out that holds a study is refused before any run unless --force: the
// README's one-setup example used to replace the committed results/study.
func TestStudyRefusesExistingStudyOut(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "study.csv")
	if err := os.WriteFile(csv, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "study", "--setups", "reference", "--arms", "working-set", "--seeds", "1", "--out", dir,
		"--stages", "4", "--stage-duration", "1s", "--no-figures", "--trace-seed", "0")
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), csv) {
		t.Fatalf("err = %v, want a refusal naming %s and --force", err, csv)
	}
	if b, _ := os.ReadFile(csv); string(b) != "kept\n" {
		t.Fatalf("study.csv was rewritten: %q", b)
	}
	if _, err := run(t, "study", "--setups", "reference", "--arms", "working-set", "--seeds", "1", "--out", dir,
		"--stages", "4", "--stage-duration", "1s", "--no-figures", "--trace-seed", "0", "--force"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(csv); string(b) == "kept\n" {
		t.Error("--force did not write the study")
	}
}

// A stage too short for any turn to finish is run, but said so on stderr.
func TestStudyWarnsAboutStagesWithoutTurns(t *testing.T) {
	out, err := run(t, "study", "--setups", "reference", "--arms", "working-set", "--seeds", "1", "--out", "",
		"--stages", "4", "--stage-duration", "1s", "--no-figures", "--trace-seed", "0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "warning: reference/working-set stage 1 (4 sessions)") || !strings.Contains(out, "--stage-duration") {
		t.Errorf("no warning about the empty stage:\n%s", out)
	}
}

// `route --admin-listen -` runs without the admin listener (docs/router.md) and
// stops cleanly with its context; it used to fail at start ("listening on -").
func TestRouteWithoutAdminListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"route", "--replica", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--admin-listen", "-"})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("route --admin-listen -: %v (output %q)", err, out.String())
	}
}

// A scenario with side requests (scenarios/smoke-side.yaml), in virtual time and
// over HTTP through the embedded simulator and router: the runs pass `report
// --check` (side requests are not turns), results.csv counts the side requests,
// and with affinity on every one of them is served by its conversation's replica.
func TestBenchWithSideRequests(t *testing.T) {
	for _, mode := range [][]string{{"--virtual"}, {"--speed", "20"}} {
		t.Run(mode[0], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			args := append([]string{"bench", "--scenario", "../../scenarios/smoke-side.yaml", "--out", dir}, mode...)
			if out, err := run(t, args...); err != nil {
				t.Fatalf("bench %v: %v\n%s", mode, err, out)
			}
			if out, err := run(t, "report", dir, "--check"); err != nil {
				t.Fatalf("report --check: %v\n%s", err, out)
			}
			b, err := os.ReadFile(filepath.Join(dir, "results.csv"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			head := strings.Split(lines[0], ",")
			col := func(name string) int {
				for i, h := range head {
					if h == name {
						return i
					}
				}
				t.Fatalf("results.csv has no column %s", name)
				return -1
			}
			ok, home := col("side_requests_ok"), col("side_on_home_pct")
			for _, l := range lines[1:] {
				f := strings.Split(l, ",")
				if f[ok] == "0" {
					t.Errorf("row %q: no side request done", l)
				}
				if f[0] == "on" && f[home] != "100.0000" {
					t.Errorf("row %q: side requests on their conversation's replica %s %%, want 100", l, f[home])
				}
			}
			sum, err := os.ReadFile(filepath.Join(dir, "summary.md"))
			if err != nil || !strings.Contains(string(sum), "## Side requests") {
				t.Errorf("summary.md lacks the side requests table (%v)", err)
			}
		})
	}
}

// A virtual smoke run (scenarios/smoke.yaml: 2 and 4 sessions, 3 turns) writes
// turns_by_index.csv with a row per variant, stage and turn index whose OK turns
// add up to results.csv's, and summary.md's by-turn table lines them up off -> on;
// `warden report` regenerates the same file from the results directory.
func TestBenchWritesTurnsByIndex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if out, err := run(t, "bench", "--virtual", "--scenario", "../../scenarios/smoke.yaml", "--out", dir); err != nil {
		t.Fatalf("bench --virtual: %v\n%s", err, out)
	}
	readCSV := func(name string) [][]string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		return rows
	}
	byTurn := readCSV(report.TurnsByIndexCSVFile)
	if !slices.Equal(byTurn[0], report.TurnsCSVColumns) {
		t.Fatalf("%s header %q, want %q", report.TurnsByIndexCSVFile, byTurn[0], report.TurnsCSVColumns)
	}
	// Rows: variant, stage, sessions, turn, turns_ok, ...
	var keys []string
	okSum := map[string]int{} // variant/sessions -> OK turns over all indices
	okOf := map[string]string{}
	for _, r := range byTurn[1:] {
		keys = append(keys, r[0]+"/"+r[1]+"/"+r[2]+"/"+r[3])
		n, err := strconv.Atoi(r[4])
		if err != nil || n == 0 {
			t.Errorf("row %q: turns_ok %q, want a positive count", r, r[4])
		}
		okSum[r[0]+"/"+r[2]] += n
		okOf[r[0]+"/"+r[1]+"/"+r[3]] = r[4]
	}
	var want []string
	for _, v := range []string{"off", "on"} {
		for stage, sessions := range []string{"2", "4"} {
			for turn := range 3 {
				want = append(want, fmt.Sprintf("%s/%d/%s/%d", v, stage, sessions, turn))
			}
		}
	}
	if !slices.Equal(keys, want) {
		t.Errorf("%s rows (variant/stage/sessions/turn) %q, want %q", report.TurnsByIndexCSVFile, keys, want)
	}
	results := readCSV("results.csv")
	ok := slices.Index(results[0], "turns_ok")
	for _, r := range results[1:] {
		if k := r[0] + "/" + r[1]; strconv.Itoa(okSum[k]) != r[ok] {
			t.Errorf("%s: %d OK turns by index, results.csv turns_ok %s", k, okSum[k], r[ok])
		}
	}

	md, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## By turn index, off -> on") {
		t.Errorf("summary.md lacks the by-turn section:\n%s", md)
	}
	for stage, sessions := range []string{"2", "4"} {
		for turn := range 3 {
			label := ""
			if turn == 0 {
				label = sessions
			}
			row := fmt.Sprintf("| %s | %d | %s -> %s |", label, turn, okOf[fmt.Sprintf("off/%d/%d", stage, turn)], okOf[fmt.Sprintf("on/%d/%d", stage, turn)])
			if !strings.Contains(string(md), row) {
				t.Errorf("summary.md lacks a row starting %q", row)
			}
		}
	}

	first, err := os.ReadFile(filepath.Join(dir, report.TurnsByIndexCSVFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, report.TurnsByIndexCSVFile)); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "report", dir); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	again, err := os.ReadFile(filepath.Join(dir, report.TurnsByIndexCSVFile))
	if err != nil || !bytes.Equal(again, first) {
		t.Errorf("warden report wrote %s differently (%v):\n%s\nbench wrote:\n%s", report.TurnsByIndexCSVFile, err, again, first)
	}
}

// Every command's --help ends with the exit codes, today's values.
func TestHelpListsExitCodes(t *testing.T) {
	for _, c := range []string{"route", "sim", "bench", "report", "compare", "study", "version"} {
		out, err := run(t, c, "--help")
		if err != nil {
			t.Fatalf("%s --help: %v", c, err)
		}
		for _, want := range []string{"Exit codes:", "\n  0    success", "\n  1    error", "\n  3    results written", "\n  4    a --fail-on gate", "\n  130  a second Ctrl-C"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %q", c, want)
			}
		}
	}
	if ExitOK != 0 || ExitError != 1 || ExitAccounting != 3 || ExitGate != 4 || ExitInterrupt != 130 {
		t.Error("exit code values changed")
	}
}

// warden route layers defaults, then the --config file, then the flags given:
// --affinity, --overflow-threshold and --max-num-seqs with --config override
// every model's file value (they were silently ignored before); not given, the
// file's values stand.
func TestRouteFlagsOverrideConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.yaml")
	file := "models:\n  - name: m\n    affinity: true\n    overflow_threshold: 6\n    max_num_seqs: 48\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (bool, int, int) {
		t.Helper()
		var o routeOpts
		fs := pflag.NewFlagSet("route", pflag.ContinueOnError)
		o.bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config(fs)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		m := cfg.Models[0]
		return *m.Affinity, int(m.OverflowThreshold), m.MaxNumSeqs
	}
	if on, thr, seqs := parse("--config", path); !on || thr != 6 || seqs != 48 {
		t.Errorf("file alone: affinity %v, threshold %d, max_num_seqs %d; want the file's true, 6, 48", on, thr, seqs)
	}
	if on, thr, seqs := parse("--config", path, "--affinity", "off", "--overflow-threshold", "3", "--max-num-seqs", "64"); on || thr != 3 || seqs != 64 {
		t.Errorf("flags over the file: affinity %v, threshold %d, max_num_seqs %d; want false, 3, 64", on, thr, seqs)
	}
	if _, thr, seqs := parse("--config", path, "--overflow-threshold", "0"); thr != 0 || seqs != 48 {
		t.Errorf("--overflow-threshold 0 over the file: threshold %d, max_num_seqs %d; want 0 (auto), 48", thr, seqs)
	}
	// max_num_seqs not given stays 0 (not set): the router's default 256, or
	// a llama.cpp model's slots learned from /props.
	if on, thr, seqs := parse("--replica", "http://127.0.0.1:9"); !on || thr != 0 || seqs != 0 {
		t.Errorf("--replica defaults: affinity %v, threshold %d, max_num_seqs %d; want true, 0, 0 (not set)", on, thr, seqs)
	}
	// "auto" as README says (the flag took only numbers).
	if _, thr, _ := parse("--config", path, "--overflow-threshold", "auto"); thr != 0 {
		t.Errorf("--overflow-threshold auto over the file: threshold %d, want 0 (auto)", thr)
	}
}

// A server URL written as an OpenAI base_url (…/v1) stops
// warden bench and warden route at the flags, naming the flag and the root to
// give; before, bench failed at the pre-flight with "GET /v1/models: http 404"
// and route started and answered 503.
func TestV1SuffixRefusedAtTheFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--replicas", "http://127.0.0.1:1/v1", "--out", filepath.Join(dir, "a")},
			`--replicas: parsing replica "http://127.0.0.1:1/v1": url "http://127.0.0.1:1/v1" ends in /v1: give the server's root, http://127.0.0.1:1 (`},
		{[]string{"bench", "--router", "http://127.0.0.1:1,http://127.0.0.1:2/v1/", "--out", filepath.Join(dir, "b")},
			`--router: "http://127.0.0.1:2/v1/" ends in /v1: give the server's root, http://127.0.0.1:2 (`},
		{[]string{"route", "--replica", "http://127.0.0.1:1/v1"},
			`ends in /v1: give the server's root, http://127.0.0.1:1 (`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(tc.args)
		err := root.ExecuteContext(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want it to contain %q\n%s", tc.args, err, tc.want, out.String())
		}
		if _, statErr := os.Stat(filepath.Join(dir, "a", "manifest.json")); statErr == nil {
			t.Errorf("%v wrote a results directory", tc.args)
		}
	}
}

// A server that answers 404 everywhere: the pre-flight error names the server
// once ("pre-flight URL: pre-flight URL: ..." before).
func TestPreflightErrorNamesServerOnce(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := run(t, "bench", "--replicas", srv.URL, "--out", filepath.Join(t.TempDir(), "run"))
	want := "pre-flight " + srv.URL + ": "
	if err == nil || strings.Count(err.Error(), want) != 1 || !strings.Contains(err.Error(), "GET /v1/models: http 404") {
		t.Fatalf("err %v: want %q once and the failed request", err, want)
	}
}

// --access-log: a path that cannot be opened is an error naming the flag; an
// existing file is appended to, not replaced.
func TestAccessLogFlagOpensForAppend(t *testing.T) {
	cfg, err := routerhttp.ConfigForURLs([]string{"http://127.0.0.1:9"}, true)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := routerhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := startAccessLog(rt, filepath.Join(dir, "no", "such", "dir", "a.jsonl"), io.Discard); err == nil || !strings.Contains(err.Error(), "--access-log: ") {
		t.Errorf("unopenable path: err %v", err)
	}
	path := filepath.Join(dir, "a.jsonl")
	if err := os.WriteFile(path, []byte("earlier line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop, err := startAccessLog(rt, path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if b, _ := os.ReadFile(path); string(b) != "earlier line\n" {
		t.Errorf("the file was not kept: %q", b)
	}
}

// A two-request recording replays and passes: its trailing window, after the
// last request, has nothing sent, done or in flight, which is no failure (it
// exited 3, "no successful turn (0 failed)"); a closed-loop stage without a
// successful turn still fails the check (TestReportCheckFailsWhenTurnsVanish).
func TestTwoRequestTraceReplays(t *testing.T) {
	tmp := t.TempDir()
	tr := filepath.Join(tmp, "two.jsonl")
	body := `{"timestamp":0,"input_length":600,"output_length":20,"hash_ids":[1,2],"session_id":"a"}
{"timestamp":3000,"input_length":700,"output_length":20,"hash_ids":[1,2],"session_id":"a"}
`
	if err := os.WriteFile(tr, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "run")
	if out, err := run(t, "bench", "--virtual", "--trace", tr, "--trace-mode", "session", "--out", dir); err != nil {
		t.Fatalf("bench --virtual --trace: %v\n%s", err, out)
	}
	if out, err := run(t, "report", dir, "--check"); err != nil {
		t.Fatalf("report --check: %v\n%s", err, out)
	}
}
