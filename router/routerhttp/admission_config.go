package routerhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmwarden/warden/internal/yamlpos"
	"github.com/lmwarden/warden/router"
)

// AdmissionYAML is a model's `admission:` field: either the mode alone
// (`admission: fit`, `admission: off`) or a mapping of router.AdmissionConfig's
// fields:
//
//	admission:
//	  mode: fit             # off (default) | fit
//	  fill_target: 1.0      # share of each replica's KV cache (default 1.0)
//	  max_hold: 10m         # longest wait (default 10m; -1s: no limit; other negatives are errors)
//	  max_queue: 1024       # most waiters (default 1024; -1: no limit; other negatives are errors)
//	  on_limit: admit       # admit (default) | refuse (OpenAI 429, Anthropic 529)
//	  keepalive_after: 1m   # a held streaming request gets its 200 and keep-alive events after this (default 1m; -1s: never, holds capped at 4m)
//
// keepalive_after is on the router's clock; keep it under the clients'
// no-byte timeout (Claude Code: 5 minutes), as nothing is sent before it
// (hold.go).
type AdmissionYAML router.AdmissionConfig

var admissionFields = []string{"mode", "fill_target", "max_hold", "max_queue", "on_limit", "keepalive_after"}

// UnmarshalYAML accepts the scalar or the mapping form; unknown keys are errors.
func (a *AdmissionYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		a.Mode = n.Value
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: admission: want a mode (off, fit) or a mapping of %s", n.Line, strings.Join(admissionFields, ", "))}}
	}
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(admissionFields, k) {
			errs = append(errs, fmt.Sprintf("line %d: field %s not found in admission (%s)", n.Content[i].Line, k, yamlpos.Suggest(k, admissionFields)))
		}
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	// yaml.v3 decodes the fields it can around a type error: keep them, so the
	// mapping's other problems are reported in the same run (Config.problems).
	var c router.AdmissionConfig
	err := n.Decode(&c)
	*a = AdmissionYAML(c)
	return err
}

// admissionProblems reports what is wrong with a model's admission field (path
// is the model's), each problem at its own key (models[0].admission.fill_target,
// which Config.where finds on its own line): router.AdmissionConfig.Validate
// has the rules, run on one field at a time so each problem is known by key.
func admissionProblems(path string, a AdmissionYAML, bad func(field, format string, args ...any)) {
	c := router.AdmissionConfig(a)
	found := false
	for _, f := range []struct {
		key  string
		only router.AdmissionConfig
	}{
		{"mode", router.AdmissionConfig{Mode: c.Mode}},
		{"fill_target", router.AdmissionConfig{FillTarget: c.FillTarget}},
		{"max_hold", router.AdmissionConfig{MaxHold: c.MaxHold}},
		{"max_queue", router.AdmissionConfig{MaxQueue: c.MaxQueue}},
		{"on_limit", router.AdmissionConfig{OnLimit: c.OnLimit}},
		{"keepalive_after", router.AdmissionConfig{KeepAliveAfter: c.KeepAliveAfter}},
	} {
		if err := f.only.Validate(); err != nil {
			found = true
			// "admission: fill_target -0.5 is out of range": the path names both.
			msg := strings.TrimPrefix(err.Error(), "admission: ")
			bad(path+".admission."+f.key, "%s", strings.TrimPrefix(msg, f.key+" "))
		}
	}
	if err := c.Validate(); err != nil && !found {
		// A rule across fields: the mapping as a whole.
		bad(path+".admission", "%s", strings.ReplaceAll(err.Error(), "admission: ", ""))
	}
}

// AdmissionReport is router.AdmissionStatus as /status and the admin API
// (GET and PUT /admin/models/{model}/admission) show it: max_hold and
// keepalive_after are Go duration strings ("10m0s", "-1s"), the form the PUT
// and the YAML take, where router.AdmissionConfig's JSON has nanoseconds.
// The other fields are router.AdmissionStatus's.
type AdmissionReport struct {
	router.AdmissionStatus
}

