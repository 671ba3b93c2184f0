// Package vllmapi holds the small client-side reads of a vLLM server's API that
// several packages make (loadgen's runner, the router's pinning check), so that
// router and loadgen need not import each other.
package vllmapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// FirstModel asks GET {base}/v1/models (vLLM's OpenAI-compatible model list) and
// returns the first id: the served model name. header (e.g. the API key's
// Authorization) goes with the request and may be nil; hc nil means
// http.DefaultClient. The request is bounded by 30 s. Errors name the URL and
// say what was wrong: transport error, "status N", an undecodable body, or an
// empty list.
func FirstModel(ctx context.Context, hc *http.Client, base string, header http.Header) (string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	url := strings.TrimSuffix(base, "/") + wire.PathModels
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return "", fmt.Errorf("decoding GET %s: %w", url, err)
	}
	if len(body.Data) == 0 || body.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s lists no model", url)
	}
	return body.Data[0].ID, nil
}
