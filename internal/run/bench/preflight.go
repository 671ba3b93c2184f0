package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
)

// TokenizerAllowance is how many server tokens the pre-flight assumes per nominal
// token when it checks that a session fits max_model_len. The reference generator
// measured 7.2-7.5k server tokens for a nominal 6k (docs/measurements.md, "The
// reference measurement"), a
// ratio of 1.2-1.25; 1.3 leaves a margin for a less favourable tokenizer.
const TokenizerAllowance = 1.3

// ServerInfo is what the pre-flight learned from one vLLM server.
type ServerInfo struct {
	URL         string
	Version     string // GET /version "version"; "" if the server has no /version
	Models      []string
	MaxModelLen int // from /v1/models "max_model_len" (0 if absent)
	// Engines: block size and KV blocks per engine label, from vllm:cache_config_info.
	Engines []vllmmetrics.Engine
}

// Preflight asks every server what it serves (GET /v1/models, /version, /metrics),
// prints it to w, and refuses with a clear error when the scenario's longest
// session cannot fit max_model_len or the scenario's model is not served.
//
// hc is the client for these requests (it carries the API key, if any); nil
// means a plain client. Every request has a 20 s timeout.
func Preflight(ctx context.Context, w io.Writer, servers []string, sc *loadgen.Scenario, hc *http.Client) ([]ServerInfo, error) {
	sc = sc.WithDefaults()
	if hc == nil {
		hc = &http.Client{}
	}
	hc = &http.Client{Transport: hc.Transport, Timeout: 20 * time.Second}
	need := LongestPromptEstimate(sc)
	var (
		infos []ServerInfo
		errs  []error
	)
	for _, base := range servers {
		base = strings.TrimRight(base, "/")
		info, err := probe(ctx, hc, base)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		infos = append(infos, info)
		fmt.Fprintf(w, "pre-flight %s: version %q, models %s, max_model_len %d\n", base, info.Version, strings.Join(info.Models, ","), info.MaxModelLen)
		for _, e := range info.Engines {
			// Block 0 is vLLM's null block (never allocated), so the cache holds
			// (num_gpu_blocks - 1) x block_size tokens, as the router counts it.
			fmt.Fprintf(w, "  engine %q: block_size %d, num_gpu_blocks %d (%d tokens of KV cache)\n", e.Engine, e.BlockSize, e.NumGPUBlocks, e.BlockSize*max(e.NumGPUBlocks-1, 0))
		}
		if info.MaxModelLen > 0 && need > info.MaxModelLen && !isBlockPrompts(sc) {
			errs = append(errs, fmt.Errorf("pre-flight %s: the scenario's last turn needs about %d tokens (nominal %d x %.1f + %d output) but max_model_len is %d: shorten the scenario (turns, first_turn_tokens) or serve with a larger --max-model-len",
				base, need, nominalContext(sc), TokenizerAllowance, sc.MaxOutputTokens, info.MaxModelLen))
		}
		if sc.Model != "" && len(info.Models) > 0 && !contains(info.Models, sc.Model) {
			errs = append(errs, fmt.Errorf("pre-flight %s: scenario model %q is not served (served: %s)", base, sc.Model, strings.Join(info.Models, ", ")))
		}
	}
	return infos, errors.Join(errs...)
}

// isBlockPrompts reports whether sc sends requests synthesized from block ids
// (a trace replay, shape agent), which the chain's context checks do not fit.
func isBlockPrompts(sc *loadgen.Scenario) bool {
	_, _, ok := sc.BlockPrompts()
	return ok
}

// nominalContext is the nominal size of a session's last prompt: system prompt,
// every user message and every earlier reply at the output limit.
func nominalContext(sc *loadgen.Scenario) int {
	first := sc.FirstTurnTokens
	if sc.FirstTurnSpread.Max > first {
		first = sc.FirstTurnSpread.Max
	}
	turn := sc.TurnTokens
	if sc.TurnSpread.Max > turn {
		turn = sc.TurnSpread.Max
	}
	sys := sc.SystemPromptTokens
	if sc.SystemPromptSpread.Max > sys {
		sys = sc.SystemPromptSpread.Max
	}
	return sys + first + (sc.Turns-1)*turn + (sc.Turns-1)*sc.MaxOutputTokens
}

// LongestPromptEstimate is the pre-flight's estimate, in server tokens, of a
// session's longest request: its last prompt times TokenizerAllowance plus the
// output limit.
func LongestPromptEstimate(sc *loadgen.Scenario) int {
	sc = sc.WithDefaults()
	return int(float64(nominalContext(sc))*TokenizerAllowance) + sc.MaxOutputTokens
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	if v == nil {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(v)
}

func probe(ctx context.Context, hc *http.Client, base string) (ServerInfo, error) {
	info := ServerInfo{URL: base}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	code, err := getJSON(ctx, hc, base+wire.PathModels, &models)
	if err != nil {
		return info, fmt.Errorf("pre-flight %s: GET /v1/models: %w (is the server up?)", base, err)
	}
	if code == http.StatusUnauthorized {
		return info, fmt.Errorf("pre-flight %s: GET /v1/models: http 401: the server wants an API key (vllm serve --api-key): give it with --api-key or $VLLM_API_KEY", base)
	}
	if code != http.StatusOK {
		return info, fmt.Errorf("pre-flight %s: GET /v1/models: http %d", base, code)
	}
	for _, m := range models.Data {
		info.Models = append(info.Models, m.ID)
		if m.MaxModelLen > info.MaxModelLen {
			info.MaxModelLen = m.MaxModelLen
		}
	}
	var ver struct {
		Version string `json:"version"`
	}
	if code, err := getJSON(ctx, hc, base+wire.PathVersion, &ver); err == nil && code == http.StatusOK {
		info.Version = ver.Version
	}
	snap, err := scrape.Fetch(ctx, hc, base+wire.PathMetrics, "")
	if err != nil {
		return info, fmt.Errorf("pre-flight %s: %w", base, err)
	}
	for _, e := range snap.Engines {
		info.Engines = append(info.Engines, *e)
	}
	return info, nil
}
