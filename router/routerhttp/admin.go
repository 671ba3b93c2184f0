package routerhttp

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lmwarden/warden/router"
)

// AdminHandler serves the admin API, meant for a loopback listener. When
// Config.AdminToken is set every request needs "Authorization: Bearer <token>"
// (401 otherwise). Endpoints (model may contain slashes; "*" means every model):
//
//	GET  /status                              Status as JSON
//	GET  /status/card                         the HTML status card (also on the main listener)
//	GET  /admin/models/{model}/affinity       {"model":m,"enabled":bool} (a list for "*")
//	PUT  /admin/models/{model}/affinity       body {"enabled":bool}
//	GET  /admin/models/{model}/threshold      {"model":m,"threshold":n,"auto":bool}
//	PUT  /admin/models/{model}/threshold      body {"threshold":n} or {"threshold":"auto"}
//	GET  /admin/models/{model}/policy         {"model":m,"policy":name} (affinity-on policy)
//	PUT  /admin/models/{model}/policy         body {"policy":name}, one of PolicyNames
//	GET  /admin/models/{model}/admission      {"model":m,"admission":AdmissionReport} (durations "10m0s")
//	PUT  /admin/models/{model}/admission      body {"mode":"fit","fill_target":1.0,"max_hold":"10m","max_queue":1024,"on_limit":"admit","keepalive_after":"1m"}, fields optional (the rest kept)
//	POST /admin/models/{model}/reset-sessions forget every session home
//	POST /admin/models/{model}/replicas       body {"name":n,"url":u,"dp_ranks":k}: add
//	                                          an upstream while serving (Router.AddReplica);
//	                                          201 {"model":m,"added":[names]}
//	POST /admin/models/{model}/replicas/{name}/drain  body {"mode":"move"|"finish"} (or ?mode=):
//	                                          drain a replica (a DP server's name: all its ranks);
//	                                          {"model":m,"replicas":[DrainView]}
//	DELETE /admin/models/{model}/replicas/{name}/drain  end the drain; GET reports it
//	GET  /admin/record                        {"enabled":bool,"written":n,"dropped":n} (warden route --record)
//	PUT  /admin/record                        body {"enabled":bool}: pause or resume the recording
//
// With a "*" pool a model name is accepted when it is configured or a client
// asked the "*" pool for it; any other is 404 naming the known models.
// Errors are JSON {"error":"..."} with 400 (bad body), 404 (unknown model or
// path) or 405.
func (rt *Router) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, rt.Status())
	})
	mux.Handle("GET "+CardPath, rt.CardHandler())
	mux.HandleFunc("/admin/models/{rest...}", rt.serveAdminModel)
	mux.HandleFunc("GET /admin/record", rt.serveAdminRecord)
	mux.HandleFunc("PUT /admin/record", rt.serveAdminRecord)
	return rt.requireToken(mux)
}

