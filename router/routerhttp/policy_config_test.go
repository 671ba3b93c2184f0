package routerhttp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lmwarden/warden/router"
)

func TestModelConfigPolicy(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string
		bad        string // substring of the validation error
	}{
		{"default", "", "", ""},
		{"sticky", "    policy: sticky\n", router.PolicySticky, ""},
		{"session-hash", "    policy: session-hash\n", router.PolicySessionHash, ""},
		{"unknown", "    policy: fastest\n", "", "models[0].policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "models:\n  - name: m\n" + tc.yaml + "    replicas:\n      - url: http://127.0.0.1:1\n"
			cfg, err := ParseConfig(strings.NewReader(src))
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.WithDefaults().Validate()
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("validate: %v, want an error naming %s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Models[0].Policy != tc.want {
				t.Fatalf("policy %q, want %q", cfg.Models[0].Policy, tc.want)
			}
		})
	}
}

func TestAdminPolicy(t *testing.T) {
	rt, srv := newAdmin(t, "tok", "a", "b")
	if code, body := adminDo(t, srv, http.MethodGet, "/admin/models/a/policy", "tok", ""); code != 200 || !strings.Contains(body, `"policy": "working-set"`) {
		t.Fatalf("get: %d %s", code, body)
	}
	if code, body := adminDo(t, srv, http.MethodPut, "/admin/models/a/policy", "tok", `{"policy":"sticky"}`); code != 200 || !strings.Contains(body, `"policy": "sticky"`) {
		t.Fatalf("put: %d %s", code, body)
	}
	if code, _ := adminDo(t, srv, http.MethodPut, "/admin/models/a/policy", "tok", `{"policy":"nope"}`); code != http.StatusBadRequest {
		t.Fatalf("unknown policy: %d", code)
	}
	if code, body := adminDo(t, srv, http.MethodPut, "/admin/models/a/policy", "tok", `{}`); code != http.StatusBadRequest || !strings.Contains(body, `\"policy\" is missing`) {
		t.Fatalf("empty body: %d", code)
	}
	if code, _ := adminDo(t, srv, http.MethodDelete, "/admin/models/a/policy", "tok", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("delete: %d", code)
	}
	if code, body := adminDo(t, srv, http.MethodPut, "/admin/models/*/policy", "tok", `{"policy":"session-hash"}`); code != 200 || strings.Count(body, "session-hash") != 2 {
		t.Fatalf("put all: %d %s", code, body)
	}
	for _, ms := range rt.Status().Models {
		if ms.Policy != router.PolicySessionHash {
			t.Fatalf("status %s: policy %q", ms.Model, ms.Policy)
		}
	}
}
