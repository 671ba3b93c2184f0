package enginestub

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
)

func start(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func recordedFile(t *testing.T, name string) string {
	t.Helper()
	b, err := llamacppFiles.ReadFile("recorded/llamacpp/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Responses that do not depend on the request are the recorded bytes.
func TestLlamaCppVerbatim(t *testing.T) {
	srv := start(t, Config{Kind: engines.KindLlamaCpp, Metrics: true})
	off := start(t, Config{Kind: engines.KindLlamaCpp})
	for _, tc := range []struct {
		method, url, file string
	}{
		{"GET", srv.URL + "/health", "health.txt"},
		{"GET", srv.URL + "/v1/models", "models.txt"},
		{"GET", srv.URL + "/props", "props.txt"},
		{"GET", srv.URL + "/slots", "slots.txt"},
		{"GET", srv.URL + "/version", "version.txt"},
		{"POST", srv.URL + "/reset_prefix_cache", "reset.txt"},
		{"GET", off.URL + "/metrics", "metrics-disabled.txt"},
	} {
		t.Run(tc.method+" "+tc.file, func(t *testing.T) {
			rec, err := loadRecorded(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			resp, body := do(t, tc.method, tc.url, "")
			if resp.StatusCode != rec.status || body != string(rec.body) {
				t.Errorf("got %d %q\nwant %d %q", resp.StatusCode, body, rec.status, rec.body)
			}
			if resp.Header.Get("Server") != "llama.cpp" || resp.Header.Get("Content-Type") != rec.header.Get("Content-Type") {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
}

var idCreated = regexp.MustCompile(`"(created|id)":("[^"]*"|\d+)`)

// streamEvents returns the data: payloads of an SSE body.
func streamEvents(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

type usage struct {
	Usage *struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Details    struct {
			Cached int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Timings *struct {
		CacheN  int `json:"cache_n"`
		PromptN int `json:"prompt_n"`
	} `json:"timings"`
}

// Replaying the recorded requests gives the recorded usage: the same request
// twice (0 then 1471 of 1472 cached), then the Anthropic one (1471 cached, as the
// chat turns warmed the slot), and /metrics ends as recorded after four requests.
func TestLlamaCppReplaysRecordedSession(t *testing.T) {
	srv := start(t, Config{Kind: engines.KindLlamaCpp, Metrics: true})
	chat, messages := recordedFile(t, "chat-request.json"), recordedFile(t, "messages-request.json")
	for i, wantCached := range []int{0, 1471} {
		resp, body := do(t, "POST", srv.URL+"/v1/chat/completions", chat)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Accel-Buffering") != "no" {
			t.Fatalf("chat %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		evs := streamEvents(body)
		rec := streamEvents(recordedFile(t, "chat-cold.txt"))
		if len(evs) != len(rec) || evs[len(evs)-1] != "[DONE]" {
			t.Fatalf("chat %d: %d events, recorded %d", i, len(evs), len(rec))
		}
		// Role chunk and finish chunk: the recorded bytes but for id and created.
		for _, j := range []int{0, len(rec) - 3} {
			if got, want := idCreated.ReplaceAllString(evs[j], ""), idCreated.ReplaceAllString(rec[j], ""); got != want {
				t.Errorf("chat %d event %d:\n got %s\nwant %s", i, j, got, want)
			}
		}
		var u usage
		if err := json.Unmarshal([]byte(evs[len(evs)-2]), &u); err != nil || u.Usage == nil || u.Timings == nil {
			t.Fatalf("usage event %q: %v", evs[len(evs)-2], err)
		}
		if u.Usage.Prompt != 1472 || u.Usage.Details.Cached != wantCached || u.Timings.CacheN != wantCached || u.Timings.PromptN != 1472-wantCached {
			t.Errorf("chat %d usage %+v timings %+v, want 1472 prompt, %d cached", i, *u.Usage, *u.Timings, wantCached)
		}
	}
	for i := range 2 {
		_, body := do(t, "POST", srv.URL+"/v1/messages?beta=true", messages)
		if !strings.Contains(body, `"usage":{"cache_read_input_tokens":1471,"input_tokens":1,"output_tokens":0}`) ||
			!strings.Contains(body, `"stop_reason":"max_tokens"`) || !strings.HasSuffix(body, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
			t.Errorf("messages %d: %s", i, body)
		}
	}
	// Recorded after the same four requests: 1472+1+1+1 computed, 4x8 generated.
	snap, err := scrape.FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindUnknown)
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Ranks[0]
	if snap.Kind != engines.KindLlamaCpp || s.PromptComputedTokens.V != 1475 || s.GenerationTokens.V != 32 || s.Running.V != 0 || s.Waiting.V != 0 {
		t.Errorf("metrics %+v", s)
	}
	_, body := do(t, "GET", srv.URL+"/metrics", "")
	_, recBody := do(t, "GET", srv.URL+"/metrics", "")
	if body != recBody || !strings.Contains(body, "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1475\n") {
		t.Errorf("metrics body %s", body)
	}
}

func TestLlamaCppErrors(t *testing.T) {
	srv := start(t, Config{Kind: engines.KindLlamaCpp, ContextLen: 100})
	resp, body := do(t, "POST", srv.URL+"/v1/chat/completions", "not json")
	if resp.StatusCode != 500 || !strings.Contains(body, "parse_error") {
		t.Errorf("bad json: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "POST", srv.URL+"/v1/chat/completions", recordedFile(t, "chat-request.json"))
	if resp.StatusCode != 400 || !strings.Contains(body, `"type":"exceed_context_size_error","n_prompt_tokens":1472,"n_ctx":100`) {
		t.Errorf("too long: %d %s", resp.StatusCode, body)
	}
}

// The stand-ins are identified by engineapi.Probe and read by their adapters.
func TestProbeIdentifiesStandIns(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		evidence string
	}{
		{Config{Kind: engines.KindLlamaCpp}, `GET /v1/models owned_by "llamacpp"`},
		{Config{Kind: engines.KindLlamaCpp, Metrics: true}, `GET /v1/models owned_by "llamacpp"`},
		{Config{Kind: engines.KindSGLang, Metrics: true, Model: "qwen3-4b", ContextLen: 4096}, `GET /v1/models owned_by "sglang"`},
		{Config{Kind: engines.KindSGLang}, `GET /v1/models owned_by "sglang"`},
	} {
		srv := start(t, tc.cfg)
		info, err := engineapi.Probe(t.Context(), nil, srv.URL, nil, engines.KindUnknown)
		if err != nil {
			t.Fatal(err)
		}
		if info.Kind != tc.cfg.Kind || info.Evidence != tc.evidence || !info.ContextLength.Has() || !info.Slots.Has() || !info.KVCapacityTokens.Has() {
			t.Errorf("%+v: info %+v", tc.cfg, info)
		}
		if (info.MetricsErr == nil) != tc.cfg.Metrics {
			t.Errorf("%+v: metrics error %v", tc.cfg, info.MetricsErr)
		}
	}
}

func TestSGLangPrefixCacheAndFlush(t *testing.T) {
	srv := start(t, Config{Kind: engines.KindSGLang, Metrics: true, Model: "qwen3-4b", CacheReport: true})
	chat := recordedFile(t, "chat-request.json")
	cachedOf := func() int {
		_, body := do(t, "POST", srv.URL+"/v1/chat/completions", chat)
		evs := streamEvents(body)
		var u struct {
			Usage struct {
				Prompt  int `json:"prompt_tokens"`
				Details *struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(evs[len(evs)-2]), &u); err != nil {
			t.Fatalf("usage %q: %v", evs[len(evs)-2], err)
		}
		if u.Usage.Details == nil {
			return 0
		}
		return u.Usage.Details.Cached
	}
	snap, _ := scrape.FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindUnknown)
	if snap.Kind != engines.KindSGLang || snap.Ranks[0].PrefixQueries.Has() {
		t.Fatalf("fresh: %+v", snap.Ranks[0])
	}
	if c := cachedOf(); c != 0 {
		t.Errorf("cold cached %d", c)
	}
	snap, _ = scrape.FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindSGLang)
	if h := snap.Ranks[0].PrefixHits; h.V != 0 || h.Source != engines.SrcSGLangCachedZero {
		t.Errorf("before first hit: %v", h)
	}
	if c := cachedOf(); c != 1471 {
		t.Errorf("warm cached %d, want 1471", c)
	}
	snap, _ = scrape.FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindSGLang)
	if s := snap.Ranks[0]; s.PrefixHits != engines.Of(1471, engines.SGLangCachedTokens) || s.PrefixQueries.V != 2944 || s.RequestsFinished.V != 2 {
		t.Errorf("after hit: %+v", s)
	}
	if resp, _ := do(t, "POST", srv.URL+"/flush_cache", ""); resp.StatusCode != 200 {
		t.Errorf("flush %d", resp.StatusCode)
	}
	if c := cachedOf(); c != 0 {
		t.Errorf("after flush cached %d", c)
	}
}

func TestNewRejectsOtherKinds(t *testing.T) {
	for _, k := range []engines.Kind{engines.KindVLLM, engines.KindUnknown, ""} {
		if _, err := New(Config{Kind: k}); err == nil {
			t.Errorf("New(%q) gave no error", k)
		}
	}
}

// With every slot busy a request waits and llama-server counts it deferred.
func TestLlamaCppDefersWhenSlotsAreBusy(t *testing.T) {
	srv := start(t, Config{Kind: engines.KindLlamaCpp, Metrics: true, Slots: 1, TokenDelay: 20 * time.Millisecond})
	chat := strings.Replace(recordedFile(t, "chat-request.json"), `"max_tokens": 8`, `"max_tokens": 10`, 1)
	done := make(chan struct{})
	for range 2 {
		go func() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(chat))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- struct{}{}
		}()
	}
	saw := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !saw; time.Sleep(5 * time.Millisecond) {
		snap, err := scrape.FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindLlamaCpp)
		if err == nil && snap.Ranks[0].Running.V == 1 && snap.Ranks[0].Waiting.V == 1 {
			saw = true
		}
	}
	<-done
	<-done
	if !saw {
		t.Error("never saw one processing and one deferred")
	}
	snap, _ := scrape.FetchEngine(t.Context(), nil, srv.URL+"/metrics", "", engines.KindLlamaCpp)
	if s := snap.Ranks[0]; s.Waiting.V != 0 || s.Running.V != 0 || s.PromptComputedTokens.V != 1473 {
		t.Errorf("after: %+v", s)
	}
}