func (rt *Router) requireToken(h http.Handler) http.Handler {
	if rt.cfg.AdminToken == "" {
		return h
	}
	want := []byte("Bearer " + rt.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warden-admin"`)
			adminError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func adminError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

type affinityView struct {
	Model   string `json:"model"`
	Enabled bool   `json:"enabled"`
}

type thresholdView struct {
	Model     string `json:"model"`
	Threshold int    `json:"threshold"`
	Auto      bool   `json:"auto"`
}

func (rt *Router) serveAdminModel(w http.ResponseWriter, r *http.Request) {
	rest := r.PathValue("rest")
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		adminError(w, http.StatusNotFound, fmt.Errorf("%w: %s", errNotFound, r.URL.Path))
		return
	}
	model, what := rest[:i], rest[i+1:]
	if j := strings.LastIndex(model, "/replicas/"); what == "drain" && j >= 0 {
		rt.serveDrain(w, r, model[:j], model[j+len("/replicas/"):])
		return
	}
	pools, err := rt.poolsFor(model)
	if err != nil {
		adminError(w, http.StatusNotFound, err)
		return
	}
	all := model == "" || model == WildcardModel
	switch {
	case what == "affinity" && r.Method == http.MethodGet:
		rt.writeAffinity(w, pools, all)
	case what == "affinity" && r.Method == http.MethodPut:
		rt.putAffinity(w, r, model, pools, all)
	case what == "threshold" && r.Method == http.MethodGet:
		rt.writeThreshold(w, pools, all)
	case what == "threshold" && r.Method == http.MethodPut:
		rt.putThreshold(w, r, model, pools, all)
	case what == "policy" && r.Method == http.MethodGet:
		rt.writePolicy(w, pools, all)
	case what == "policy" && r.Method == http.MethodPut:
		rt.putPolicy(w, r, model, pools, all)
	case what == "reset-sessions" && r.Method == http.MethodPost:
		if err := rt.ResetSessions(model); err != nil {
			adminError(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"reset": model})
	case what == "replicas" && r.Method == http.MethodPost:
		rt.postReplica(w, r, model, pools, all)
	case what == "admission":
		rt.serveAdmission(w, r, pools, all)
	case what == "session" && r.Method == http.MethodGet:
		rt.serveSession(w, r, pools)
	case what == "affinity" || what == "threshold" || what == "policy" || what == "reset-sessions" || what == "replicas" || what == "session":
		adminError(w, http.StatusMethodNotAllowed, fmt.Errorf("%w: %s %s", errMethod, r.Method, r.URL.Path))
	default:
		adminError(w, http.StatusNotFound, fmt.Errorf("%w: %s", errNotFound, r.URL.Path))
	}
}

// putAffinity answers PUT /admin/models/{model}/affinity {"enabled": bool}.
func (rt *Router) putAffinity(w http.ResponseWriter, r *http.Request, model string, pools []*Pool, all bool) {
	enabled, ok := decodeEnabled(w, r)
	if !ok {
		return
	}
	if err := rt.SetAffinity(model, enabled); err != nil {
		adminError(w, http.StatusNotFound, err)
		return
	}
	rt.writeAffinity(w, pools, all)
}

// decodeEnabled reads an admin PUT body {"enabled": true|false}; when it is
// bad or the field is missing it answers 400 and returns ok false.
func decodeEnabled(w http.ResponseWriter, r *http.Request) (enabled, ok bool) {
	var body struct {
		Enabled *bool `json:"enabled"`
	}
	if err := decodeStrict(r.Body, &body); err != nil || body.Enabled == nil {
		if err == nil {
			err = errors.New(`"enabled" is missing`)
		}
		adminError(w, http.StatusBadRequest, fmt.Errorf(`want {"enabled": true|false}: %w`, err))
		return false, false
	}
	return *body.Enabled, true
}

// putThreshold answers PUT /admin/models/{model}/threshold {"threshold": N|"auto"}.
func (rt *Router) putThreshold(w http.ResponseWriter, r *http.Request, model string, pools []*Pool, all bool) {
	var body struct {
		Threshold json.RawMessage `json:"threshold"`
	}
	if err := decodeStrict(r.Body, &body); err != nil {
		adminError(w, http.StatusBadRequest, err)
		return
	}
	n, err := parseThreshold(body.Threshold)
	if err != nil {
		adminError(w, http.StatusBadRequest, err)
		return
	}
	if err := rt.SetOverflowThreshold(model, n); err != nil {
		adminError(w, http.StatusNotFound, err)
		return
	}
	rt.writeThreshold(w, pools, all)
}

// putPolicy answers PUT /admin/models/{model}/policy {"policy": name}.
func (rt *Router) putPolicy(w http.ResponseWriter, r *http.Request, model string, pools []*Pool, all bool) {
	var body struct {
		Policy *string `json:"policy"`
	}
	if err := decodeStrict(r.Body, &body); err != nil || body.Policy == nil {
		if err == nil {
			err = errors.New(`"policy" is missing`)
		}
		adminError(w, http.StatusBadRequest, fmt.Errorf(`want {"policy": %q}: %w`, strings.Join(router.PolicyNames(), "|"), err))
		return
	}
	if !router.ValidPolicy(*body.Policy) {
		adminError(w, http.StatusBadRequest, fmt.Errorf("policy %q is unknown (have %s)", *body.Policy, strings.Join(router.PolicyNames(), ", ")))
		return
	}
	if err := rt.SetPolicy(model, *body.Policy); err != nil {
		adminError(w, http.StatusNotFound, err)
		return
	}
	rt.writePolicy(w, pools, all)
}

// postReplica answers POST /admin/models/{model}/replicas {"name", "url", "dp_ranks"}: adds a replica to the model's pool.
func (rt *Router) postReplica(w http.ResponseWriter, r *http.Request, model string, pools []*Pool, all bool) {
	var body struct {
		Name    string `json:"name"`
		URL     string `json:"url"`
		DPRanks int    `json:"dp_ranks"`
	}
	if err := decodeStrict(r.Body, &body); err != nil {
		adminError(w, http.StatusBadRequest, fmt.Errorf(`want {"name": "r4", "url": "http://host:8000", "dp_ranks": 0}: %w`, err))
		return
	}
	if all || len(pools) != 1 {
		if model != WildcardModel || len(pools) != 1 {
			adminError(w, http.StatusBadRequest, errors.New("name one model: a replica is added to one pool"))
			return
		}
	}
	names, err := rt.AddReplica(pools[0].Model, ReplicaConfig{Name: body.Name, URL: body.URL, DPRanks: body.DPRanks})
	if err != nil {
		adminError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"model": pools[0].Model, "added": names})
}

