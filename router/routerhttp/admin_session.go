package routerhttp

import (
	"errors"
	"net/http"
)

// sessionInfo is one pool's answer to GET /admin/models/{model}/session:
// where this router homes the session. Replica names as in /status;
// "" none.
type sessionInfo struct {
	Model         string  `json:"model"`
	Known         bool    `json:"known"`
	Home          string  `json:"home,omitempty"`
	Overflow      string  `json:"overflow,omitempty"`
	ContextTokens int     `json:"context_tokens,omitempty"`
	IdleS         float64 `json:"idle_s,omitempty"`
	Live          bool    `json:"live,omitempty"`
	CacheLost     bool    `json:"cache_lost,omitempty"`
}

// serveSession answers GET /admin/models/{model}/session?key=K with what each
// pool's session table holds of the session key K (the client's session id,
// or session/agent/<id> for a split subagent; docs/router.md section 4). The
// key is not echoed: the answer names it by KeyHash, as the access log does.
func (rt *Router) serveSession(w http.ResponseWriter, r *http.Request, pools []*Pool) {
	key := r.URL.Query().Get("key")
	if key == "" {
		adminError(w, http.StatusBadRequest, errors.New("key: the session key is required (?key=<session id>)"))
		return
	}
	out := struct {
		Session string        `json:"session"`
		Pools   []sessionInfo `json:"pools"`
	}{Session: KeyHash(key)}
	for _, p := range pools {
		b := p.Balancer
		v, ok := b.LookupSession(key)
		info := sessionInfo{Model: p.Model, Known: ok}
		if ok {
			info.Home, info.Overflow = replicaName(b, v.Home), replicaName(b, v.Overflow)
			info.ContextTokens, info.IdleS = v.ContextTokens, v.IdleFor.Seconds()
			info.Live, info.CacheLost = v.Live, v.CacheLost
		}
		out.Pools = append(out.Pools, info)
	}
	writeJSON(w, http.StatusOK, out)
}

// replicaName is replica i's name in b, "" for -1 or out of range.
func replicaName(b interface {
	Len() int
	Name(int) string
}, i int) string {
	if i < 0 || i >= b.Len() {
		return ""
	}
	return b.Name(i)
}
