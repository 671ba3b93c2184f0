package enginestub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/engines"
)

// The SGLang stand-in's formats are BUILT FROM SGLang's SOURCE, not recorded:
//   - /metrics: the series of python/sglang/srt/metrics/collector.py (sgl-project/sglang
//     @00ae9c1590d2) with the scheduler labels model_name, engine_type, tp_rank,
//     pp_rank, moe_ep_rank and the tokenizer labels model_name, engine_type; no
//     _created samples (multiprocess mode); cached_tokens_total appears at the first
//     hit. Without metrics, GET /metrics is FastAPI's 404 {"detail":"Not Found"}.
//   - /v1/models: ModelList of ModelCard {id, object, created, owned_by "sglang",
//     root, max_model_len} (entrypoints/http_server.py available_models).
//   - /server_info and the older /get_server_info: server_args, scheduler info and
//     version merged (http_server.py); only the fields engineapi reads are filled.
//   - /flush_cache (GET or POST): 200 "Cache flushed..." or 400 while requests run.
//   - /v1/chat/completions streaming: ChatCompletionStreamResponse chunks; usage
//     (stream_options.include_usage) with prompt_tokens_details {cached_tokens} only
//     when --enable-cache-report and cached > 0, else null
//     (entrypoints/openai/usage_processor.py @056c7ec2bdc0).
//
// The prefix cache is one radix tree for all requests: a prompt hits the longest
// prefix it shares with any earlier prompt+output, at most len-1 tokens. /v1/messages
// is not served (SGLang added it in sgl-project/sglang#18630, after the source
// read here).
type sglang struct {
	cfg Config

	mu      sync.Mutex
	seqs    [][]byte // cached sequences (the radix tree's leaves)
	running int
	waiting int
	freed   chan struct{}
	// counters (collector.py names)
	promptTokens, cachedTokens, generationTokens, requests, prefillCompute, prefillCache float64
	created                                                                              int64
}

func newSGLang(cfg Config) *sglang {
	return &sglang{cfg: cfg, freed: make(chan struct{}), created: time.Now().Unix()}
}

func (s *sglang) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/health_generate"):
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		s.json(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
			"id": s.cfg.Model, "object": "model", "created": s.created, "owned_by": "sglang",
			"root": s.cfg.Model, "max_model_len": s.cfg.ContextLen}}})
	case r.Method == http.MethodGet && (r.URL.Path == "/server_info" || r.URL.Path == "/get_server_info"):
		s.json(w, http.StatusOK, map[string]any{"model_path": s.cfg.Model, "served_model_name": s.cfg.Model,
			"context_length": s.cfg.ContextLen, "max_running_requests": s.cfg.Slots, "dp_size": 1,
			"enable_metrics": s.cfg.Metrics, "enable_cache_report": s.cfg.CacheReport,
			"max_total_num_tokens": s.cfg.KVTokens, "internal_states": []map[string]any{{}}, "version": "enginestub"})
	case r.URL.Path == "/flush_cache" && (r.Method == http.MethodGet || r.Method == http.MethodPost):
		s.mu.Lock()
		busy := s.running+s.waiting > 0
		if !busy {
			s.seqs = nil
		}
		s.mu.Unlock()
		code := http.StatusOK
		if busy {
			code = http.StatusBadRequest
		}
		w.WriteHeader(code)
		io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
	case r.Method == http.MethodGet && r.URL.Path == "/metrics" && s.cfg.Metrics:
		s.serveMetrics(w)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		s.serveChat(w, r)
	default:
		s.json(w, http.StatusNotFound, map[string]any{"detail": "Not Found"})
	}
}