// writePerModel answers a GET on a per-model setting: one view for a named model,
// a list for "*" (all).
func writePerModel[V any](w http.ResponseWriter, pools []*Pool, all bool, view func(*Pool) V) {
	out := make([]V, 0, len(pools))
	for _, p := range pools {
		out = append(out, view(p))
	}
	if all || len(out) == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeJSON(w, http.StatusOK, out[0])
}

func (rt *Router) writeAffinity(w http.ResponseWriter, pools []*Pool, all bool) {
	writePerModel(w, pools, all, func(p *Pool) affinityView { return affinityView{p.Model, p.Balancer.Affinity()} })
}

type policyView struct {
	Model  string `json:"model"`
	Policy string `json:"policy"`
}

func (rt *Router) writePolicy(w http.ResponseWriter, pools []*Pool, all bool) {
	writePerModel(w, pools, all, func(p *Pool) policyView { return policyView{p.Model, p.Balancer.Policy()} })
}

func (rt *Router) writeThreshold(w http.ResponseWriter, pools []*Pool, all bool) {
	writePerModel(w, pools, all, func(p *Pool) thresholdView {
		n, auto := p.Balancer.OverflowThreshold()
		return thresholdView{p.Model, n, auto}
	})
}

// decodeStrict decodes one JSON object with no unknown fields, at most 64 KiB.
func decodeStrict(r io.Reader, v any) error {
	raw, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return fmt.Errorf("reading body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding body: %w", err)
	}
	return nil
}

// parseThreshold reads the body's "threshold", a JSON string or number, with
// router.ParseThreshold ("auto", 0 = auto, or a positive integer).
func parseThreshold(raw json.RawMessage) (int, error) {
	if len(raw) == 0 {
		return 0, errors.New(`"threshold" is missing: want {"threshold": "auto"}, 0 (auto) or a positive integer`)
	}
	text := string(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = s
	}
	n, err := router.ParseThreshold(text)
	if err != nil {
		return 0, fmt.Errorf("threshold %w", err)
	}
	return n, nil
}
