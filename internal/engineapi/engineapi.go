// Package engineapi reads an inference engine's JSON endpoints, the ones besides
// /metrics that say what a replica is: GET /v1/models (served models and context
// length), llama.cpp's GET /props, SGLang's GET /server_info (GET /get_server_info
// before the rename) and vLLM's GET /version. Parse* functions take a body and are
// pure; Probe makes the requests and, when the kind is not configured, detects it;
// FirstModel asks only the served model name (the harness's runner, the router's
// DP pinning check). The one /v1/models decoder is ParseModels.
// Every figure is an engines.Value naming its endpoint and field.
package engineapi

import (
	"encoding/json"
	"fmt"

	"github.com/lmwarden/warden/internal/engines"
)

// Models is what GET /v1/models says.
type Models struct {
	IDs []string
	// ContextLength is the largest context of the listed models: vLLM and SGLang
	// give data[].max_model_len, llama.cpp data[].meta.n_ctx (tokens per slot).
	ContextLength engines.Value
	// OwnedBy is data[0].owned_by: "vllm", "sglang" and "llamacpp" name the engine.
	OwnedBy string
}

// ParseModels reads a /v1/models body (OpenAI's list shape). Errors: undecodable
// JSON.
func ParseModels(b []byte) (Models, error) {
	var body struct {
		Data []struct {
			ID          string `json:"id"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen *int   `json:"max_model_len"`
			Meta        *struct {
				NCtx *int `json:"n_ctx"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return Models{}, fmt.Errorf("decoding /v1/models: %w", err)
	}
	var m Models
	for i, d := range body.Data {
		m.IDs = append(m.IDs, d.ID)
		if i == 0 {
			m.OwnedBy = d.OwnedBy
		}
		switch {
		case d.MaxModelLen != nil && float64(*d.MaxModelLen) > m.ContextLength.V:
			m.ContextLength = engines.Of(float64(*d.MaxModelLen), engines.SrcModelsMaxModelLen)
		case d.MaxModelLen == nil && d.Meta != nil && d.Meta.NCtx != nil && float64(*d.Meta.NCtx) > m.ContextLength.V:
			m.ContextLength = engines.Of(float64(*d.Meta.NCtx), engines.SrcModelsMetaNCtx)
		}
	}
	return m, nil
}

// KindOfOwner maps /v1/models owned_by to an engine kind (KindUnknown if none).
func KindOfOwner(ownedBy string) engines.Kind {
	switch ownedBy {
	case "vllm":
		return engines.KindVLLM
	case "sglang":
		return engines.KindSGLang
	case "llamacpp":
		return engines.KindLlamaCpp
	}
	return engines.KindUnknown
}

// Props is what llama.cpp's GET /props says (tools/server; recorded in
// testdata/llamacpp/props.txt).
type Props struct {
	Slots            engines.Value // total_slots (-np)
	ContextLength    engines.Value // default_generation_settings.n_ctx, per slot
	KVCapacityTokens engines.Value // total_slots x n_ctx
	BuildInfo        string        // build_info, e.g. "b0-unknown"
	MetricsEnabled   bool          // endpoint_metrics (--metrics)
}

// ParseProps reads a /props body. Errors: undecodable JSON, or no total_slots
// (then it is not llama.cpp's /props).
func ParseProps(b []byte) (Props, error) {
	var body struct {
		TotalSlots *int `json:"total_slots"`
		Defaults   struct {
			NCtx *int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		BuildInfo       string `json:"build_info"`
		EndpointMetrics bool   `json:"endpoint_metrics"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return Props{}, fmt.Errorf("decoding /props: %w", err)
	}
	if body.TotalSlots == nil {
		return Props{}, fmt.Errorf("decoding /props: no total_slots (not llama-server's /props)")
	}
	p := Props{Slots: engines.Of(float64(*body.TotalSlots), engines.SrcPropsTotalSlots),
		BuildInfo: body.BuildInfo, MetricsEnabled: body.EndpointMetrics}
	if n := body.Defaults.NCtx; n != nil {
		p.ContextLength = engines.Of(float64(*n), engines.SrcPropsNCtx)
		p.KVCapacityTokens = engines.Of(float64(*n**body.TotalSlots), engines.SrcPropsKVCapacity)
	}
	return p, nil
}

// ServerInfo is what SGLang's GET /server_info (GET /get_server_info in versions
// before the rename, sgl-project/sglang PR #21463) says: the server arguments, the
// scheduler info and the version merged into one object
// (python/sglang/srt/entrypoints/http_server.py). Built from source; no recorded
// body was available.
type ServerInfo struct {
	Version            string
	KVCapacityTokens   engines.Value // max_total_num_tokens (scheduler info)
	MaxRunningRequests engines.Value // max_running_requests; absent when null (sized automatically)
	ContextLength      engines.Value // context_length; absent when null (the model's own)
	DPSize             int           // dp_size (0 when absent)
}

// ParseServerInfo reads a /server_info body. Errors: undecodable JSON, or neither
// max_total_num_tokens nor version (then it is not SGLang's server info).
func ParseServerInfo(b []byte) (ServerInfo, error) {
	var body struct {
		Version            string `json:"version"`
		MaxTotalNumTokens  *int   `json:"max_total_num_tokens"`
		MaxRunningRequests *int   `json:"max_running_requests"`
		ContextLength      *int   `json:"context_length"`
		DPSize             int    `json:"dp_size"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return ServerInfo{}, fmt.Errorf("decoding /server_info: %w", err)
	}
	if body.MaxTotalNumTokens == nil && body.Version == "" {
		return ServerInfo{}, fmt.Errorf("decoding /server_info: neither max_total_num_tokens nor version (not SGLang's server info)")
	}
	si := ServerInfo{Version: body.Version, DPSize: body.DPSize}
	if v := body.MaxTotalNumTokens; v != nil {
		si.KVCapacityTokens = engines.Of(float64(*v), engines.SrcServerInfoMaxTok)
	}
	if v := body.MaxRunningRequests; v != nil {
		si.MaxRunningRequests = engines.Of(float64(*v), engines.SrcServerInfoMaxRun)
	}
	if v := body.ContextLength; v != nil {
		si.ContextLength = engines.Of(float64(*v), engines.SrcServerInfoCtxLen)
	}
	return si, nil
}

// ParseVersion reads vLLM's GET /version body {"version": "..."}. Errors:
// undecodable JSON or an empty version.
func ParseVersion(b []byte) (string, error) {
	var body struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return "", fmt.Errorf("decoding /version: %w", err)
	}
	if body.Version == "" {
		return "", fmt.Errorf("decoding /version: no version")
	}
	return body.Version, nil
}
