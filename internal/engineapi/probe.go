package engineapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/wire"
)

// Info is what Probe learned about one server.
type Info struct {
	URL  string
	Kind engines.Kind
	// Evidence says how Kind was decided ("configured", "GET /v1/models owned_by
	// \"llamacpp\"", ...).
	Evidence string
	Models   []string

	ContextLength    engines.Value // tokens per sequence (llama.cpp: per slot)
	Slots            engines.Value // concurrent sequences (llama.cpp total_slots, SGLang max_running_requests)
	KVCapacityTokens engines.Value // from an endpoint; vLLM's comes from /metrics (scrape)
	Version          string
	VersionSource    string // endpoint of Version; "" when none

	// Metrics is the /metrics snapshot read as Kind, nil when MetricsErr says why
	// (a *scrape.StatusError for llama-server without --metrics (501) or SGLang
	// without --enable-metrics (404)).
	Metrics    *engines.Snapshot
	MetricsErr error
}

// Probe asks the server at base what it is: GET /v1/models (required), /metrics,
// and the kind's own endpoints (llama.cpp /props; SGLang /server_info, falling
// back to /get_server_info; vLLM /version). kind KindUnknown means detect, in
// this order: /v1/models owned_by, /metrics series prefixes (or llama-server's
// 501), /props, /server_info, /version. header goes with every request (e.g. an
// API key); hc nil means http.DefaultClient. Errors: /v1/models unreachable, not
// 200 or undecodable; a failed /metrics is not an error (Info.MetricsErr).
func Probe(ctx context.Context, hc *http.Client, base string, header http.Header, kind engines.Kind) (Info, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	base = strings.TrimRight(base, "/")
	info := Info{URL: base, Kind: kind}
	if kind != engines.KindUnknown {
		info.Evidence = "configured"
	}
	code, b, _, err := get(ctx, hc, base+wire.PathModels, header)
	if err != nil {
		return info, fmt.Errorf("probing %s: GET /v1/models: %w", base, err)
	}
	if code != http.StatusOK {
		return info, fmt.Errorf("probing %s: GET /v1/models: http %d: %s", base, code, snippet(b))
	}
	models, err := ParseModels(b)
	if err != nil {
		return info, fmt.Errorf("probing %s: %w", base, err)
	}
	info.Models, info.ContextLength = models.IDs, models.ContextLength
	if info.Kind == engines.KindUnknown {
		if k := KindOfOwner(models.OwnedBy); k != engines.KindUnknown {
			info.Kind, info.Evidence = k, fmt.Sprintf("GET /v1/models owned_by %q", models.OwnedBy)
		}
	}

	// /metrics: read as the kind when known, else detect from the names.
	info.Metrics, info.MetricsErr = scrape.FetchEngine(ctx, hc, base+wire.PathMetrics, "", info.Kind)
	if info.Kind == engines.KindUnknown {
		var se *scrape.StatusError
		switch {
		case info.Metrics != nil && info.Metrics.Kind != engines.KindUnknown:
			info.Kind, info.Evidence = info.Metrics.Kind, "GET /metrics series prefix "+string(info.Metrics.Kind)+":"
		case errors.As(info.MetricsErr, &se) && se.Code == http.StatusNotImplemented && (se.Server == "llama.cpp" || strings.Contains(se.Body, "not_supported_error")):
			info.Kind, info.Evidence = engines.KindLlamaCpp, "GET /metrics 501 not_supported_error (llama-server without --metrics)"
		}
	}

	if info.Kind == engines.KindUnknown || info.Kind == engines.KindLlamaCpp {
		if code, b, _, err := get(ctx, hc, base+"/props", header); err == nil && code == http.StatusOK {
			if p, err := ParseProps(b); err == nil {
				if info.Kind == engines.KindUnknown {
					info.Kind, info.Evidence = engines.KindLlamaCpp, "GET /props total_slots"
				}
				info.Slots, info.KVCapacityTokens = p.Slots, p.KVCapacityTokens
				if !info.ContextLength.Has() {
					info.ContextLength = p.ContextLength
				}
				info.Version, info.VersionSource = p.BuildInfo, engines.SrcPropsBuildInfo
			}
		}
	}
	if info.Kind == engines.KindUnknown || info.Kind == engines.KindSGLang {
		for _, path := range []string{"/server_info", "/get_server_info"} {
			code, b, _, err := get(ctx, hc, base+path, header)
			if err != nil || code != http.StatusOK {
				continue
			}
			si, err := ParseServerInfo(b)
			if err != nil {
				continue
			}
			if info.Kind == engines.KindUnknown {
				info.Kind, info.Evidence = engines.KindSGLang, "GET "+path
			}
			src := func(s string) string { return strings.Replace(s, "/server_info", path, 1) }
			if si.KVCapacityTokens.Has() {
				info.KVCapacityTokens = engines.Of(si.KVCapacityTokens.V, src(si.KVCapacityTokens.Source))
			}
			if si.MaxRunningRequests.Has() {
				info.Slots = engines.Of(si.MaxRunningRequests.V, src(si.MaxRunningRequests.Source))
			}
			if !info.ContextLength.Has() && si.ContextLength.Has() {
				info.ContextLength = engines.Of(si.ContextLength.V, src(si.ContextLength.Source))
			}
			info.Version, info.VersionSource = si.Version, src(engines.SrcServerInfoVersion)
			break
		}
	}
	if info.Kind == engines.KindUnknown || info.Kind == engines.KindVLLM {
		if code, b, _, err := get(ctx, hc, base+wire.PathVersion, header); err == nil && code == http.StatusOK {
			if v, err := ParseVersion(b); err == nil {
				if info.Kind == engines.KindUnknown {
					info.Kind, info.Evidence = engines.KindVLLM, "GET /version"
				}
				info.Version, info.VersionSource = v, engines.SrcVersion
			}
		}
	}
	if info.Kind == engines.KindUnknown {
		info.Evidence = "no signal: /v1/models owner, /metrics names, /props, /server_info and /version said nothing known"
	} else if info.Metrics != nil && info.Metrics.Kind == engines.KindUnknown {
		// Detected from an endpoint after /metrics was read blind: read it again as the kind.
		info.Metrics, info.MetricsErr = scrape.FetchEngine(ctx, hc, base+wire.PathMetrics, "", info.Kind)
	}
	return info, nil
}

