package loadgenhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/lmwarden/warden/internal/wire"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
)

// Tokenize dialects (CalibrateTrace).
const (
	// TokenizeVLLM is vLLM's POST /tokenize with chat messages (the chat
	// template applied, add_generation_prompt true), answering {"count"};
	// warden sim serves the same.
	TokenizeVLLM = "vllm"
	// TokenizeLlamaCpp is llama.cpp's POST /tokenize {"content"} answering
	// {"tokens"}: content only, the chat template's tokens are not counted
	// (llama.cpp tools/server/README.md).
	TokenizeLlamaCpp = "llamacpp"
)

// CalibrationSamples is how many requests of the slice CalibrateTrace measures.
const CalibrationSamples = 20

// CalibrateTrace fits trace prompts to the tokenizer of the server at base: it
// measures the chat template's own tokens (an empty user message) and the
// tokens of one block's words, sets Synth.TokensPerWord and Overhead from
// them, then tokenizes samples' synthesized prompts and reports their error
// against input_length. A server without the endpoint (404, 405, 501) gets the
// default Synth and Endpoint "none"; other failures are errors.
func CalibrateTrace(ctx context.Context, hc *http.Client, base, model, dialect string, header http.Header, blockSize int, salt uint64, samples []loadgen.TraceTurn) (trace.Synth, loadgen.TraceCalibration, error) {
	s := trace.Synth{BlockSize: blockSize, Salt: salt}
	cal := loadgen.TraceCalibration{Endpoint: "POST /tokenize (" + dialect + ")", TokensPerWord: 1, ErrP50Pct: -1, ErrMaxPct: -1}
	root := strings.TrimSuffix(base, "/")
	templated := false // llama.cpp: the chat template applied through /apply-template first
	count := func(content string) (int, error) {
		if templated {
			p, err := applyTemplate(ctx, hc, root+wire.PathApplyTemplate, header, content)
			if err != nil {
				return 0, err
			}
			content = p
		}
		return tokenizeCount(ctx, hc, root+wire.PathTokenize, model, dialect, header, content)
	}
	if dialect == TokenizeLlamaCpp {
		if _, err := applyTemplate(ctx, hc, root+wire.PathApplyTemplate, header, ""); err == nil {
			templated = true
			cal.Endpoint = "POST /apply-template + POST /tokenize (llamacpp)"
		} else if _, ok := err.(unsupportedError); ok {
			cal.Note = "no /apply-template: llama.cpp's /tokenize counts content only, the chat template's tokens are not in the count"
		} else {
			return s, cal, fmt.Errorf("calibrating trace prompts: %w", err)
		}
	}
	empty, err := count("")
	if err != nil {
		if ue, ok := err.(unsupportedError); ok {
			cal.Endpoint, cal.Note = "none", fmt.Sprintf("%s: %v; the default of one token per word is used and the prompt-token error is unknown", base, ue.error)
			return s, cal, nil
		}
		return s, cal, fmt.Errorf("calibrating trace prompts: %w", err)
	}
	var sb strings.Builder
	probe := trace.Request{InputLength: s.WordsPerBlock(), HashIDs: []int64{math.MaxInt64 - 1}}
	_ = s.WriteContent(&sb, &probe, -1)
	block, err := count(sb.String())
	if err != nil {
		return s, cal, fmt.Errorf("calibrating trace prompts: %w", err)
	}
	words := s.WordsPerBlock()
	if block-empty <= 0 {
		return s, cal, fmt.Errorf("calibrating trace prompts: %d words counted %d tokens (%d with the template)", words, block-empty, block)
	}
	s.TokensPerWord = float64(block-empty) / float64(words)
	s.Overhead = empty
	cal.TokensPerWord, cal.OverheadTokens = s.TokensPerWord, s.Overhead
	var errs []float64
	for _, tt := range samples {
		sb.Reset()
		_ = s.WriteContent(&sb, &tt.Request, tt.Index)
		n, err := count(sb.String())
		if err != nil {
			return s, cal, fmt.Errorf("calibrating trace prompts: request %d: %w", tt.Index, err)
		}
		errs = append(errs, 100*math.Abs(float64(n-tt.Request.InputLength))/float64(tt.Request.InputLength))
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		cal.Samples = len(errs)
		cal.ErrP50Pct, cal.ErrMaxPct = errs[(len(errs)-1)/2], errs[len(errs)-1]
	}
	return s, cal, nil
}

// unsupportedError: the server has no tokenize endpoint.
type unsupportedError struct{ error }

func tokenizeCount(ctx context.Context, hc *http.Client, url, model, dialect string, header http.Header, content string) (int, error) {
	var body any
	if dialect == TokenizeLlamaCpp {
		body = map[string]any{"content": content}
	} else {
		b := map[string]any{"messages": []openAIMessage{{Role: "user", Content: content}}, "add_generation_prompt": true}
		if model != "" {
			b["model"] = model
		}
		body = b
	}
	var out struct {
		Count  *int  `json:"count"`
		Tokens []any `json:"tokens"`
	}
	if err := postJSON(ctx, hc, url, header, body, &out); err != nil {
		return 0, err
	}
	if out.Count != nil {
		return *out.Count, nil
	}
	if out.Tokens != nil {
		return len(out.Tokens), nil
	}
	return 0, fmt.Errorf("POST %s: the answer has neither count nor tokens", url)
}

// applyTemplate renders one user message through llama.cpp's POST
// /apply-template ({"messages"} -> {"prompt"}).
func applyTemplate(ctx context.Context, hc *http.Client, url string, header http.Header, content string) (string, error) {
	var out struct {
		Prompt *string `json:"prompt"`
	}
	body := map[string]any{"messages": []openAIMessage{{Role: "user", Content: content}}}
	if err := postJSON(ctx, hc, url, header, body, &out); err != nil {
		return "", err
	}
	if out.Prompt == nil {
		return "", fmt.Errorf("POST %s: the answer has no prompt", url)
	}
	return *out.Prompt, nil
}

// postJSON posts body and decodes a 200 answer into out; 404, 405 and 501 are
// an unsupportedError.
func postJSON(ctx context.Context, hc *http.Client, url string, header http.Header, body, out any) error {
	req, err := newJSONRequest(ctx, url, body, header)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("POST %s: reading the answer: %w", url, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return unsupportedError{fmt.Errorf("POST %s: http %d", url, resp.StatusCode)}
	default:
		return fmt.Errorf("POST %s: http %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b[:min(len(b), 256)])))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("POST %s: decoding the answer: %w", url, err)
	}
	return nil
}
