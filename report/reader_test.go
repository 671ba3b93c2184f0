package report

import (
	"github.com/lmwarden/warden/loadgen"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadSeries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string
		check   func(t *testing.T, got []float64)
	}{
		{
			name: "columns found by name, empty cell is NaN",
			in: "replica,variant,t_s,running,waiting,kv_usage,prefix_queries,prefix_hits,prompt_tokens,generation_tokens,preemptions,extra\n" +
				"r0,off,1.5,2,0,0.25,100,,100,7,0,x\n",
			check: func(t *testing.T, got []float64) {
				if got[0] != 1.5 || got[1] != 2 || got[2] != 100 || !math.IsNaN(got[3]) {
					t.Errorf("got t_s, running, queries, hits = %v", got)
				}
			},
		},
		{name: "missing column", in: "variant,t_s,replica\noff,1,r0\n", wantErr: `missing column "running"`},
		{name: "bad number", in: strings.Join(loadgen.SeriesHeader, ",") + "\noff,1,r0,x,0,0,0,0,0,0,0,0\n", wantErr: "line 2: column running"},
		{name: "empty time", in: strings.Join(loadgen.SeriesHeader, ",") + "\noff,,r0,1,0,0,0,0,0,0,0,0\n", wantErr: "line 2: column t_s"},
		{name: "empty file", in: "", wantErr: "no header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadgen.ReadSeries(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Variant != "off" || got[0].Replica != "r0" || got[0].T != 1500*time.Millisecond {
				t.Fatalf("got %+v", got)
			}
			tc.check(t, []float64{got[0].T.Seconds(), got[0].Running, got[0].PrefixQueries, got[0].PrefixHits})
		})
	}
}

func TestReadTurns(t *testing.T) {
	got, err := loadgen.ReadTurns(strings.NewReader(`{"variant":"on","session":3,"turn":1,"done_ns":5000000000,"status":200}` + "\n\n"))
	if err != nil || len(got) != 1 || got[0].Session != 3 || got[0].Done != 5*time.Second {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := loadgen.ReadTurns(strings.NewReader("{}\n{bad\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v, want one naming line 2", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), ManifestFile) {
		t.Errorf("empty dir: error %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"run_id":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), TurnsFile) {
		t.Errorf("no turns: error %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, TurnsFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := Load(dir)
	if err != nil || run.Series != nil || run.Manifest.RunID != "x" {
		t.Errorf("manifest and empty turns only: %+v, %v", run, err)
	}
}

// sameFloat treats two NaNs as equal.
func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func FuzzReadSeries(f *testing.F) {
	f.Add(strings.Join(loadgen.SeriesHeader, ",") + "\noff,1,r0,1,0,0.5,10,5,10,3,0,8\n")
	f.Add(strings.Join(loadgen.SeriesHeader, ",") + "\noff,1e308,r0,NaN,,,-1,+Inf,0,0,0,\n")
	f.Add("variant\n\"unterminated\n")
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := loadgen.ReadSeries(strings.NewReader(in))
		if err != nil || len(samples) == 0 {
			return
		}
		// Property: what was read writes back and reads again to the same samples.
		again, err := loadgen.ReadSeries(strings.NewReader(string(encodeSeries(t, samples))))
		if err != nil {
			t.Fatalf("re-reading what was read: %v", err)
		}
		if len(again) != len(samples) {
			t.Fatalf("%d samples, then %d", len(samples), len(again))
		}
		for i := range samples {
			a, b := samples[i], again[i]
			if a.Variant != b.Variant || a.Replica != b.Replica || (a.T-b.T).Abs() > time.Microsecond ||
				!sameFloat(a.Running, b.Running) || !sameFloat(a.PrefixHits, b.PrefixHits) {
				t.Fatalf("sample %d: %+v, then %+v", i, a, b)
			}
		}
	})
}

func FuzzReadTurns(f *testing.F) {
	f.Add(`{"variant":"on","session":1,"turn":0,"status":200}` + "\n")
	f.Add("{\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := loadgen.ReadTurns(strings.NewReader(in))
		if err != nil {
			return
		}
		// Property: one Result per non-blank line.
		lines := 0
		for _, l := range strings.Split(in, "\n") {
			if strings.TrimSpace(l) != "" {
				lines++
			}
		}
		if len(got) != lines {
			t.Errorf("%d results from %d non-blank lines", len(got), lines)
		}
	})
}