func get(ctx context.Context, hc *http.Client, url string, header http.Header) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, resp.Header, err
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

// FirstModel asks GET {base}/v1/models (the OpenAI-compatible model list vLLM,
// SGLang and llama-server serve) and returns the first id: the served model name.
// header (e.g. the API key's Authorization) goes with the request and may be nil;
// hc nil means http.DefaultClient. The request is bounded by 30 s. Errors name the
// URL and say what was wrong: transport error, "status N", an undecodable body
// (ParseModels), or an empty list.
func FirstModel(ctx context.Context, hc *http.Client, base string, header http.Header) (string, error) {
	m, err := ListModels(ctx, hc, base, header)
	if err != nil {
		return "", err
	}
	if len(m.IDs) == 0 || m.IDs[0] == "" {
		return "", fmt.Errorf("GET %s lists no model", strings.TrimRight(base, "/")+wire.PathModels)
	}
	return m.IDs[0], nil
}

// ListModels asks GET {base}/v1/models and returns the list (ParseModels), as
// FirstModel does (header, hc nil, the 30 s bound; hc's own timeout may be
// shorter). Errors: transport error, "status N" or an undecodable body, each
// naming the URL.
func ListModels(ctx context.Context, hc *http.Client, base string, header http.Header) (Models, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	url := strings.TrimRight(base, "/") + wire.PathModels
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code, b, _, err := get(ctx, hc, url, header)
	if err != nil {
		return Models{}, err
	}
	if code != http.StatusOK {
		return Models{}, fmt.Errorf("GET %s: status %d", url, code)
	}
	m, err := ParseModels(b)
	if err != nil {
		return Models{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return m, nil
}
