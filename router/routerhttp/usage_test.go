package routerhttp

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// feedAll gives the scanner b in pieces of size k (all at once when k <= 0).
func feedAll(b []byte, k int) (prompt, cached int, ok bool) {
	var u usageScanner
	if k <= 0 {
		k = len(b)
	}
	for len(b) > 0 {
		n := min(k, len(b))
		u.feed(b[:n])
		b = b[n:]
	}
	return u.result()
}

// TestUsageScannerReadsBothAPIs: the usage of recorded and synthetic streams, the
// same whatever the read boundaries.
func TestUsageScannerReadsBothAPIs(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name           string
		stream         []byte
		prompt, cached int
		ok             bool
	}{
		// Recorded from api.anthropic.com: message_start reports 100 + 55,096 from
		// cache; the message_delta of this compaction request then reports 181
		// input tokens and 0 from cache, and the last usage wins.
		{"anthropic recording", read("anthropic-stream-cache-read.txt"), 181, 0, true},
		// Recorded vLLM chunks with continuous usage but no prompt_tokens_details:
		// no cache count, so nothing to observe.
		{"vllm without cache details", read("vllm-chat-stream.txt"), 15, 0, false},
		{"openai final usage chunk", []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":896}}}\n\ndata: [DONE]\n\n"), 1000, 896, true},
		{"anthropic, CRLF lines", []byte("event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":104,\"cache_read_input_tokens\":896,\"output_tokens\":0}}}\r\n\r\n"), 1000, 896, true},
		// Spec-derived Responses stream (copied from sim/simhttp/testdata):
		// response.completed's usage, input_tokens being the whole prompt.
		{"responses stream", read("responses-stream-spec.txt"), 20, 0, true},
		{"a usage word in text is not usage", []byte("data: {\"choices\":[{\"delta\":{\"content\":\"the \\\"usage\\\" field\"}}]}\n\n"), 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []int{0, 1, 7, 64} {
				p, c, ok := feedAll(tc.stream, k)
				if p != tc.prompt || c != tc.cached || ok != tc.ok {
					t.Errorf("reads of %d bytes: prompt %d cached %d ok %v; want %d %d %v", k, p, c, ok, tc.prompt, tc.cached, tc.ok)
				}
			}
		})
	}
}

// The proxy feeds a stream's usage to the Balancer: the replica's usage totals
// (/status) and the session's cache feedback.
func TestProxyObservesUsageFromTheStream(t *testing.T) {
	up := newStub(t, "a")
	up.mu.Lock()
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":896}}}\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}
	up.mu.Unlock()
	f := newFront(t, true, nil, up)
	for range 2 {
		resp, body := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderClaudeSession: "s"}, chatBody("m"))
		if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	st := f.pool().Balancer.Status()[0]
	if st.UsagePromptTokens != 2000 || st.UsageCachedTokens != 1792 {
		t.Errorf("usage totals %d prompt / %d cached, want 2000 / 1792", st.UsagePromptTokens, st.UsageCachedTokens)
	}
}

