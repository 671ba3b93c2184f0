package routerhttp

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lmwarden/warden/router"
)

// AdmissionYAML is a model's `admission:` field: either the mode alone
// (`admission: fit`, `admission: off`) or a mapping of router.AdmissionConfig's
// fields:
//
//	admission:
//	  mode: fit          # off (default) | fit
//	  fill_target: 1.0   # share of each replica's KV cache (default 1.0)
//	  max_hold: 4m       # longest wait (default 4m; -1s: no limit)
//	  max_queue: 1024    # most waiters (default 1024; -1: no limit)
//	  on_limit: admit    # admit (default) | refuse (OpenAI 429, Anthropic 529)
type AdmissionYAML router.AdmissionConfig

var admissionFields = []string{"mode", "fill_target", "max_hold", "max_queue", "on_limit"}

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
			errs = append(errs, fmt.Sprintf("line %d: field %s not found in admission (have %s)", n.Content[i].Line, k, strings.Join(admissionFields, ", ")))
		}
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	var c router.AdmissionConfig
	if err := n.Decode(&c); err != nil {
		return err
	}
	*a = AdmissionYAML(c)
	return nil
}

// admissionProblems reports what is wrong with a model's admission field.
func admissionProblems(path string, a AdmissionYAML, bad func(field, format string, args ...any)) {
	if err := router.AdmissionConfig(a).Validate(); err != nil {
		bad(path+".admission", "%v", err)
	}
}
