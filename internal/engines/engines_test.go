package engines

import (
	"os/exec"
	"strings"
	"testing"
)

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"": KindUnknown, "auto": KindUnknown, " vLLM ": KindVLLM,
		"sglang": KindSGLang, "llama.cpp": KindLlamaCpp, "llamacpp": KindLlamaCpp, "llama-server": KindLlamaCpp} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseKind("tgi"); err == nil || !strings.Contains(err.Error(), `"tgi"`) {
		t.Errorf("ParseKind(tgi) error = %v", err)
	}
}

// Every capability lists every figure once, in order; no engine names another
// engine's series (a llama.cpp run must never show a vllm: source).
func TestCapabilitiesAreComplete(t *testing.T) {
	for _, k := range append([]Kind{KindUnknown}, Kinds...) {
		c := CapabilityOf(k)
		if c.Kind != k || len(c.Figures) != len(Figures) {
			t.Fatalf("%s: kind %q, %d figures, want %d", k, c.Kind, len(c.Figures), len(Figures))
		}
		for i, f := range Figures {
			s := c.Figures[i]
			if s.Figure != f {
				t.Errorf("%s: figure %d is %q, want %q", k, i, s.Figure, f)
			}
			if s.Source == "" && s.Note == "" {
				t.Errorf("%s: %s is absent without a note saying what to do", k, f)
			}
			for _, other := range Kinds {
				if other != k && strings.Contains(s.Source, string(other)+":") {
					t.Errorf("%s: %s source %q names a %s series", k, f, s.Source, other)
				}
			}
		}
		if c.HitRate == "" || (c.ResetPrefixCache.Path == "" && c.ResetPrefixCache.Note == "") {
			t.Errorf("%s: hit rate %q, reset %+v", k, c.HitRate, c.ResetPrefixCache)
		}
		if !strings.Contains(c.Table(), string(k)) {
			t.Errorf("%s: table %q", k, c.Table())
		}
	}
	if _, ok := CapabilityOf(KindLlamaCpp).Source(FigPrefixHits); ok {
		t.Error("llama.cpp claims a prefix-hit series")
	}
	if s, ok := CapabilityOf(KindSGLang).Source(FigPrefixHits); !ok || s.Source != SGLangCachedTokens {
		t.Errorf("sglang prefix hits %+v", s)
	}
	if got := CapabilityOf(KindLlamaCpp).Lacks(); len(got) == 0 || got[0] != FigPrefixQueries {
		t.Errorf("llama.cpp lacks %v", got)
	}
}

func TestValue(t *testing.T) {
	var v Value
	if v.Has() || v.String() != "absent" {
		t.Errorf("zero Value: has %v, %q", v.Has(), v.String())
	}
	if x, ok := Of(0, "s").Get(); !ok || x != 0 {
		t.Error("a reported zero must read as reported")
	}
}

// engines is a pure package: the router core and the report may use it.
func TestLinksNoHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/lmwarden/warden/internal/engines").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if d == "net/http" {
			t.Fatal("internal/engines depends on net/http")
		}
	}
}
