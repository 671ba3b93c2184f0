package routerhttp

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// BenchmarkRecorderClaudeCode: what recording one request costs (Begin and
// End, hashing the prompt) on the recorded 52 KB Claude Code /v1/messages
// body, the line written to io.Discard.
func BenchmarkRecorderClaudeCode(b *testing.B) {
	cc := loadFixture(b, "claude-code-2.1.328-turn2.json")
	rec, err := NewRecorder(io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(cc.Body)))
	b.ReportAllocs()
	var now time.Duration
	for b.Loop() {
		now += time.Millisecond
		r := rec.Begin(now, cc.Body, "bench-session")
		rec.End(r, true, 20287, 100)
	}
}

// BenchmarkProxyRecord: one non-streamed Claude Code request (the recorded
// 52 KB body) through the router to a loopback stub answering with a usage,
// without and with a recorder writing to a file: the difference is what
// recording adds per request (the next request on the connection waits for
// the handler, so End's work is in ns/op).
func BenchmarkProxyRecord(b *testing.B) {
	reply := []byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":287,"cache_read_input_tokens":20000,"output_tokens":1}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
	}))
	defer up.Close()
	cc := loadFixture(b, "claude-code-2.1.328-turn2.json")
	for _, record := range []bool{false, true} {
		name := "routed"
		if record {
			name = "routed+record"
		}
		b.Run(name, func(b *testing.B) {
			rt, err := NewFromURLs([]string{up.URL}, true, 32, nil)
			if err != nil {
				b.Fatal(err)
			}
			rt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			if record {
				f, err := os.Create(filepath.Join(b.TempDir(), "rec.jsonl"))
				if err != nil {
					b.Fatal(err)
				}
				rec, _ := NewRecorder(f)
				rt.SetRecorder(rec)
				defer rec.Close()
			}
			srv := httptest.NewServer(rt.Handler())
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			b.SetBytes(int64(len(cc.Body)))
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", bytes.NewReader(cc.Body))
				req.Header.Set(wire.HeaderClaudeSession, cc.Headers[wire.HeaderClaudeSession])
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkRecordLineWrite: a trace line (~40 ids) to a file, one write per
// line (what the recorder does) against a 4 KB buffer flushed when full.
func BenchmarkRecordLineWrite(b *testing.B) {
	line := bytes.Repeat([]byte("1234567890123456789,"), 40)
	line = append(line, '\n')
	for _, buffered := range []bool{false, true} {
		name := "write-per-line"
		if buffered {
			name = "bufio-4KB"
		}
		b.Run(name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "lines"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			var w io.Writer = f
			if buffered {
				bw := bufioWriter(f)
				defer bw.Flush()
				w = bw
			}
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, err := w.Write(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func bufioWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 4096) }
