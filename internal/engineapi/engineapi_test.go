package engineapi

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/engines"
)

// replay serves recorded raw responses (curl -i) by path; unknown paths get the
// recorded 404.
func replay(t *testing.T, files map[string]string) *httptest.Server {
	t.Helper()
	load := func(name string) (*http.Response, []byte) {
		f, err := os.Open("testdata/llamacpp/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		resp, err := http.ReadResponse(bufio.NewReader(f), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := files[r.URL.Path]
		if !ok {
			name = "version.txt" // the recorded 404
		}
		resp, b := load(name)
		for k, v := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
	}))
}

func recordedBody(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open("testdata/llamacpp/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resp, err := http.ReadResponse(bufio.NewReader(f), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return b
}

func TestParseModels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  []byte
		ids   int
		ctx   engines.Value
		owner string
	}{
		{"llama.cpp recorded", recordedBody(t, "models.txt"), 1, engines.Of(8192, engines.SrcModelsMetaNCtx), "llamacpp"},
		{"vllm", []byte(`{"object":"list","data":[{"id":"qwen3-4b","object":"model","owned_by":"vllm","max_model_len":32768}]}`), 1, engines.Of(32768, engines.SrcModelsMaxModelLen), "vllm"},
		// SGLang's ModelCard (http_server.py available_models) has max_model_len too.
		{"sglang", []byte(`{"object":"list","data":[{"id":"qwen3-4b","object":"model","created":1,"owned_by":"sglang","root":"qwen3-4b","max_model_len":40960}]}`), 1, engines.Of(40960, engines.SrcModelsMaxModelLen), "sglang"},
		{"no context", []byte(`{"data":[{"id":"m"}]}`), 1, engines.Value{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseModels(tc.body)
			if err != nil || len(m.IDs) != tc.ids || m.ContextLength != tc.ctx || m.OwnedBy != tc.owner {
				t.Errorf("got %+v, %v", m, err)
			}
		})
	}
	if _, err := ParseModels([]byte("<html>")); err == nil {
		t.Error("want an error for HTML")
	}
}

func TestParsePropsRecorded(t *testing.T) {
	p, err := ParseProps(recordedBody(t, "props.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// -c 16384 -np 2: two slots of 8192 tokens.
	if p.Slots != engines.Of(2, engines.SrcPropsTotalSlots) || p.ContextLength != engines.Of(8192, engines.SrcPropsNCtx) ||
		p.KVCapacityTokens != engines.Of(16384, engines.SrcPropsKVCapacity) || p.BuildInfo != "b0-unknown" || !p.MetricsEnabled {
		t.Errorf("props %+v", p)
	}
	if _, err := ParseProps([]byte(`{"version":"0.10.0"}`)); err == nil {
		t.Error("a body without total_slots must not read as /props")
	}
}

func TestParseServerInfo(t *testing.T) {
	// Shape from SGLang's http_server.py server_info: server_args fields, the
	// scheduler info and "version" in one object (built from source, not recorded).
	body := []byte(`{"model_path":"Qwen/Qwen3-4B","served_model_name":"qwen3-4b","context_length":null,"max_running_requests":null,"dp_size":1,"max_total_num_tokens":75500,"max_req_input_len":40954,"internal_states":[{}],"version":"0.5.4"}`)
	si, err := ParseServerInfo(body)
	if err != nil {
		t.Fatal(err)
	}
	if si.Version != "0.5.4" || si.KVCapacityTokens != engines.Of(75500, engines.SrcServerInfoMaxTok) || si.MaxRunningRequests.Has() || si.ContextLength.Has() || si.DPSize != 1 {
		t.Errorf("server info %+v", si)
	}
	if _, err := ParseServerInfo([]byte(`{"status":"ok"}`)); err == nil {
		t.Error("llama.cpp's /health must not read as server info")
	}
	if v, err := ParseVersion([]byte(`{"version":"0.10.1"}`)); err != nil || v != "0.10.1" {
		t.Errorf("ParseVersion = %q, %v", v, err)
	}
}

func TestProbeDetectsLlamaCppWithoutMetrics(t *testing.T) {
	srv := replay(t, map[string]string{"/v1/models": "models.txt", "/props": "props.txt", "/metrics": "metrics-disabled.txt"})
	defer srv.Close()
	for _, configured := range []engines.Kind{engines.KindUnknown, engines.KindLlamaCpp} {
		info, err := Probe(t.Context(), nil, srv.URL+"/", nil, configured)
		if err != nil {
			t.Fatal(err)
		}
		if info.Kind != engines.KindLlamaCpp || info.Evidence == "" {
			t.Errorf("kind %q evidence %q", info.Kind, info.Evidence)
		}
		if info.Slots.V != 2 || info.ContextLength != engines.Of(8192, engines.SrcModelsMetaNCtx) || info.KVCapacityTokens.V != 16384 {
			t.Errorf("figures %+v", info)
		}
		if info.Metrics != nil || info.MetricsErr == nil || info.Version != "b0-unknown" {
			t.Errorf("metrics %+v err %v version %q", info.Metrics, info.MetricsErr, info.Version)
		}
	}
}

func TestProbeSGLangFallsBackToGetServerInfo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model","max_model_len":4096}]}`))
		case "/get_server_info": // an older SGLang: no /server_info yet
			w.Write([]byte(`{"max_total_num_tokens":1000,"max_running_requests":8,"version":"0.4.6"}`))
		default:
			http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	info, err := Probe(t.Context(), nil, srv.URL, nil, engines.KindUnknown)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != engines.KindSGLang || info.Evidence != "GET /get_server_info" || info.Slots != engines.Of(8, "GET /get_server_info max_running_requests") ||
		info.KVCapacityTokens.V != 1000 || info.Version != "0.4.6" || info.MetricsErr == nil {
		t.Errorf("info %+v", info)
	}
}

func TestProbeModelsError(t *testing.T) {
	srv := replay(t, map[string]string{})
	defer srv.Close()
	if _, err := Probe(t.Context(), nil, srv.URL, nil, engines.KindUnknown); err == nil {
		t.Error("want an error when /v1/models is 404")
	}
}

func FuzzParsers(f *testing.F) {
	f.Add([]byte(`{"data":[{"id":"m","meta":{"n_ctx":8}}],"total_slots":2,"default_generation_settings":{"n_ctx":4},"max_total_num_tokens":3}`))
	f.Add([]byte(`{"data":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := ParseModels(b); err == nil && m.ContextLength.V < 0 && !m.ContextLength.Has() {
			t.Fatal("absent context length with a value")
		}
		ParseProps(b)
		ParseServerInfo(b)
		ParseVersion(b)
	})
}

// FirstModel (moved from internal/vllmapi, the second /v1/models decoder).
func TestFirstModel(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		want, err  string
	}{
		{"served", `{"object":"list","data":[{"id":"qwen3-4b"},{"id":"other"}]}`, 200, "qwen3-4b", ""},
		{"refused", `{"error":"Unauthorized"}`, 401, "", "status 401"},
		{"empty list", `{"object":"list","data":[]}`, 200, "", "lists no model"},
		{"not JSON", `<html>`, 200, "", "decoding /v1/models"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer k" {
					http.Error(w, "wrong path or header", http.StatusTeapot)
					return
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			got, err := FirstModel(context.Background(), nil, srv.URL+"/", http.Header{"Authorization": {"Bearer k"}})
			if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("got %q, %v; want %q, error with %q", got, err, tc.want, tc.err)
			}
		})
	}
}
