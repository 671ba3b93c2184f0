package simhttp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/sim"
)

// Server is one simulated `vllm serve` process: one HTTP endpoint in front of one engine
// or, with data parallelism, several engines behind vLLM's internal balancer. It is an
// http.Handler; Start wires servers to listeners, tests may use httptest instead.
type Server struct {
	index       int
	cfg         Config
	clock       *simclock.Scaled
	engines     []*Engine
	bal         *dpBalancer // nil with one engine
	fe          *frontend   // nil: no API-server time (Config.APIServers 0)
	maxModelLen int
	mux         *http.ServeMux
	created     int64 // unix seconds, for /v1/models
	idPrefix    string
	ids         atomic.Uint64
	responses   responseStore

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewServer builds server number index (used in request ids and Engine.Server) from a
// configuration, starts its engine goroutines and returns it. cfg is validated and
// completed with defaults; a nil cfg.Clock gets a new clock at Speed. Close stops it.
func NewServer(cfg Config, index int) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating simulator config: %w", err)
	}
	cfg.fill()
	if cfg.Clock == nil {
		cfg.Clock = simclock.NewScaled(cfg.Speed)
	}
	ecfg, err := cfg.engineConfig()
	if err != nil {
		return nil, err
	}
	s := &Server{
		index:    index,
		cfg:      cfg,
		clock:    cfg.Clock,
		created:  time.Now().Unix(),
		idPrefix: fmt.Sprintf("%08x%04x", uint32(time.Now().UnixNano()), uint16(index)),
	}
	s.fe = cfg.frontend
	if cfg.APIServers > 0 && s.fe == nil {
		s.fe = newFrontend(ecfg.Profile.Frontend, cfg.APIServers)
	}
	for rank := range cfg.DataParallelSize {
		ecfg.Seed = sim.EngineSeed(cfg.Seed, index*cfg.DataParallelSize+rank)
		e, err := newEngine(index, rank, ecfg, s.clock)
		if err != nil {
			return nil, fmt.Errorf("building engine %d of server %d: %w", rank, index, err)
		}
		e.fe = s.fe
		s.engines = append(s.engines, e)
	}
	s.maxModelLen = s.engines[0].cfg.MaxModelLen
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, e := range s.engines {
		s.wg.Go(func() { e.run(ctx) })
	}
	if len(s.engines) > 1 {
		s.bal = newDPBalancer(len(s.engines))
		s.wg.Go(func() { s.bal.runSnapshots(ctx, s.clock, cfg.SnapshotInterval, s.engines) })
	}
	s.routes()
	return s, nil
}

// Close stops the engines (requests still running fail with an error event or 503)
// and waits for the server's goroutines. It does not close listeners; see Cluster.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
}

// Engines returns the server's engines in rank order.
func (s *Server) Engines() []*Engine { return s.engines }

// Model returns the served model name.
func (s *Server) Model() string { return s.cfg.Model }

// Clock returns the simulated clock the server runs on.
func (s *Server) Clock() *simclock.Scaled { return s.clock }