// admissionJSON is AdmissionReport's JSON shape: its two string fields are
// shallower than the embedded durations with the same names, so they replace
// them (encoding/json's rule for embedded fields).
type admissionJSON struct {
	router.AdmissionStatus
	MaxHold        string `json:"max_hold"`
	KeepAliveAfter string `json:"keepalive_after"`
}

// MarshalJSON writes the durations as Go duration strings.
func (a AdmissionReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(admissionJSON{
		AdmissionStatus: a.AdmissionStatus,
		MaxHold:         a.MaxHold.String(),
		KeepAliveAfter:  a.KeepAliveAfter.String(),
	})
}

// UnmarshalJSON reads what MarshalJSON writes (the benchmark reads /status).
func (a *AdmissionReport) UnmarshalJSON(b []byte) error {
	var j admissionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	for _, d := range []struct {
		name, in string
		out      *time.Duration
	}{{"max_hold", j.MaxHold, &j.AdmissionStatus.MaxHold}, {"keepalive_after", j.KeepAliveAfter, &j.AdmissionStatus.KeepAliveAfter}} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			return fmt.Errorf("admission %s: %w", d.name, err)
		}
		*d.out = v
	}
	a.AdmissionStatus = j.AdmissionStatus
	return nil
}

type admissionView struct {
	Model     string          `json:"model"`
	Admission AdmissionReport `json:"admission"`
}

// serveAdmission answers GET and PUT /admin/models/{model}/admission. A PUT
// changes the fields it names and keeps the others; max_hold and
// keepalive_after are Go durations ("10m", "-1s" for no limit / never).
func (rt *Router) serveAdmission(w http.ResponseWriter, r *http.Request, pools []*Pool, all bool) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		var body struct {
			Mode       *string  `json:"mode"`
			FillTarget *float64 `json:"fill_target"`
			MaxHold    *string  `json:"max_hold"`
			MaxQueue   *int     `json:"max_queue"`
			OnLimit    *string  `json:"on_limit"`
			KeepAlive  *string  `json:"keepalive_after"`
		}
		if err := decodeStrict(r.Body, &body); err != nil {
			adminError(w, http.StatusBadRequest, fmt.Errorf(`want {"mode": "off|fit", "fill_target": 1.0, "max_hold": "10m", "max_queue": 1024, "on_limit": "admit|refuse", "keepalive_after": "1m"}: %w`, err))
			return
		}
		var hold, keepAlive time.Duration
		for _, d := range []struct {
			name string
			in   *string
			out  *time.Duration
		}{{"max_hold", body.MaxHold, &hold}, {"keepalive_after", body.KeepAlive, &keepAlive}} {
			if d.in == nil {
				continue
			}
			v, err := time.ParseDuration(*d.in)
			if err != nil {
				adminError(w, http.StatusBadRequest, fmt.Errorf("%s: %w", d.name, err))
				return
			}
			*d.out = v
		}
		for _, p := range pools {
			c := p.Balancer.AdmissionConfig()
			if body.Mode != nil {
				c.Mode = *body.Mode
			}
			if body.FillTarget != nil {
				c.FillTarget = *body.FillTarget
			}
			if body.MaxHold != nil {
				c.MaxHold = hold
			}
			if body.MaxQueue != nil {
				c.MaxQueue = *body.MaxQueue
			}
			if body.OnLimit != nil {
				c.OnLimit = *body.OnLimit
			}
			if body.KeepAlive != nil {
				c.KeepAliveAfter = keepAlive
			}
			if err := p.Balancer.SetAdmission(c); err != nil {
				adminError(w, http.StatusBadRequest, err)
				return
			}
			// As affinity switches are logged (SetAffinity).
			rt.log.Info("admission changed", append([]any{"model", p.Model}, admissionAttrs(c)...)...)
		}
	default:
		adminError(w, http.StatusMethodNotAllowed, fmt.Errorf("%w: %s %s", errMethod, r.Method, r.URL.Path))
		return
	}
	writePerModel(w, pools, all, func(p *Pool) admissionView { return admissionView{p.Model, AdmissionReport{p.Balancer.Admission()}} })
}