func (s *sglang) json(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *sglang) serveMetrics(w http.ResponseWriter) {
	s.mu.Lock()
	sched := fmt.Sprintf(`{engine_type="unified",model_name=%q,moe_ep_rank="0",pp_rank="0",tp_rank="0"}`, s.cfg.Model)
	tok := fmt.Sprintf(`{engine_type="unified",model_name=%q}`, s.cfg.Model)
	used := 0
	for _, q := range s.seqs {
		used += len(q)
	}
	used = min(used, s.cfg.KVTokens)
	var b strings.Builder
	series := func(name, help, typ, labels string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s%s %s\n", name, help, name, typ, name, labels, pyFloat(v))
	}
	series(engines.SGLangNumRunningReqs, "The number of running requests.", "gauge", sched, float64(s.running))
	series(engines.SGLangNumUsedTokens, "The number of used tokens.", "gauge", sched, float64(used))
	series(engines.SGLangTokenUsage, "The token usage.", "gauge", sched, float64(used)/float64(max(s.cfg.KVTokens, 1)))
	series(engines.SGLangNumQueueReqs, "The number of requests in the waiting queue.", "gauge", sched, float64(s.waiting))
	series(engines.SGLangMaxTotalNumTokens, "Maximum total number of tokens in the KV cache pool.", "gauge", sched, float64(s.cfg.KVTokens))
	series(engines.SGLangRetractedRequests, "Total number of retracted requests.", "counter", sched, 0)
	fmt.Fprintf(&b, "# HELP %s Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.\n# TYPE %s counter\n", engines.SGLangRealtimeTokens, engines.SGLangRealtimeTokens)
	for _, m := range []struct {
		mode string
		v    float64
	}{{"prefill_compute", s.prefillCompute}, {"prefill_cache", s.prefillCache}, {"decode", s.generationTokens}} {
		fmt.Fprintf(&b, "%s{engine_type=\"unified\",mode=%q,model_name=%q,moe_ep_rank=\"0\",pp_rank=\"0\",tp_rank=\"0\"} %s\n", engines.SGLangRealtimeTokens, m.mode, s.cfg.Model, pyFloat(m.v))
	}
	if s.requests > 0 {
		// Tokenizer counters exist once a request has finished (multiprocess mode).
		series(engines.SGLangPromptTokens, "Number of prefill tokens processed.", "counter", tok, s.promptTokens)
		series(engines.SGLangGenerationTokens, "Number of generation tokens processed.", "counter", tok, s.generationTokens)
		series(engines.SGLangNumRequests, "Number of requests processed.", "counter", tok, s.requests)
	}
	if s.cachedTokens > 0 {
		series(engines.SGLangCachedTokens, "Number of cached prompt tokens.", "counter", tok, s.cachedTokens)
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	io.WriteString(w, b.String())
}

// pyFloat prints v as prometheus_client does (Python repr of a float: "3.0").
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

func (s *sglang) admit(ctx context.Context, prompt []byte) (int, error) {
	waiting := false
	for {
		s.mu.Lock()
		if s.running < s.cfg.Slots {
			if waiting {
				s.waiting--
			}
			s.running++
			best := 0
			for _, q := range s.seqs {
				best = max(best, commonPrefix(q, prompt))
			}
			s.mu.Unlock()
			return min(best, len(prompt)-1), nil
		}
		if !waiting {
			waiting = true
			s.waiting++
		}
		ch := s.freed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
			return 0, ctx.Err()
		case <-ch:
		}
	}
}

func (s *sglang) finish(seq []byte, prompt, cached, generated int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	s.seqs = append(s.seqs, seq)
	s.promptTokens += float64(prompt)
	s.cachedTokens += float64(cached)
	s.prefillCompute += float64(prompt - cached)
	s.prefillCache += float64(cached)
	s.generationTokens += float64(generated)
	s.requests++
	close(s.freed)
	s.freed = make(chan struct{})
}

func (s *sglang) serveChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rendered, err := []byte(nil), json.Unmarshal(body, &req)
	if err == nil {
		rendered, err = req.prompt()
	}
	if err != nil {
		s.json(w, http.StatusBadRequest, map[string]any{"object": "error", "message": err.Error(), "type": "Bad Request", "param": nil, "code": 400})
		return
	}
	if !req.Stream {
		s.json(w, http.StatusNotImplemented, map[string]any{"object": "error", "message": "enginestub: only streamed chat completions", "type": "Not Implemented", "param": nil, "code": 501})
		return
	}
	tokens := append([]byte("\x00\x01"), rendered...)
	if len(tokens) >= s.cfg.ContextLen {
		s.json(w, http.StatusBadRequest, map[string]any{"object": "error",
			"message": fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", len(tokens), s.cfg.ContextLen),
			"type":    "BadRequestError", "param": nil, "code": 400})
		return
	}
	cached, err := s.admit(r.Context(), tokens)
	if err != nil {
		return
	}
	limit, capped := req.maxTokens()
	limit = min(limit, s.cfg.ContextLen-len(tokens))
	id := randomID(32)
	created := time.Now().Unix()
	chunk := func(delta, finish string) {
		fmt.Fprintf(w, `data: {"id":%q,"object":"chat.completion.chunk","created":%d,"model":%q,"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s,"matched_stop":null}],"usage":null}`+"\n\n",
			id, created, req.Model, delta, finish)
		flush(w)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunk(`{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null}`, "null")
	text := randomText(max(limit, 0))
	n := 0
	for ; n < len(text) && r.Context().Err() == nil; n++ {
		if s.cfg.TokenDelay > 0 {
			time.Sleep(s.cfg.TokenDelay)
		}
		c, _ := json.Marshal(string(text[n : n+1]))
		chunk(`{"role":null,"content":`+string(c)+`,"reasoning_content":null,"tool_calls":null}`, "null")
	}
	finish := `"stop"`
	if capped && n >= limit {
		finish = `"length"`
	}
	chunk(`{"role":null,"content":null,"reasoning_content":null,"tool_calls":null}`, finish)
	s.finish(append(tokens, text[:n]...), len(tokens), cached, n)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		details := "null"
		if s.cfg.CacheReport && cached > 0 {
			details = fmt.Sprintf(`{"cached_tokens":%d}`, cached)
		}
		fmt.Fprintf(w, `data: {"id":%q,"object":"chat.completion.chunk","created":%d,"model":%q,"choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":%s,"reasoning_tokens":0}}`+"\n\n",
			id, created, req.Model, len(tokens), len(tokens)+n, n, details)
	}
	io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}
