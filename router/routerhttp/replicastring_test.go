package routerhttp

import (
	"fmt"
	"strings"
	"testing"
)

// A replica may be a plain URL string (before: "cannot unmarshal !!str into
// routerhttp.ReplicaConfig"), alone, in a flow list or mixed with mappings,
// and gets the defaults (name r<i>, no DP ranks, the model's engine). The
// mapping form stays strict: an unknown key is still an error with the keys
// there are, a problem with a URL string names its own line, and a replica
// that is neither a string nor a mapping says what is wanted.
func TestReplicaAsURLString(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader(`models:
  - name: a
    replicas: [http://host:8101, "http://host:8102"]
  - name: b
    engine: llamacpp
    replicas:
      - http://host:8103
      - url: http://host:8104
        name: gpu
        dp_ranks: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range cfg.Models {
		for _, r := range m.Replicas {
			got = append(got, fmt.Sprintf("%s:%s=%s,%d,%q", m.Name, r.Name, r.URL, r.DPRanks, r.Engine))
		}
	}
	want := `a:r0=http://host:8101,0,"" a:r1=http://host:8102,0,"" b:r0=http://host:8103,0,"" b:gpu=http://host:8104,2,""`
	if strings.Join(got, " ") != want {
		t.Errorf("replicas\n %s\nwant\n %s", strings.Join(got, " "), want)
	}

	_, err = ParseConfig(strings.NewReader(`models:
  - name: m
    replicas:
      - http://host:8101
      - host:8102
      - url: http://host:8103
        nmae: x
      - 42
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`line 5: models[0].replicas[1].url: "host:8102" has no scheme`,
		`line 7: models[0].replicas[2].nmae: field nmae not found (did you mean name? have url, name, dp_ranks, engine, drain)`,
		`line 8: models[0].replicas[3].url: "42" is not a replica: want a URL string (http://host:port) or a mapping with url:`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
