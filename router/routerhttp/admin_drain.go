package routerhttp

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lmwarden/warden/internal/yamlpos"
	"github.com/lmwarden/warden/router"
)

// errUnknownReplica: the admin API named a replica the model does not have (404).
var errUnknownReplica = errors.New("replica not in the model")

// DrainView is one replica's drain as the admin API reports it: its mode (""
// none) and what is left on it, so an operator can stop it once InFlight +
// SharedInFlight is 0 (and, in move mode, Sessions too).
type DrainView struct {
	Replica  string `json:"replica"`
	Draining string `json:"draining"`
	InFlight int    `json:"in_flight"`
	// SharedInFlight: the other routers' requests in flight there (`state:`).
	SharedInFlight int `json:"shared_in_flight,omitempty"`
	Sessions       int `json:"sessions_homed"`
	// Stored: with `state:`, whether the store took the change now (false: it
	// holds on this router and is written when the store answers).
	Stored *bool `json:"stored,omitempty"`
}

// DrainReplica puts the replica name of model in drain mode m
// (router.DrainNone ends the drain) and returns its state. name is a replica
// name as in /status, or a DP server's name for all its ranks. With `state:`
// the drain is written to the shared state, so every router sees it.
func (rt *Router) DrainReplica(model, name string, m router.DrainMode) ([]DrainView, error) {
	pool, idx, err := rt.drainTargets(model, name)
	if err != nil {
		return nil, err
	}
	var stored []bool
	for _, i := range idx {
		_, ok := pool.Balancer.SetDrain(i, m)
		stored = append(stored, ok)
	}
	rt.log.Info("replica drain", "model", pool.Model, "replica", name, "mode", m.String())
	views := drainViews(pool, idx)
	if pool.Balancer.Shared() {
		for k := range views {
			views[k].Stored = &stored[k]
		}
	}
	return views, nil
}

// drainTargets finds the pool of model and the indices of replica name in it
// (every rank of a DP server named name).
func (rt *Router) drainTargets(model, name string) (*Pool, []int, error) {
	pools, err := rt.poolsFor(model)
	if err != nil {
		return nil, nil, err
	}
	if len(pools) != 1 {
		return nil, nil, errors.New("name one model: a replica drains in one pool")
	}
	pool := pools[0]
	ups := pool.UpstreamList()
	var idx []int
	var names []string
	for i, up := range ups {
		names = append(names, up.Name)
		if up.Name == name {
			return pool, []int{i}, nil
		}
		if base, ranked := router.RankBase(up.Name); ranked && base == name {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, nil, fmt.Errorf("%w: %q in model %q (%s)", errUnknownReplica, name, pool.Model, yamlpos.Suggest(name, names))
	}
	return pool, idx, nil
}

// drainViews reports replicas idx of pool.
func drainViews(pool *Pool, idx []int) []DrainView {
	st := pool.Balancer.Status()
	out := make([]DrainView, 0, len(idx))
	for _, i := range idx {
		if i < len(st) {
			s := st[i]
			out = append(out, DrainView{Replica: s.Name, Draining: s.Draining, InFlight: s.InFlight, SharedInFlight: s.SharedInFlight, Sessions: s.Sessions})
		}
	}
	return out
}

// serveDrain answers .../replicas/{name}/drain: POST starts a drain (mode
// from the body {"mode":"move"|"finish"} or the query ?mode=), DELETE ends
// it, GET reports it; each answers {"model":m,"replicas":[DrainView]}.
func (rt *Router) serveDrain(w http.ResponseWriter, r *http.Request, model, name string) {
	var m router.DrainMode
	switch r.Method {
	case http.MethodGet:
		pool, idx, err := rt.drainTargets(model, name)
		if err != nil {
			adminError(w, drainErrorCode(err), err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"model": pool.Model, "replicas": drainViews(pool, idx)})
		return
	case http.MethodDelete:
		m = router.DrainNone
	case http.MethodPost:
		mode, err := drainMode(r)
		if err != nil {
			adminError(w, http.StatusBadRequest, err)
			return
		}
		m = mode
	default:
		adminError(w, http.StatusMethodNotAllowed, fmt.Errorf("%w: %s %s", errMethod, r.Method, r.URL.Path))
		return
	}
	views, err := rt.DrainReplica(model, name, m)
	if err != nil {
		adminError(w, drainErrorCode(err), err)
		return
	}
	pool, _, _ := rt.drainTargets(model, name)
	writeJSON(w, http.StatusOK, map[string]any{"model": pool.Model, "replicas": views})
}

// drainErrorCode is 404 for an unknown model or replica, 400 otherwise.
func drainErrorCode(err error) int {
	if errors.Is(err, errUnknownModel) || errors.Is(err, errUnknownReplica) {
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

// drainMode reads a POST's mode: the query's mode=, or the body
// {"mode":"move"|"finish"}; exactly one of them.
func drainMode(r *http.Request) (router.DrainMode, error) {
	const want = `want {"mode": "move"|"finish"} or ?mode=move|finish`
	q, inQuery := r.URL.Query()["mode"]
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return 0, fmt.Errorf("reading body: %w", err)
	}
	hasBody := strings.TrimSpace(string(raw)) != ""
	var mode string
	switch {
	case inQuery && hasBody:
		return 0, fmt.Errorf("mode given twice, in the query and the body: %s", want)
	case inQuery:
		mode = q[0]
	case hasBody:
		var body struct {
			Mode *string `json:"mode"`
		}
		if err := decodeStrict(strings.NewReader(string(raw)), &body); err != nil {
			return 0, fmt.Errorf("%s: %w", want, err)
		}
		if body.Mode == nil {
			return 0, fmt.Errorf(`%s: "mode" is missing`, want)
		}
		mode = *body.Mode
	default:
		return 0, fmt.Errorf("no mode: %s", want)
	}
	return router.ParseDrainMode(mode)
}
