package proxybench

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needBinary returns name's path; without it the test skips, except under
// CI=true, where it fails (the project's rule for real components).
func needBinary(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (CI=true: apt-get install nginx haproxy): %v", name, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
}

// A short run through real nginx and HAProxy processes: every stream comes
// back whole, the CSV has a row per phase and a pooled row per target and
// level, the counts add up, the configs are kept, and the summary has a table
// per level.
func TestRunNginxHAProxy(t *testing.T) {
	needBinary(t, "nginx")
	needBinary(t, "haproxy")
	out := t.TempDir()
	var log bytes.Buffer
	o := Options{Out: out, Levels: []int{2, 3}, Rounds: 2, PerSlot: 2, Events: 4, Interval: 5 * time.Millisecond,
		Replicas: 2, Peers: []string{Nginx, HAProxy}, Idle: -1, Log: &log}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Run(ctx, o); err != nil {
		t.Fatalf("Run: %v\nlog:\n%s", err, log.String())
	}
	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	phases, pooled := 0, map[string]bool{}
	for _, r := range rows[1:] {
		level, _ := strconv.Atoi(r[col["level"]])
		streams, _ := strconv.Atoi(r[col["streams"]])
		measured, _ := strconv.Atoi(r[col["measured"]])
		if r[col["failed"]] != "0" {
			t.Errorf("row %v: failed streams", r)
		}
		if r[col["round"]] == "all" {
			pooled[r[col["target"]]+"/"+r[col["level"]]] = true
			if want := o.Rounds * level * (1 + o.PerSlot); streams != want || measured != o.Rounds*level*o.PerSlot {
				t.Errorf("pooled row %v: %d streams, %d measured; want %d and %d", r, streams, measured, want, o.Rounds*level*o.PerSlot)
			}
			continue
		}
		phases++
		if streams != level*(1+o.PerSlot) || measured != level*o.PerSlot {
			t.Errorf("phase row %v: %d streams, %d measured; want %d and %d", r, streams, measured, level*(1+o.PerSlot), level*o.PerSlot)
		}
		// The stub's first event comes one interval after the request.
		if p50, _ := strconv.ParseFloat(r[col["ttfb_p50_ms"]], 64); p50 < 5 {
			t.Errorf("phase row %v: TTFB p50 %.3f ms, under the stub's 5 ms first event", r, p50)
		}
		if r[col["target"]] == Direct && r[col["added_p50_ms"]] != "0.000" {
			t.Errorf("direct row %v: added TTFB not 0", r)
		}
	}
	if want := o.Rounds * len(o.Levels) * 3; phases != want {
		t.Errorf("%d phase rows, want %d (rounds x levels x targets)", phases, want)
	}
	if len(pooled) != len(o.Levels)*3 {
		t.Errorf("pooled rows for %v, want 3 targets x %d levels", pooled, len(o.Levels))
	}
	for _, name := range []string{"nginx.conf", "haproxy.conf", "summary.md"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "summary.md" {
			for _, want := range []string{"## 2 concurrent streams", "## 3 concurrent streams", " nginx |", " haproxy |", "Load at start"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("summary.md lacks %q:\n%s", want, b)
				}
			}
		}
	}
}

// An unknown peer is refused before anything starts.
func TestRunUnknownPeer(t *testing.T) {
	err := Run(context.Background(), Options{Out: t.TempDir(), Peers: []string{"envoy"}})
	if err == nil || !strings.Contains(err.Error(), `unknown peer "envoy"`) {
		t.Fatalf("err = %v, want unknown peer", err)
	}
}

// cpuSeconds reads this process's own utime and stime, which grow with work.
func TestCPUSecondsSelf(t *testing.T) {
	pid := os.Getpid()
	u0, s0, err := cpuSeconds([]int{pid})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		u1, s1, err := cpuSeconds([]int{pid})
		if err != nil {
			t.Fatal(err)
		}
		if u1+s1 > u0+s0 {
			return
		}
		for i := 0; i < 1e6; i++ { // burn a little CPU
			_ = strconv.Itoa(i)
		}
	}
	t.Fatal("CPU time of this process did not grow in 5 s of work")
}
