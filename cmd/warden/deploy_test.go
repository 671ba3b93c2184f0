package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/lmwarden/warden/report"
)

// The deployment files under deploy/ (deploy/README.md) run warden with
// command lines of their own; these tests parse each with the warden command's
// own flags, so a renamed or removed flag fails here rather than at a
// deployment. deploy's own tests check the Kubernetes manifests.

const deployDir = "../../deploy"

// parseWarden parses args (after "warden") with the root command's tree: the
// subcommand found, its flags parsed and its positional arguments validated.
func parseWarden(t *testing.T, where string, args []string) *pflag.FlagSet {
	t.Helper()
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Fatalf("%s: warden %q: no such command (%v)", where, args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s: warden %s: %v", where, strings.Join(args, " "), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Fatalf("%s: warden %s: %v", where, strings.Join(args, " "), err)
	}
	return cmd.Flags()
}

// routeShutdownBound parses args (warden route's flags) as `warden route`
// does, with --config read from configFile instead of the path the args
// name (an installed path), and returns the layered config's shutdown bound.
func routeShutdownBound(t *testing.T, where string, args []string, configFile string) time.Duration {
	t.Helper()
	var o routeOpts
	f := pflag.NewFlagSet("route", pflag.ContinueOnError)
	o.bind(f)
	if err := f.Parse(args); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if o.configPath == "" {
		t.Fatalf("%s: warden route without --config", where)
	}
	o.configPath = configFile
	cfg, err := o.config(f)
	if err != nil {
		t.Fatalf("%s: warden route %s (--config %s): %v", where, strings.Join(args, " "), configFile, err)
	}
	return cfg.WithDefaults().ShutdownBound()
}

// readUnit reads a systemd unit file: section -> key -> values, in order (a
// key may repeat). Comments (# ;) and blank lines are skipped; no line
// continuations are used in the project's units.
func readUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: %q: want key=value inside a [section]", path, n, line)
			}
			out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// systemdSpan parses a systemd time span as the project's units write it:
// plain seconds ("30") or Go-style units ("30s", "1m30s", "2min").
func systemdSpan(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(s, " ", ""), "min", "m"))
}

// The systemd unit runs `warden route` with flags the command accepts; it
// stops with SIGTERM (the router's drain), gives the drain at least the
// router's shutdown bound with the config its header installs
// (docs/router.example.yaml) and restarts on failure.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join(deployDir, "systemd", "warden-route.service")
	unit := readUnit(t, path)
	svc := unit["Service"]
	one := func(key string) string {
		t.Helper()
		if len(svc[key]) != 1 {
			t.Fatalf("%s: [Service] %s = %q, want one value", path, key, svc[key])
		}
		return svc[key][0]
	}
	args := strings.Fields(one("ExecStart"))
	if len(args) < 2 || !filepath.IsAbs(args[0]) || filepath.Base(args[0]) != "warden" || args[1] != "route" {
		t.Fatalf("%s: ExecStart %q, want /path/to/warden route ...", path, args)
	}
	parseWarden(t, path, args[1:])
	bound := routeShutdownBound(t, path, args[2:], "../../docs/router.example.yaml")
	stop, err := systemdSpan(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("%s: TimeoutStopSec: %v", path, err)
	}
	if stop < bound {
		t.Errorf("%s: TimeoutStopSec %v < the router's shutdown bound %v (drain_delay + drain_timeout + cut grace): systemd would kill a drain", path, stop, bound)
	}
	for key, want := range map[string]string{"KillSignal": "SIGTERM", "Restart": "on-failure"} {
		if got := one(key); got != want {
			t.Errorf("%s: %s=%s, want %s", path, key, got, want)
		}
	}
	if _, ok := unit["Install"]; !ok {
		t.Errorf("%s: no [Install] section (systemctl enable)", path)
	}
}

