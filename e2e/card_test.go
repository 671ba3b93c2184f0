package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router/routerhttp"
	"github.com/lmwarden/warden/sim/simhttp"
)

// chromiumPath returns the Chromium binary (WARDEN_CHROMIUM, /usr/bin/chromium,
// or chromium / chromium-browser on PATH), or skips the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("WARDEN_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("skipping the browser test: no /usr/bin/chromium (apt-get install chromium, or set WARDEN_CHROMIUM)")
	return ""
}

// chromium runs headless Chromium on url with extra flags (--dump-dom or
// --screenshot=...), bounded to 90 s, and returns its standard output.
func chromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,800",
	}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, lastLines(stderr.String(), 10))
	}
	return stdout.Bytes()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// words is the vocabulary of the driver's user messages.
var words = strings.Fields(`the replica cache prefix session router token prompt engine batch queue
request reply stream model agent tool file code test build plan read write edit search run check fix`)

// driveSession runs one closed-loop conversation against the router until ctx ends
// or maxTurns: each turn resends the whole history plus a new user message of
// about 300 words (OpenAI chat with X-Session-ID, or Anthropic messages with
// X-Claude-Code-Session-Id), as an agent would.
func driveSession(ctx context.Context, base, model, key string, anthropic bool, seed uint64, maxTurns int) error {
	err := converse(ctx, base, model, key, anthropic, seed, maxTurns)
	if ctx.Err() != nil {
		return nil // stopped mid-turn: whatever broke, it was the stop
	}
	return err
}

