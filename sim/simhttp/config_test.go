package simhttp

import (
	"math"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/sim"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings, one per expected problem
	}{
		{"zero is valid", Config{}, nil},
		{"defaults are valid", DefaultConfig(), nil},
		{"negatives", Config{Replicas: -1, MaxNumSeqs: -2, NumGPUBlocks: -3},
			[]string{"replicas must not be negative", "max_num_seqs must not be negative", "num_gpu_blocks must not be negative"}},
		{"bad speed", Config{Speed: math.NaN()}, []string{"speed must be"}},
		{"negative speed", Config{Speed: -1}, []string{"speed must be"}},
		{"unknown profile", Config{Profile: "h100-gpt5"}, []string{`profile "h100-gpt5"`}},
		{"port range", Config{BasePort: 65535, Replicas: 2}, []string{"runs past port 65535"}},
		{"port", Config{BasePort: 70000}, []string{"base_port must be"}},
		{"all at once", Config{Replicas: -1, Speed: -1, Profile: "nope"}, []string{"replicas", "speed", "nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %v", tc.want)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
				t.Errorf("%d problems reported, want %d: %v", n, len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	p, err := sim.LookupProfile(DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	if c.Replicas != DefaultReplicas || c.DataParallelSize != 1 || c.Profile != DefaultProfile ||
		c.Model != p.DefaultModelName || !c.DevMode || c.Speed != 1 || c.Host != DefaultHost {
		t.Errorf("DefaultConfig %+v", c)
	}
}

func TestNewServerUsesSharedClock(t *testing.T) {
	clock := simclock.NewScaled(10)
	cfg := DefaultConfig()
	cfg.Clock = clock
	srv, err := NewServer(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Clock() != clock {
		t.Error("server does not use the shared clock")
	}
}
