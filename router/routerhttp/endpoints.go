package routerhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// ProxiedPaths are the POST endpoints the proxy routes. Every one of them goes
// through Balancer.Acquire/Release, so each feeds the load counts (docs/router.md,
// failure case 3). Query strings pass through (Claude Code calls /v1/messages?beta=true).
var ProxiedPaths = []string{wire.PathChatCompletions, wire.PathCompletions, wire.PathMessages, wire.PathCountTokens, wire.PathResponses}

// PrefixPieceBytes is the piece of a keyless request's body the prefix index
// hashes (router.PrefixHashes): 64 bytes, about one 16-token KV block at
// router.BytesPerTokenEstimate. MaxPrefixPieces bounds the hashing to a body's
// first 1 MiB.
const (
	PrefixPieceBytes = 64
	MaxPrefixPieces  = 1 << 14
)

var proxiedPath = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range ProxiedPaths {
		m[p] = true
	}
	return m
}()

// modelHealth is one model's line of /health and /ready.
type modelHealth struct {
	Model   string `json:"model"`
	Healthy int    `json:"healthy_replicas"`
	Total   int    `json:"replicas"`
}

// modelsHealth counts every model's healthy replicas and names the models
// without one.
func (p *Proxy) modelsHealth() (out []modelHealth, down []string) {
	for _, pool := range p.order {
		m := modelHealth{Model: pool.Model, Total: pool.Balancer.Len()}
		for i := range m.Total {
			if pool.Balancer.Healthy(i) {
				m.Healthy++
			}
		}
		if m.Healthy == 0 {
			down = append(down, pool.Model)
		}
		out = append(out, m)
	}
	return out, down
}

// serveHealth answers GET /health, the router's health as vLLM's clients
// read it: 200 {"status": "ok"}, or 503 "degraded" while a model has no
// healthy replica. It stays as it is during a shutdown. Process liveness, for a
// probe that restarts the router, is wire.PathLive.
func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Status string        `json:"status"`
		Models []modelHealth `json:"models"`
	}{Status: "ok"}
	code := http.StatusOK
	var down []string
	out.Models, down = p.modelsHealth()
	if len(down) > 0 {
		out.Status, code = "degraded", http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}

// serveReady answers GET /ready (wire.PathReady), the router's readiness: 200
// {"status": "ready"} while it takes new work; 503 "draining" from the start of
// a shutdown (Proxy.BeginDrain) and 503 "degraded" while a model has no
// healthy replica, each with the reason.
func (p *Proxy) serveReady(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Status string        `json:"status"`
		Reason string        `json:"reason,omitempty"`
		Models []modelHealth `json:"models"`
	}{Status: "ready"}
	code := http.StatusOK
	var down []string
	out.Models, down = p.modelsHealth()
	switch {
	case p.Draining():
		out.Status, code = "draining", http.StatusServiceUnavailable
		out.Reason = "shutting down: requests are still served until the listener closes (drain_delay), then requests in flight finish (drain_timeout); send new work elsewhere"
	case len(down) > 0:
		out.Status, code = "degraded", http.StatusServiceUnavailable
		out.Reason = fmt.Sprintf("no healthy replica for model %s", strings.Join(quoteAll(down), ", "))
	}
	writeJSON(w, code, out)
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		p.fail(w, apiOpenAI, errMethod, false)
		return
	}
	if p.wildcard != nil {
		// Model names are whatever the servers serve: ask one.
		pool := p.wildcard
		for i := range pool.UpstreamList() {
			if pool.Balancer.Healthy(i) {
				c := &call{pool: pool, inURL: *r.URL, dec: router.Decision{Replica: i}}
				p.forward(w, r, c)
				return
			}
		}
		p.fail(w, apiOpenAI, router.ErrNoReplica, false)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, pool := range p.order {
		out.Data = append(out.Data, model{ID: pool.Model, Object: "model", OwnedBy: "lm-warden"})
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