func converse(ctx context.Context, base, model, key string, anthropic bool, seed uint64, maxTurns int) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	system := strings.Repeat("You are a coding agent working in a repository. ", 60)
	var history []msg
	for turn := 0; turn < maxTurns && ctx.Err() == nil; turn++ {
		var sb strings.Builder
		for range 300 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		history = append(history, msg{"user", sb.String()})
		var body map[string]any
		path := "/v1/chat/completions"
		if anthropic {
			path = "/v1/messages"
			body = map[string]any{"model": model, "max_tokens": 24, "system": system, "messages": history}
		} else {
			body = map[string]any{"model": model, "max_tokens": 24,
				"messages": append([]msg{{"system", system}}, history...)}
		}
		raw, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if anthropic {
			req.Header.Set(wire.HeaderClaudeSession, key)
			req.Header.Set("anthropic-version", "2023-06-01")
		} else {
			req.Header.Set(wire.HeaderSessionID, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("session %s turn %d: %w", key, turn, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("session %s turn %d: reading reply: %w", key, turn, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("session %s turn %d: status %d: %s", key, turn, resp.StatusCode, out)
		}
		var reply struct {
			Choices []struct {
				Message msg `json:"message"`
			} `json:"choices"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(out, &reply); err != nil {
			return fmt.Errorf("session %s turn %d: decoding reply: %w", key, turn, err)
		}
		text := ""
		if len(reply.Choices) > 0 {
			text = reply.Choices[0].Message.Content
		} else if len(reply.Content) > 0 {
			text = reply.Content[0].Text
		}
		history = append(history, msg{"assistant", text})
	}
	return nil
}

// cardRow is a replica row read back from the card's DOM (its data attributes).
type cardRow map[string]string

var (
	rowRe  = regexp.MustCompile(`<tr class="replica"([^>]*)>`)
	attrRe = regexp.MustCompile(`data-([a-z-]+)="([^"]*)"`)
	capRe  = regexp.MustCompile(`<div class="cap[^"]*"([^>]*)>`)
)

func parseAttrs(s string) cardRow {
	row := cardRow{}
	for _, m := range attrRe.FindAllStringSubmatch(s, -1) {
		row[m[1]] = m[2]
	}
	return row
}

func (r cardRow) num(k string) float64 {
	v, err := strconv.ParseFloat(r[k], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestStatusCardInChromium drives conversations through the router over three
// simulated replicas, loads the status card in headless Chromium while they run,
// and checks that the rendered page lists every replica with live numbers; it
// saves a screenshot (in the test's temp dir, and in WARDEN_SCREENSHOT_DIR when
// set).
func TestStatusCardInChromium(t *testing.T) {
	bin := chromiumPath(t)
	f := startFleet(t, simhttp.Config{Replicas: 3, Speed: 10, ReplyTokens: 24}, 32)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var failed atomic.Bool
	errs := make(chan error, 16)
	model := f.sim.Config().Model
	for s := range 9 {
		wg.Go(func() {
			if err := driveSession(ctx, f.url, model, fmt.Sprintf("card-session-%d", s), s%2 == 1, uint64(s), 200); err != nil {
				failed.Store(true)
				errs <- err
			}
		})
	}
	stopLoad := func() {
		stop()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	defer func() {
		if ctx.Err() == nil {
			stopLoad()
		}
	}()

	live := func() bool {
		if failed.Load() {
			return true
		}
		c := f.rt.Card()
		for _, r := range c.Models[0].Replicas {
			if r.Requests == 0 || r.CachedPerS <= 0 || r.ComputedPerS <= 0 || r.KVTokens == 0 || r.Conversations == 0 {
				return false
			}
		}
		return true
	}
	if !waitFor(60*time.Second, live) || failed.Load() {
		t.Fatalf("the card never showed every replica busy: %+v", f.rt.Card().Models[0].Replicas)
	}

	dom := string(chromium(t, bin, f.url+routerhttp.CardPath+"?refresh=0", "--dump-dom"))
	shot := filepath.Join(t.TempDir(), "status-card.png")
	chromium(t, bin, f.url+routerhttp.CardPath, "--screenshot="+shot)
	stopLoad()

	want := map[string]bool{}
	for _, r := range f.rt.Status().Models[0].Replicas {
		want[r.Name] = true
	}
	rows := rowRe.FindAllStringSubmatch(dom, -1)
	if len(rows) != len(want) {
		t.Fatalf("card has %d replica rows, want %d\n%s", len(rows), len(want), dom)
	}
	for _, m := range rows {
		row := parseAttrs(m[1])
		name := row["replica"]
		if !want[name] {
			t.Errorf("card lists unknown replica %q", name)
			continue
		}
		delete(want, name)
		for _, k := range []string{"requests", "conversations", "context-tokens", "kv-tokens", "cached-per-s", "computed-per-s", "hit-rate"} {
			if v := row.num(k); v <= 0 {
				t.Errorf("replica %s: %s = %q, want > 0", name, k, row[k])
			}
		}
		if row["healthy"] != "true" {
			t.Errorf("replica %s shown unhealthy", name)
		}
		t.Logf("card row %s: requests %s (sticky %s, placed %s, overflow %s), conversations %s, context %s / KV %s tokens, hit %s, cached %s/s, computed %s/s",
			name, row["requests"], row["sticky"], row["placed"], row["overflow"], row["conversations"],
			row["context-tokens"], row["kv-tokens"], row["hit-rate"], row["cached-per-s"], row["computed-per-s"])
	}
	for name := range want {
		t.Errorf("card lacks replica %s", name)
	}
	capLine := capRe.FindStringSubmatch(dom)
	if capLine == nil {
		t.Fatal("card has no capacity line")
	}
	if c := parseAttrs(capLine[1]); c.num("demand") <= 0 || c.num("capacity") <= 0 {
		t.Errorf("capacity line %v: want demand and capacity > 0", c)
	} else {
		t.Logf("capacity line: demand %s tokens, capacity %s tokens, over %s", c["demand"], c["capacity"], c["over"])
	}
	for _, s := range []string{"LM Warden", "KV capacity", "Prefix hit rate"} {
		if !strings.Contains(dom, s) {
			t.Errorf("card lacks %q", s)
		}
	}

	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %d bytes, err %v", shot, len(png), err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dir := os.Getenv("WARDEN_SCREENSHOT_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "status-card.png")
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot copied to %s", dst)
	}
}
