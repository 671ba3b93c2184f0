package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// --drain-delay and --drain-timeout set the shutdown's two steps, over the
// file's drain_delay and drain_timeout; without either the defaults are 0 and
// routerhttp.DefaultDrainTimeout (the 10 s grace of before).
func TestRouteDrainFlags(t *testing.T) {
	dir := t.TempDir()
	file := writeTestFile(t, dir, "r.yaml", "drain_delay: 5s\ndrain_timeout: 30s\nmodels:\n  - name: m\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n")
	for _, c := range []struct {
		args           []string
		delay, timeout time.Duration
	}{
		{[]string{"--replica", "http://127.0.0.1:9"}, 0, routerhttp.DefaultDrainTimeout},
		{[]string{"--replica", "http://127.0.0.1:9", "--drain-delay", "2s", "--drain-timeout", "1m"}, 2 * time.Second, time.Minute},
		{[]string{"--config", file}, 5 * time.Second, 30 * time.Second},
		{[]string{"--config", file, "--drain-delay", "0s", "--drain-timeout", "3s"}, 0, 3 * time.Second},
	} {
		cfg, err := routeConfigOf(t, c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.DrainDelay != c.delay || cfg.DrainTimeout != c.timeout {
			t.Errorf("%v: drain_delay %v drain_timeout %v, want %v %v", c.args, cfg.DrainDelay, cfg.DrainTimeout, c.delay, c.timeout)
		}
	}
	if _, err := routeConfigOf(t, "--replica", "http://127.0.0.1:9", "--drain-timeout", "-1s"); err == nil || !strings.Contains(err.Error(), "drain_timeout: -1s is negative") {
		t.Errorf("--drain-timeout -1s: %v, want an error naming drain_timeout", err)
	}
}

// buildWarden builds this command into a temporary directory once per test
// binary and returns its path.
var buildWarden = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "warden-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "warden")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// syncBuf collects a process's output while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listeningAt = regexp.MustCompile(`router listening listener=api addr=(\S+)`)

// A real `warden route` process in front of a simulated vLLM server gets
// SIGTERM with a stream in flight. "in time": the stream (about 2 s) finishes
// within --drain-timeout 10s, /ready answered 503 during --drain-delay while
// /health stayed 200, the process exits 0 and its last line counts the
// stream finished. "cut": with --drain-timeout 300ms the stream is cut, and
// the process exits 1 and says so.
func TestRouteProcessDrainsOnSIGTERM(t *testing.T) {
	bin, err := buildWarden()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 1, Speed: 1, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		name    string
		timeout string
		exit    int
		want    string // in the last log line
	}{
		{"in time", "10s", 0, "finished=1 cut_at_drain_timeout=0 held_refused=0"},
		{"cut", "300ms", 1, "finished=0 cut_at_drain_timeout=1 held_refused=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr syncBuf
			cmd := exec.Command(bin, "route", "--replica", cl.URLs()[0], "--listen", "127.0.0.1:0", "--admin-listen", "-",
				"--drain-delay", "500ms", "--drain-timeout", tc.timeout)
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				cmd.Process.Kill()
				<-exited
				exited <- nil
			}()
			var addr string
			for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
				if m := listeningAt.FindStringSubmatch(stderr.String()); m != nil {
					addr = m[1]
				}
				if time.Now().After(deadline) {
					t.Fatalf("warden route never said where it listens:\n%s", stderr.String())
				}
			}
			base := "http://" + addr
			stream := make(chan string, 1)
			go func() {
				body := `{"model":"m","stream":true,"max_tokens":80,"messages":[{"role":"user","content":"a long answer"}]}`
				req, _ := http.NewRequest(http.MethodPost, base+wire.PathChatCompletions, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(wire.HeaderSessionID, "s")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					stream <- "error: " + err.Error()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				stream <- string(b)
			}()
			// The stream is under way once its first token arrived: poll the
			// router's in-flight gauge instead of racing the request.
			for deadline := time.Now().Add(10 * time.Second); !inFlight(base); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the stream never went in flight:\n%s", stderr.String())
				}
			}
			t0 := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var flipped time.Duration
			for flipped == 0 && time.Since(t0) < time.Second {
				resp, err := http.Get(base + wire.PathReady)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable {
						flipped = time.Since(t0)
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
			t.Logf("/ready 503 %v after SIGTERM", flipped)
			if flipped == 0 || flipped > 100*time.Millisecond {
				t.Errorf("/ready answered 503 %v after SIGTERM (0: never), want within 100 ms", flipped)
			}
			for _, p := range []string{wire.PathHealth, wire.PathLive} {
				if resp, err := http.Get(base + p); err != nil || resp.StatusCode != 200 {
					t.Errorf("%s during drain_delay: %v %v", p, resp, err)
				} else {
					resp.Body.Close()
				}
			}
			body := <-stream
			var err error
			select {
			case err = <-exited:
				exited <- err
			case <-time.After(20 * time.Second):
				t.Fatalf("warden route did not exit 20 s after SIGTERM:\n%s", stderr.String())
			}
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := stderr.String()
			lines := strings.Split(strings.TrimSpace(out), "\n")
			t.Logf("exit %d after %v; last lines:\n%s", code, time.Since(t0).Round(time.Millisecond), strings.Join(lines[max(0, len(lines)-3):], "\n"))
			if code != tc.exit {
				t.Errorf("exit code %d, want %d\n%s", code, tc.exit, out)
			}
			stopped := ""
			for _, l := range lines {
				if strings.Contains(l, "router stopped") {
					stopped = l
				}
			}
			if !strings.Contains(stopped, tc.want) {
				t.Errorf("log line %q, want %q", stopped, tc.want)
			}
			complete := strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") && !strings.Contains(body, `"error"`)
			if complete != (tc.exit == 0) {
				t.Errorf("stream complete %v, want %v; ends %q", complete, tc.exit == 0, body[max(0, len(body)-300):])
			}
			if tc.exit != 0 && !strings.Contains(out, "requests in flight cut at drain_timeout: 1 (drain_timeout 300ms)") {
				t.Errorf("the process does not say what was cut:\n%s", out)
			}
		})
	}
}

// inFlight reports whether the router at base has a request in flight
// (routerhttp.MetricInFlight on /metrics).
func inFlight(base string) bool {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, routerhttp.MetricInFlight+"{") && !strings.HasSuffix(l, " 0") {
			return true
		}
	}
	return false
}