// A non-streaming response's usage reaches the Balancer too: OpenAI's
// chat.completion object and Anthropic's message object (the shapes vLLM's
// serving_chat.py and the Messages API return), whatever the body's chunking;
// an error body, a body without a cache count and a body cut short give nothing.
func TestProxyObservesUsageFromJSONResponses(t *testing.T) {
	const (
		openai = `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],` +
			`"usage":{"prompt_tokens":1000,"total_tokens":1004,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":896}}}`
		anthropic = `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],` +
			`"stop_reason":"max_tokens","usage":{"input_tokens":104,"cache_read_input_tokens":896,"output_tokens":4}}`
		noDetails = `{"id":"chatcmpl-2","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":4,"prompt_tokens_details":null}}`
		errBody   = `{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400,"usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":896}}}`
	)
	tests := []struct {
		name           string
		status         int
		ctype, body    string
		chunk          int  // write the body in pieces of this size, flushing each
		cut            bool // end the connection before the body's last byte
		prompt, cached uint64
	}{
		{"openai", 200, "application/json", openai, 0, false, 1000, 896},
		{"openai in 7-byte pieces", 200, "application/json", openai, 7, false, 1000, 896},
		{"anthropic", 200, "application/json; charset=utf-8", anthropic, 0, false, 1000, 896},
		{"no cache count", 200, "application/json", noDetails, 0, false, 0, 0},
		{"error status", 400, "application/json", errBody, 0, false, 0, 0},
		{"not JSON", 200, "text/plain", openai, 0, false, 0, 0},
		{"cut short", 200, "application/json", openai, 16, true, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newStub(t, "a")
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				if !tc.cut {
					w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)))
				}
				w.WriteHeader(tc.status)
				b := tc.body
				if tc.cut {
					b = b[:len(b)-1]
				}
				k := tc.chunk
				if k <= 0 {
					k = len(b)
				}
				for len(b) > 0 {
					n := min(k, len(b))
					io.WriteString(w, b[:n])
					w.(http.Flusher).Flush()
					b = b[n:]
				}
				if tc.cut {
					panic(http.ErrAbortHandler)
				}
			})
			f := newFront(t, true, nil, up)
			req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("m")))
			req.Header.Set(wire.HeaderClaudeSession, "s")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || (err != nil) != tc.cut {
				t.Fatalf("status %d, read error %v; want %d, an error %v", resp.StatusCode, err, tc.status, tc.cut)
			}
			f.waitDone(t)
			st := f.pool().Balancer.Status()[0]
			if st.UsagePromptTokens != tc.prompt || st.UsageCachedTokens != tc.cached {
				t.Errorf("usage totals %d prompt / %d cached, want %d / %d", st.UsagePromptTokens, st.UsageCachedTokens, tc.prompt, tc.cached)
			}
		})
	}
}

// The proxy feeds each finished response's prompt_tokens and its request's body
// size to Balancer.ObserveSize, so prompt estimates follow the server's tokenizer.
func TestProxyCalibratesPromptEstimate(t *testing.T) {
	up := newStub(t, "a")
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		// The server counts one token per 2 body bytes.
		n := len(up.requests(r.URL.Path)[len(up.requests(r.URL.Path))-1].Body) / 2
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":"+strconv.Itoa(n)+",\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	})
	f := newFront(t, true, nil, up)
	bal := f.pool().Balancer
	estimate := bal.EstimateTokens
	if e := estimate(4000); e != 1000 {
		t.Fatalf("before any response: %d tokens for 4,000 bytes, want 1,000", e)
	}
	for range router.SizeMinSeen {
		if resp, _ := f.post(t, "/v1/chat/completions", map[string]string{wire.HeaderClaudeSession: "s"}, chatBody("m")); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if ratio, src := bal.BytesPerToken(); src != router.SizeResponses || ratio < 1.9 || ratio > 2.1 {
		t.Errorf("BytesPerToken %.2f from %s, want about 2 from responses", ratio, src)
	}
	if st := f.rt.Status(); !st.Models[0].BytesPerTokenMeasured || st.Models[0].BytesPerTokenSource != router.SizeResponses {
		t.Errorf("/status does not say the ratio was measured: %+v", st.Models[0])
	}
	body := len(chatBody("m"))
	if want := int(4000 * float64(body/2) / float64(body)); estimate(4000) != want {
		t.Errorf("after %d responses: %d tokens for 4,000 bytes, want %d (the server's 1 per 2 bytes)", router.SizeMinSeen, estimate(4000), want)
	}
}

// The Responses API's id is seen as soon as its bytes pass: response.created in
// a stream, the first member of a JSON body (before the rest of the body).
func TestUsageScannerSeesResponseIDEarly(t *testing.T) {
	var seen []string
	u := usageScanner{onID: func(id string) { seen = append(seen, id) }}
	u.feed([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_s\",\"usage\":null}}\n\n"))
	if len(seen) != 1 || seen[0] != "resp_s" {
		t.Fatalf("stream: ids %v after response.created", seen)
	}
	seen = nil
	j := usageScanner{onID: func(id string) { seen = append(seen, id) }}
	j.feedJSON([]byte(`{"id":"resp_j","created_at":1,"object":"res`))
	if len(seen) != 1 || seen[0] != "resp_j" {
		t.Fatalf("JSON: ids %v after the first bytes", seen)
	}
	j.feedJSON([]byte(`ponse","usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4},"output_tokens":1}}`))
	j.finishJSON()
	if p, c, ok := j.result(); len(seen) != 1 || !ok || p != 9 || c != 4 {
		t.Errorf("JSON end: ids %v, usage %d/%d %v", seen, p, c, ok)
	}
}
