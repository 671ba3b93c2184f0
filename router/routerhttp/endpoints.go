package routerhttp

import (
	"encoding/json"
	"net/http"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/router"
)

// ProxiedPaths are the POST endpoints the proxy routes. Every one of them goes
// through Balancer.Acquire/Release, so each feeds the load counts (peers.md router
// case 3). Query strings pass through (Claude Code calls /v1/messages?beta=true).
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

func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	type model struct {
		Model   string `json:"model"`
		Healthy int    `json:"healthy_replicas"`
		Total   int    `json:"replicas"`
	}
	out := struct {
		Status string  `json:"status"`
		Models []model `json:"models"`
	}{Status: "ok"}
	code := http.StatusOK
	for _, pool := range p.order {
		m := model{Model: pool.Model, Total: pool.Balancer.Len()}
		for i := range m.Total {
			if pool.Balancer.Healthy(i) {
				m.Healthy++
			}
		}
		if m.Healthy == 0 {
			out.Status, code = "degraded", http.StatusServiceUnavailable
		}
		out.Models = append(out.Models, m)
	}
	writeJSON(w, code, out)
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