// ServeHTTP serves vLLM's API (behind Config.APIKey's check on /v1 paths).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if k := s.cfg.APIKey; k != "" && r.Method != http.MethodOptions && strings.HasPrefix(r.URL.Path, "/v1") &&
		subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+k)) != 1 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"Unauthorized"}`)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST "+wire.PathChatCompletions, s.handleChat)
	m.HandleFunc("POST "+wire.PathCompletions, s.handleCompletion)
	m.HandleFunc("POST "+wire.PathResponses, s.handleResponses)
	m.HandleFunc("POST "+wire.PathMessages, s.handleMessages)
	m.HandleFunc("POST "+wire.PathCountTokens, s.handleCountTokens)
	m.HandleFunc("GET "+wire.PathModels, s.handleModels)
	m.HandleFunc("GET "+wire.PathHealth, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	m.HandleFunc("GET "+wire.PathVersion, s.handleVersion)
	m.HandleFunc("POST "+wire.PathTokenize, s.handleTokenize)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{s: s})
	m.Handle("GET "+wire.PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if s.cfg.DevMode {
		m.HandleFunc("POST "+wire.PathResetPrefixCache, s.handleResetPrefixCache)
	}
	s.mux = m
}

// nextID returns a request id unique within the process for this server.
func (s *Server) nextID() string {
	return fmt.Sprintf("%s%016x", s.idPrefix, s.ids.Add(1))
}

// readBody checks the media type and reads a JSON body, as vLLM's validate_json_request
// (vllm/entrypoints/serve/utils/api_utils.py) and FastAPI do.
// readRequest reads the body and decodes it with decode. Errors of both steps are
// request validation errors, which vLLM answers with its OpenAI error body on every
// route (the app-wide RequestValidationError handler).
func readRequest[T any](w http.ResponseWriter, r *http.Request, decode func([]byte) (T, *apiError)) (T, bool) {
	body, e := readBody(w, r)
	if e == nil {
		var req T
		if req, e = decode(body); e == nil {
			return req, true
		}
	}
	writeOpenAIError(w, e)
	var zero T
	return zero, false
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" {
		return nil, badRequest("", "Unsupported Media Type: Only 'application/json' is allowed")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, errType: "BadRequestError",
				message: fmt.Sprintf("request body larger than %d bytes", MaxRequestBytes)}
		}
		return nil, badRequest("", "reading request body: %v", err)
	}
	return body, nil
}

// checkModel accepts the served name, or "" (the default model), like vLLM.
func (s *Server) checkModel(model string) *apiError {
	if model == "" || model == s.cfg.Model {
		return nil
	}
	return errModelNotFound(model)
}

// plan decides how many tokens to generate and why the request will finish, applying
// vLLM's length validation (OpenAIServing._validate_input): a prompt of max_model_len
// tokens or more, or prompt + max_tokens over max_model_len, is a 400. Without
// max_tokens the limit is what fits (vllm/entrypoints/utils.py get_max_tokens). The
// simulated model stops on its own after ReplyTokens ("stop"), or later with
// min_tokens, or never with ignore_eos (vLLM's sampling parameters); a smaller limit
// cuts it ("length").
func (s *Server) plan(promptTokens int, limit *int, sp sampling) (int, string, *apiError) {
	if promptTokens >= s.maxModelLen {
		return 0, "", errInputTooLong(s.maxModelLen, promptTokens)
	}
	lim := s.maxModelLen - promptTokens
	if limit != nil {
		if *limit < 1 {
			return 0, "", badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *limit)
		}
		if promptTokens+*limit > s.maxModelLen {
			return 0, "", errMaxTokensTooLarge(*limit, s.maxModelLen, promptTokens)
		}
		if sp.MinTokens > *limit {
			return 0, "", badRequest("min_tokens", "min_tokens must be less than or equal to max_tokens=%d, got %d.", *limit, sp.MinTokens)
		}
		lim = *limit
	}
	if sp.MinTokens < 0 {
		return 0, "", badRequest("min_tokens", "min_tokens must be greater than or equal to 0, got %d.", sp.MinTokens)
	}
	if stop := sp.natural(s.cfg.ReplyTokens); lim > stop {
		return stop, "stop", nil
	}
	return lim, "length", nil
}

// pickEngine chooses the engine for a request: the rank in wire.HeaderDPRank (unless
// Config.IgnoreRankHeader), else the DP balancer's choice. The returned release must be called once the request ends.
func (s *Server) pickEngine(r *http.Request) (*Engine, func(), *apiError) {
	n := len(s.engines)
	if h := r.Header.Get(wire.HeaderDPRank); h != "" && !s.cfg.IgnoreRankHeader {
		k, err := strconv.Atoi(strings.TrimSpace(h))
		if err != nil {
			return nil, nil, badRequest("", "%s header must be an integer: got %q", wire.HeaderDPRank, h)
		}
		if k < 0 || k >= n {
			return nil, nil, badRequest("", "Requested DP rank %d is out of range [0, %d)", k, n)
		}
		if s.bal == nil {
			return s.engines[k], func() {}, nil
		}
		s.bal.pin(k)
		return s.engines[k], func() { s.bal.release(k) }, nil
	}
	if s.bal == nil {
		return s.engines[0], func() {}, nil
	}
	k := s.bal.pick()
	return s.engines[k], func() { s.bal.release(k) }, nil
}

// submission is a request placed on an engine.
type submission struct {
	id       string
	eng      *Engine
	st       *stream
	release  func()
	finish   string // "length" or "stop"
	prompt   int
	maxToken int
}

// submit places prompt on an engine. The caller must call sub.done.
func (s *Server) submit(r *http.Request, id string, prompt []uint32, limit *int, sp sampling) (*submission, *apiError) {
	n, finish, e := s.plan(len(prompt), limit, sp)
	if e != nil {
		return nil, e
	}
	proc := 0
	if s.fe != nil {
		// The API server renders and tokenizes the prompt before the engine (and,
		// without a pinned rank, the DP balancer) sees it.
		var ready time.Duration
		proc, ready = s.fe.admit(s.clock.Now(), len(prompt))
		if err := s.clock.SleepUntil(r.Context(), ready); err != nil {
			return nil, errUnavailable(err)
		}
	}
	eng, release, e := s.pickEngine(r)
	if e != nil {
		return nil, e
	}
	st, err := eng.submit(id, prompt, n, finish, proc)
	if err != nil {
		release()
		if errors.Is(err, sim.ErrPromptTooLong) {
			return nil, errMaxTokensTooLarge(n, s.maxModelLen, len(prompt))
		}
		return nil, errUnavailable(err)
	}
	return &submission{id: id, eng: eng, st: st, release: release, finish: finish, prompt: len(prompt), maxToken: n}, nil
}

// done releases the balancer slot.
func (sub *submission) done() { sub.release() }

// follow calls onUpdate with each batch of the request's progress until it finishes,
// fails, or ctx ends (the client went away), in which case the request is aborted.
// onUpdate returning an error (a failed write) also aborts.
// collect follows the request to its end (non-streaming responses) and returns
// every output token and the prefix-cache hit counted at admission.
func (sub *submission) collect(ctx context.Context) (out []uint32, cached int, err error) {
	err = sub.follow(ctx, func(u update) error {
		out = append(out, u.tokens...)
		cached = u.cachedTokens
		return nil
	})
	return out, cached, err
}

func (sub *submission) follow(ctx context.Context, onUpdate func(u update) error) error {
	var buf []uint32
	for {
		u := sub.st.take(buf)
		buf = u.tokens
		if u.due > 0 {
			// The API server writes this step's outputs at u.due (sim.Frontend.Emit).
			if err := sub.eng.clock.SleepUntil(ctx, u.due); err != nil {
				sub.eng.abort(sub.id)
				return err
			}
		}
		if err := onUpdate(u); err != nil {
			sub.eng.abort(sub.id)
			return err
		}
		if u.finished || u.err != nil {
			return u.err
		}
		select {
		case <-ctx.Done():
			sub.eng.abort(sub.id)
			return ctx.Err()
		case <-sub.st.notify:
		}
	}
}

// sseWriter writes server-sent events and flushes each one.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_ = sw.rc.Flush()
	return sw
}

// data writes "data: <payload>\n\n" (event "" omits the event line).
func (sw *sseWriter) send(event string, payload []byte) error {
	var b []byte
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, payload...)
	b = append(b, "\n\n"...)
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	return sw.rc.Flush()
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	type permission struct {
		ID                 string  `json:"id"`
		Object             string  `json:"object"`
		Created            int64   `json:"created"`
		AllowCreateEngine  bool    `json:"allow_create_engine"`
		AllowSampling      bool    `json:"allow_sampling"`
		AllowLogprobs      bool    `json:"allow_logprobs"`
		AllowSearchIndices bool    `json:"allow_search_indices"`
		AllowView          bool    `json:"allow_view"`
		AllowFineTuning    bool    `json:"allow_fine_tuning"`
		Organization       string  `json:"organization"`
		Group              *string `json:"group"`
		IsBlocking         bool    `json:"is_blocking"`
	}
	type card struct {
		ID          string       `json:"id"`
		Object      string       `json:"object"`
		Created     int64        `json:"created"`
		OwnedBy     string       `json:"owned_by"`
		Root        string       `json:"root"`
		Parent      *string      `json:"parent"`
		MaxModelLen int          `json:"max_model_len"`
		Permission  []permission `json:"permission"`
	}
	type list struct {
		Object string `json:"object"`
		Data   []card `json:"data"`
	}
	// vLLM's ModelCard (vllm/entrypoints/openai/models/protocol.py); root is the model
	// path the server loaded, here the profile's model.
	root := s.engines[0].cfg.Profile.ModelName
	if root == "" {
		root = s.cfg.Model
	}
	writeJSON(w, http.StatusOK, list{Object: "list", Data: []card{{
		ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "vllm", Root: root,
		MaxModelLen: s.maxModelLen,
		Permission: []permission{{
			ID: "modelperm-" + s.idPrefix, Object: "model_permission", Created: s.created,
			AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
		}},
	}}})
}

// Version is what GET /version reports: "sim-" and the module version of the binary
// ("sim-dev" for a development build).
func Version() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return "sim-" + v
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": Version()})
}

// handleResetPrefixCache resets every engine's prefix cache. vLLM answers 200 with an
// empty body; when an engine has blocks in use (requests running) the simulator
// answers 409 with the ranks that refused, because a harness that resets between
// variants must not silently start warm.
func (s *Server) handleResetPrefixCache(w http.ResponseWriter, r *http.Request) {
	var refused []string
	for _, e := range s.engines {
		if !e.ResetPrefixCache() {
			refused = append(refused, e.label)
		}
	}
	if len(refused) > 0 {
		writeOpenAIError(w, &apiError{status: http.StatusConflict, errType: "ConflictError",
			message: fmt.Sprintf("resetting prefix cache: blocks in use on engine %s", strings.Join(refused, ", "))})
		return
	}
	w.WriteHeader(http.StatusOK)
}