// The Kubernetes Deployment's command is `warden route` with flags the
// command accepts, and with the base's router.yaml (mounted at the --config
// path) it layers into a valid config.
func TestKubernetesRouterCommand(t *testing.T) {
	path := filepath.Join(deployDir, "kubernetes", "base", "router-deployment.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name    string   `yaml:"name"`
						Command []string `yaml:"command"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(cs[0].Command) < 2 || cs[0].Command[0] != "warden" {
		t.Fatalf("%s: containers %+v, want one running warden route ...", path, cs)
	}
	parseWarden(t, path, cs[0].Command[1:])
	routeShutdownBound(t, path, cs[0].Command[2:], filepath.Join(deployDir, "kubernetes", "base", "router.yaml"))
}

// shellWords splits one command line of a shell script into words: double
// quotes group, $VAR and ${VAR} expand from vars (an unknown one fails), no
// other shell syntax is understood.
func shellWords(t *testing.T, where, line string, vars map[string]string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case c == '$':
			name := ""
			if strings.HasPrefix(line[i:], "${") {
				end := strings.IndexByte(line[i:], '}')
				if end < 0 {
					t.Fatalf("%s: unclosed ${ in %q", where, line)
				}
				name, i = line[i+2:i+end], i+end
			} else {
				j := i + 1
				for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z' || line[j] >= '0' && line[j] <= '9') {
					j++
				}
				name, i = line[i+1:j], j-1
			}
			v, ok := vars[name]
			if !ok {
				t.Fatalf("%s: $%s in %q: not a variable this test knows", where, name, line)
			}
			cur.WriteString(v)
			inWord = true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'' || c == '\\' || c == '|' || c == ';' || c == '&' || c == '>' || c == '<' || c == '`':
			t.Fatalf("%s: %q: shell syntax %q this test does not read", where, line, c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("%s: unclosed quote in %q", where, line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// The CI example's script runs warden bench and warden compare --junit with
// flags the commands accept (gates that parse, a scenario that exists), and
// the workflow runs that script after building the binary it calls.
func TestCIGateCommands(t *testing.T) {
	script := filepath.Join(deployDir, "ci", "warden-gate.sh")
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"WARDEN":            "bin/warden",
		"WARDEN_SERVER_URL": "http://127.0.0.1:8000",
		"BASELINE":          "results/baseline/live-gate",
		"OUT":               "results/ci-live",
	}
	var subs []string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, `"$WARDEN" `) {
			continue
		}
		where := script + ":" + strconv.Itoa(n+1)
		words := shellWords(t, where, line, vars)
		f := parseWarden(t, where, words[1:])
		subs = append(subs, words[1])
		if sc, err := f.GetString("scenario"); err == nil && sc != "" {
			if _, err := os.Stat(filepath.Join("../..", sc)); err != nil {
				t.Errorf("%s: --scenario %s: %v", where, sc, err)
			}
		}
		if gates, err := f.GetStringArray("fail-on"); err == nil {
			for _, g := range gates {
				if _, err := report.ParseGate(g); err != nil {
					t.Errorf("%s: %v", where, err)
				}
			}
		}
		if words[1] == "compare" {
			if j, _ := f.GetString("junit"); j == "" {
				t.Errorf("%s: compare without --junit", where)
			}
		}
	}
	if !slices.Contains(subs, "bench") || !slices.Contains(subs, "compare") {
		t.Errorf("%s: warden commands %q, want bench and compare", script, subs)
	}

	workflow := filepath.Join(deployDir, "ci", "warden-gate.yml")
	wdata, err := os.ReadFile(workflow)
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Env   map[string]string `yaml:"env"`
			Steps []struct {
				Run string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(wdata, &wf); err != nil {
		t.Fatalf("%s: %v", workflow, err)
	}
	var runs []string
	for _, j := range wf.Jobs {
		if !strings.Contains(j.Env["WARDEN_SERVER_URL"], "vars.WARDEN_SERVER_URL") {
			t.Errorf("%s: WARDEN_SERVER_URL %q, want it from the repository variable vars.WARDEN_SERVER_URL", workflow, j.Env["WARDEN_SERVER_URL"])
		}
		for _, s := range j.Steps {
			runs = append(runs, strings.TrimSpace(s.Run))
		}
	}
	build, gate := slices.Index(runs, "make build"), slices.Index(runs, "deploy/ci/warden-gate.sh")
	if build < 0 || gate < build {
		t.Errorf("%s: run steps %q, want make build (which makes bin/warden) before deploy/ci/warden-gate.sh", workflow, runs)
	}
}
