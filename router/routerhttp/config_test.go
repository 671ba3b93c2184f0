package routerhttp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader(`
listen: ":9000"
admin_listen: "127.0.0.1:9001"
admin_token: tok
body_limit_bytes: 1048576
scrape_interval: 500ms
health_interval: 2s
session_ttl: 30m
max_sessions: 1000
session_headers: [X-Session-ID, X-Conversation]
use_openai_user: true
models:
  - name: qwen3-4b
    max_num_seqs: 32
    overflow_threshold: auto
    replicas:
      - url: http://10.0.0.1:8000
        dp_ranks: 4
        name: box1
  - name: other
    affinity: false
    overflow_threshold: 6
    replicas:
      - url: http://10.0.0.2:8000
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.ScrapeInterval != 500*time.Millisecond || cfg.SessionTTL != 30*time.Minute || cfg.BodyLimit != 1<<20 {
		t.Fatalf("%+v", cfg)
	}
	m0, m1 := cfg.Models[0], cfg.Models[1]
	if !*m0.Affinity || m0.OverflowThreshold != 0 || m0.Replicas[0].DPRanks != 4 || m0.Replicas[0].Name != "box1" {
		t.Fatalf("%+v", m0)
	}
	if *m1.Affinity || m1.OverflowThreshold != 6 || m1.MaxNumSeqs != 0 || m1.Replicas[0].Name != "r0" {
		t.Fatalf("%+v", m1)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range rt.Pools()[0].Upstreams {
		names = append(names, u.Name)
	}
	if strings.Join(names, ",") != "box1/rank0,box1/rank1,box1/rank2,box1/rank3" {
		t.Fatalf("names %v", names)
	}
	if n, _ := rt.Pools()[0].Balancer.OverflowThreshold(); n != 8 {
		t.Fatalf("auto threshold at max_num_seqs 32 = %d, want 8", n)
	}
}

func TestParseConfigRejectsUnknownFields(t *testing.T) {
	_, err := ParseConfig(strings.NewReader("listen: x\nlisten_addr: y\n"))
	if err == nil || !strings.Contains(err.Error(), "listen_addr") {
		t.Fatalf("err = %v", err)
	}
	// A bad threshold is reported with the file's other problems, not alone.
	_, err = ParseConfig(strings.NewReader("models:\n  - name: m\n    overflow_threshold: lots\n    afinity: true\n"))
	if err == nil || !strings.Contains(err.Error(), `line 3: models[0].overflow_threshold "lots"`) || !strings.Contains(err.Error(), "line 4: models[0].afinity: field afinity not found") {
		t.Fatalf("err = %v", err)
	}
	// Every decoding problem at once, with its line, without Go type names.
	_, err = ParseConfig(strings.NewReader("sesion_ttl: 1h\nscrape_interval: 5\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"line 1: field sesion_ttl not found", "line 2:", "Go duration strings"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "router.Config") {
		t.Errorf("error %q names a Go type", err)
	}
	// From a file, every message starts with file:line (validation ones too).
	path := filepath.Join(t.TempDir(), "router.yaml")
	if err := os.WriteFile(path, []byte("health_interval: 5 seconds\nmodels:\n  - name: m\n    replicas:\n      - url: ftp://h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadConfig(path)
	for _, want := range []string{path + ":1: health_interval: cannot unmarshal", path + ":5: models[0].replicas[0].url:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	// A file that decodes: Validate (as warden route calls it) names file:line.
	if err := os.WriteFile(path, []byte("models:\n  - name: m\n    policy: stickyy\n    replicas: [{url: \"http://h\"}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), path+":3: models[0].policy:") {
		t.Errorf("validation error %v lacks %q", err, path+":3: models[0].policy:")
	}
	// Decoding and validation problems in one pass (fresh-user finding: the
	// validation ones used to appear only once the decoding ones were fixed).
	_, err = ParseConfig(strings.NewReader("health_interval: 5 seconds\nmodels:\n  - name: m\n    replicas: [{url: \"ftp://h\"}]\n"))
	for _, want := range []string{"line 1:", "Go duration strings", "models[0].replicas[0].url:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// A name that is also a DP rank's name (<name>/rank<k>) or a default name
// (r<i>) is a clash: two replicas with one name made /metrics answer 500
// (fresh-user finding).
func TestValidateReplicaNamesAsTheRouterUsesThem(t *testing.T) {
	for _, tc := range []struct {
		replicas []ReplicaConfig
		want     string // "" = valid
	}{
		{[]ReplicaConfig{{URL: "http://a", Name: "x", DPRanks: 2}, {URL: "http://b", Name: "x/rank0"}}, `replicas[1].name: "x/rank0" already used by replicas[0]`},
		{[]ReplicaConfig{{URL: "http://a", Name: "x/rank1"}, {URL: "http://b", Name: "x", DPRanks: 2}}, `replicas[1].name: "x/rank1" already used by replicas[0]`},
		{[]ReplicaConfig{{URL: "http://a"}, {URL: "http://b", Name: "r0"}}, `replicas[1].name: "r0" already used by replicas[0]`},
		{[]ReplicaConfig{{URL: "http://a", Name: "x", DPRanks: 2}, {URL: "http://b", Name: "x/rank2"}}, ""},
		{[]ReplicaConfig{{URL: "http://a", DPRanks: 2}, {URL: "http://b", DPRanks: 2}}, ""},
	} {
		cfg := Config{Models: []ModelConfig{{Name: "m", Replicas: tc.replicas}}}
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.replicas, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want %q", tc.replicas, err, tc.want)
		}
	}
}

func TestValidateReportsEveryProblemWithItsPath(t *testing.T) {
	cfg := Config{
		BodyLimit:      -1,
		SessionHeaders: []string{"bad header"},
		Models: []ModelConfig{
			{Name: "m", Replicas: []ReplicaConfig{{URL: "ftp://x"}, {URL: "http://h", DPRanks: -1}}},
			{Name: "m"},
			{Replicas: []ReplicaConfig{{URL: "http://a", Name: "x"}, {URL: "http://b", Name: "x"}}},
		},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"body_limit_bytes:", "session_headers[0]:", "models[0].replicas[0].url:",
		"models[0].replicas[1].dp_ranks:", "models[1].name:", "models[1].replicas:",
		"models[2].name:", "models[2].replicas[1].name:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "models:") {
		t.Fatalf("empty config: %v", err)
	}
}

func TestParseReplicaSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    ReplicaConfig
		wantErr bool
	}{
		{"http://h:8000", ReplicaConfig{URL: "http://h:8000"}, false},
		{"gpu0=http://h:8000", ReplicaConfig{URL: "http://h:8000", Name: "gpu0"}, false},
		{"http://h:8000,dp_ranks=4", ReplicaConfig{URL: "http://h:8000", DPRanks: 4}, false},
		{"g=http://h:8000,dp_ranks=2", ReplicaConfig{URL: "http://h:8000", Name: "g", DPRanks: 2}, false},
		{"h:8000", ReplicaConfig{}, true},
		{"http://h,dp_ranks=x", ReplicaConfig{}, true},
		{"http://h,ranks=2", ReplicaConfig{}, true},
	}
	// A URL without a scheme says so and how to write it (fresh-user finding:
	// "scheme must be http or https", or Go's parser error for 127.0.0.1:8000).
	for _, in := range []string{"gpu-host:8000", "127.0.0.1:8000"} {
		if _, err := ParseReplicaSpec(in); err == nil || !strings.Contains(err.Error(), "has no scheme: write http://"+in) {
			t.Errorf("%s: %v", in, err)
		}
	}
	// An OpenAI-style base_url names the root to give instead;
	// a deeper path that merely contains v1 is a server's root behind a proxy.
	if _, err := ParseReplicaSpec("gpu0=http://h:8101/v1"); err == nil || !strings.Contains(err.Error(), `"http://h:8101/v1" ends in /v1: give the server's root, http://h:8101 (`) {
		t.Errorf("/v1 suffix: %v", err)
	}
	if _, err := ParseReplicaSpec("http://h/gpu/v1x"); err != nil {
		t.Errorf("a path ending in v1x is not /v1: %v", err)
	}
	// A name with a slash is not read as part of a URL (fresh-user finding:
	// the error said the scheme was wrong).
	if _, err := ParseReplicaSpec("x/rank0=http://h:8000"); err == nil || !strings.Contains(err.Error(), `name "x/rank0" may not contain '/'`) {
		t.Errorf("name with a slash: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseReplicaSpec(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// overflow_threshold takes "auto", 0 (auto, as the CLI's --overflow-threshold 0)
// or a positive count; a negative one is refused with its line.
func TestOverflowThresholdZeroIsAuto(t *testing.T) {
	for _, v := range []string{"auto", "0"} {
		cfg, err := ParseConfig(strings.NewReader("models:\n  - name: m\n    overflow_threshold: " + v + "\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"))
		if err != nil {
			t.Fatalf("overflow_threshold %s: %v", v, err)
		}
		if got := cfg.Models[0].OverflowThreshold; got != 0 {
			t.Errorf("overflow_threshold %s parsed as %d, want 0 (auto)", v, got)
		}
	}
	_, err := ParseConfig(strings.NewReader("models:\n  - name: m\n    overflow_threshold: -3\n"))
	if err == nil || !strings.Contains(err.Error(), `line 3: models[0].overflow_threshold "-3"`) {
		t.Fatalf("negative threshold: err = %v", err)
	}
}

// The fresh-user findings on config error positions (docs/router.md section 2:
// "every problem with its file, line and path"), from small files.
func TestConfigErrorsNameFileLineAndKey(t *testing.T) {
	dir := t.TempDir()
	load := func(t *testing.T, name, yaml string) error {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(path)
		if err != nil {
			return err
		}
		return cfg.WithDefaults().Validate() // as warden route does
	}
	const replicas = "    replicas:\n      - url: http://127.0.0.1:1\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // each a whole line of the error
		not        string   // must not appear ("": no check)
	}{
		// A syntax error names the file (it said only "yaml: line 2: ...") and
		// the line the block sequence starts on (yaml.v3 says 1: yamlpos.SyntaxLine).
		{"syntax.yaml", "models:\n  - name: m\n   bad: x\n",
			[]string{"router config: syntax.yaml:2: did not find expected '-' indicator"}, "yaml: line"},
		// A bad admission field at its own line (10), not the admission: line
		// (8), and "admission:" once.
		{"fill.yaml", "listen: \":18080\"\nadmin_listen: \"127.0.0.1:18081\"\nmodels:\n  - name: m\n" + replicas + "    policy: working-set\n    admission:\n      mode: fit\n      fill_target: -0.5\n",
			[]string{"fill.yaml:10: models[0].admission.fill_target: -0.5 is out of range (0 default, else (0, 4])"}, "admission: admission"},
		// Several admission problems: file:line on every one, in file order.
		{"adm.yaml", "models:\n  - name: m\n" + replicas + "    admission:\n      mode: fits\n      on_limit: drop\n      fill_target: 9\n",
			[]string{
				`adm.yaml:6: models[0].admission.mode: "fits" is unknown (have off, fit)`,
				`adm.yaml:7: models[0].admission.on_limit: "drop" is unknown (have admit, refuse)`,
				`adm.yaml:8: models[0].admission.fill_target: 9 is out of range (0 default, else (0, 4])`,
			}, ""},
		{"sub.yaml", "split_subagents: true\nfollow_subagents: true\nmodels:\n  - name: m\n" + replicas,
			[]string{"sub.yaml:2: follow_subagents: and split_subagents are both set: choose one (follow_subagents splits the key too)"}, ""},
		// The scalar form: the mode is the admission line.
		{"scalar.yaml", "models:\n  - name: m\n" + replicas + "    admission: fits\n",
			[]string{`scalar.yaml:5: models[0].admission.mode: "fits" is unknown (have off, fit)`}, ""},
		// A misspelt key lists the valid ones.
		{"misspelt.yaml", "models:\n  - name: m\n    admision: fit\n" + replicas,
			[]string{"misspelt.yaml:3: models[0].admision: field admision not found (did you mean admission? have name, replicas, affinity, overflow_threshold, max_num_seqs, policy, keyless, engine, admission)"}, ""},
		{"admkey.yaml", "models:\n  - name: m\n    admission:\n      keepalive_afer: 2s\n" + replicas,
			[]string{"admkey.yaml:4: models[0].admission.keepalive_afer: field keepalive_afer not found in admission (did you mean keepalive_after? have mode, "}, ""},
		{"top.yaml", "listn: x\nmodels:\n  - name: m\n" + replicas,
			[]string{"top.yaml:1: field listn not found (did you mean listen? have listen, admin_listen, admin_token, "}, ""},
		// Decoding and validation problems together, in file order.
		{"multi.yaml", "models:\n  - name: m\n    max_num_seqs: -1\n    overflow_threshold: lots\n    replicas:\n      - url: ftp://x\n        dp_rank: 2\n",
			[]string{
				"multi.yaml:3: models[0].max_num_seqs: -1 is negative",
				`multi.yaml:4: models[0].overflow_threshold "lots": want "auto", 0 (auto) or a positive integer`,
				`multi.yaml:6: models[0].replicas[0].url: "ftp://x": scheme must be http or https`,
				"multi.yaml:7: models[0].replicas[0].dp_rank: field dp_rank not found (did you mean dp_ranks? have url, name, dp_ranks, engine, drain)",
			}, ""},
		// A replica written as an OpenAI base_url (…/v1)
		// started and answered 503 "no healthy replica" (/v1/health 404).
		{"v1.yaml", "models:\n  - name: m\n    replicas:\n      - url: http://127.0.0.1:8101/v1\n      - url: http://h:8000/v1/\n",
			[]string{
				`v1.yaml:4: models[0].replicas[0].url: "http://127.0.0.1:8101/v1" ends in /v1: give the server's root, http://127.0.0.1:8101 (`,
				`v1.yaml:5: models[0].replicas[1].url: "http://h:8000/v1/" ends in /v1: give the server's root, http://h:8000 (`,
			}, ""},
		// Regression: a decode error in the admission mapping (max_hold: 10) hid
		// the mapping's other problems.
		{"hold.yaml", "models:\n  - name: m\n" + replicas + "    admission:\n      mode: fit\n      max_hold: 10\n      fill_target: -0.5\n      on_limit: bogus\n",
			[]string{
				`hold.yaml:7: models[0].admission.max_hold: cannot unmarshal !!int ` + "`10`" + ` into time.Duration`,
				`hold.yaml:8: models[0].admission.fill_target: -0.5 is out of range (0 default, else (0, 4])`,
				`hold.yaml:9: models[0].admission.on_limit: "bogus" is unknown (have admit, refuse)`,
			}, ""},
		// Regression: negative limits other than -1 were taken as "no limit".
		{"neg.yaml", "models:\n  - name: m\n" + replicas + "    admission:\n      mode: fit\n      max_queue: -5\n      max_hold: -2s\n      keepalive_after: -3s\n",
			[]string{
				`neg.yaml:7: models[0].admission.max_queue: -5 is negative (-1 means no limit)`,
				`neg.yaml:8: models[0].admission.max_hold: -2s is negative (-1s means no limit)`,
				`neg.yaml:9: models[0].admission.keepalive_after: -3s is negative (-1s means never)`,
			}, ""},
		// Regression: a duplicate key added "models: at least one model is
		// required" for a file that has one; the file's other problems stay.
		{"dup.yaml", "models:\n  - name: m\n    name: n\n    max_num_seqs: -2\n" + replicas,
			[]string{
				`dup.yaml:3: models[0].name: mapping key "name" already defined at line 2`,
				`dup.yaml:4: models[0].max_num_seqs: -2 is negative`,
			}, "at least one model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := load(t, tc.name, tc.yaml)
			if err == nil {
				t.Fatal("no error")
			}
			msg := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			lines := strings.Split(strings.TrimPrefix(msg, "router config: "), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("%d lines, want %d:\n%s", len(lines), len(tc.want), msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			for i, l := range lines {
				if i < len(tc.want) && !strings.Contains(l, strings.TrimPrefix(tc.want[i], "router config: ")) {
					t.Errorf("line %d %q, want %q (file order)", i+1, l, tc.want[i])
				}
				if !strings.HasPrefix(l, tc.name+":") {
					t.Errorf("line %d %q does not start with %s:LINE:", i+1, l, tc.name)
				}
			}
			if tc.not != "" && strings.Contains(msg, tc.not) {
				t.Errorf("error has %q:\n%s", tc.not, msg)
			}
		})
	}
}

// -1 (and -1s for durations) stays "no limit" in a config file.
func TestNoLimitValuesAccepted(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader("models:\n  - name: m\n    replicas:\n      - url: http://127.0.0.1:1\n    admission:\n      mode: fit\n      max_queue: -1\n      max_hold: -1s\n      keepalive_after: -1s\n"))
	if err == nil {
		err = cfg.WithDefaults().Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
}
