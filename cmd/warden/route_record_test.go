package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen/trace"
	"github.com/lmwarden/warden/sim/simhttp"
)

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A real `warden route --record` process (built here) in front of the
// simulator, killed with SIGKILL after some requests: the file has a line per
// request that finished before the kill (each written as it ended, within a
// second), and it parses with the trace reader; only the request still in
// flight is lost.
func TestRouteRecordSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "warden")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := simhttp.Start(ctx, simhttp.Config{Replicas: 1, Speed: 10, ReplyTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	model := cl.Config().Model
	file := filepath.Join(dir, "rec.jsonl")
	listen := freeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "route", "--replica", cl.URLs()[0], "--record", file, "--listen", listen, "--admin-listen", freeAddr(t))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	base := "http://" + listen
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + wire.PathHealth); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("warden route not healthy after 20 s:\n%s", logs.String())
		}
	}
	post := func(session, text string, extra string) (*http.Response, error) {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]%s}`,
			model, strings.Repeat("You are a coding agent. ", 100), text, extra)
		req, _ := http.NewRequest("POST", base+wire.PathChatCompletions, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(wire.HeaderSessionID, session)
		return http.DefaultClient.Do(req)
	}
	lines := func() int {
		b, _ := os.ReadFile(file)
		return bytes.Count(b, []byte("\n"))
	}
	const n = 5
	var prompts []int
	for i := range n {
		resp, err := post(fmt.Sprintf("s%d", i%2), fmt.Sprintf("turn %d: %s", i, strings.Repeat("list the files ", 50)), `,"max_tokens":16`)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, err)
		}
		prompts = append(prompts, r.Usage.PromptTokens)
		// The line is on disk within a second of the response.
		for deadline := time.Now().Add(time.Second); lines() < i+1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("request %d answered, %d lines on disk after 1 s", i, lines())
			}
		}
	}
	// One more, streaming, still in flight at the kill.
	resp, err := post("s9", "write a long story", `,"max_tokens":20000,"ignore_eos":true,"stream":true`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("the streaming request: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no flush
		t.Fatal(err)
	}
	cmd.Wait()
	io.Copy(io.Discard, resp.Body)

	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []trace.Request
	if err := trace.Each(trace.NewReader(f, file, 0), func(r trace.Request) error { got = append(got, r); return nil }); err != nil {
		t.Fatalf("the recording after SIGKILL does not parse: %v", err)
	}
	if len(got) != n {
		t.Fatalf("%d lines after SIGKILL, want %d (one per finished request)\n%s", len(got), n, logs.String())
	}
	for i, r := range got {
		if r.InputLength != prompts[i] || r.SessionID == "" {
			t.Errorf("line %d: %d prompt tokens, session %q; the response said %d", i+1, r.InputLength, r.SessionID, prompts[i])
		}
	}
	if got[0].SessionID != got[2].SessionID || got[0].SessionID == got[1].SessionID {
		t.Errorf("session ids %q %q %q: want s0's turns to share one", got[0].SessionID, got[1].SessionID, got[2].SessionID)
	}
}
