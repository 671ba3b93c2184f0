package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/loadgenhttp"
)

// EngineServer is what the pre-flight learned about one server of any engine
// kind: the probe (kind, evidence, context length, slots, KV capacity, the
// first /metrics read) and, for a server without readable /metrics, why.
type EngineServer struct {
	Info engineapi.Info
	// MetricsOff is "" when /metrics was read, else why it cannot be (a 501
	// from llama-server without --metrics, a 404 from SGLang without
	// --enable-metrics): the harness then scrapes nothing from the server and
	// its series columns are NaN with that reason.
	MetricsOff string
}

// PreflightEngines runs the pre-flight against servers of engine kind
// (engines.KindUnknown: detect each with engineapi.Probe). A server found or
// configured as vLLM goes through Preflight unchanged (its output, its
// /metrics requirement and its context check). For the others it prints the
// kind with its evidence, context length, slots and KV capacity with their
// sources and the /metrics state, and refuses when a session cannot fit the
// context length or the scenario's model is not served.
//
// The context check for another engine than vLLM: TokenizerAllowance was
// measured with the reference vLLM server's tokenizer only, so a last turn
// over the context at that allowance but within it at one server token per
// nominal token is a warning, not a refusal; over it even then is a refusal.
func PreflightEngines(ctx context.Context, w io.Writer, servers []string, kind engines.Kind, sc *loadgen.Scenario, hc *http.Client) ([]EngineServer, error) {
	sc = sc.WithDefaults()
	if hc == nil {
		hc = &http.Client{}
	}
	phc := &http.Client{Transport: hc.Transport, Timeout: 20 * time.Second}
	var (
		out  []EngineServer
		errs []error
	)
	for _, base := range servers {
		base = strings.TrimRight(base, "/")
		if kind == engines.KindVLLM {
			infos, err := Preflight(ctx, w, []string{base}, sc, hc)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, EngineServer{Info: engineapi.Info{URL: base, Kind: engines.KindVLLM, Evidence: "configured", KVCapacityTokens: vllmKV(infos)}})
			continue
		}
		info, err := engineapi.Probe(ctx, phc, base, nil, kind)
		if err != nil {
			// The vLLM pre-flight words the common failures (401: --api-key).
			// Its errors already start "pre-flight <url>: ".
			if _, perr := Preflight(ctx, io.Discard, []string{base}, sc, hc); perr != nil {
				errs = append(errs, perr)
				continue
			}
			errs = append(errs, fmt.Errorf("pre-flight %s: %w", base, err))
			continue
		}
		if info.Kind == engines.KindVLLM {
			fmt.Fprintf(w, "pre-flight %s: engine vllm (%s)\n", base, info.Evidence)
			if _, err := Preflight(ctx, w, []string{base}, sc, hc); err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, EngineServer{Info: info})
			continue
		}
		if info.Kind == engines.KindUnknown {
			errs = append(errs, fmt.Errorf("pre-flight %s: cannot tell the engine (%s): give it with --engine vllm|sglang|llamacpp", base, info.Evidence))
			continue
		}
		es := EngineServer{Info: info}
		var se *scrape.StatusError
		switch {
		case info.MetricsErr == nil && info.Metrics != nil && len(info.Metrics.Ranks) > 0:
		case errors.As(info.MetricsErr, &se) && (se.Code == http.StatusNotImplemented || se.Code == http.StatusNotFound):
			es.MetricsOff = fmt.Sprintf("metrics off: GET /metrics answered %d (%s)", se.Code, metricsFlag(info.Kind))
		case info.MetricsErr != nil:
			es.MetricsOff = fmt.Sprintf("metrics unreadable: %v", info.MetricsErr)
		default:
			es.MetricsOff = fmt.Sprintf("metrics unreadable: GET /metrics has no %s series", info.Kind)
		}
		out = append(out, es)
		fmt.Fprintf(w, "pre-flight %s: engine %s (%s), models %s, version %q\n", base, info.Kind, info.Evidence, strings.Join(info.Models, ","), info.Version)
		fmt.Fprintf(w, "  context length %s, slots %s, KV capacity %s tokens\n", info.ContextLength, info.Slots, info.KVCapacityTokens)
		if es.MetricsOff != "" {
			fmt.Fprintf(w, "  %s: series columns n/a; engine hit %% and replicas busy n/a, usage cached %% still from the responses\n", es.MetricsOff)
		}
		if n, ok := info.ContextLength.Get(); isBlockPrompts(sc) {
			// A trace's requests over the context fail one by one, as data
			// (or are skipped: an agent replay's over_length).
		} else if ok && n > 0 {
			need := LongestPromptEstimate(sc)
			floor := nominalContext(sc) + sc.MaxOutputTokens
			switch {
			case floor > int(n):
				errs = append(errs, fmt.Errorf("pre-flight %s: the scenario's last turn needs at least %d tokens (nominal %d + %d output, at one server token per nominal token) but the context length is %d (%s): shorten the scenario (turns, first_turn_tokens) or serve a larger context (llama-server: -c is divided by -np)",
					base, floor, nominalContext(sc), sc.MaxOutputTokens, int(n), info.ContextLength.Source))
			case need > int(n):
				fmt.Fprintf(w, "  warning: the last turn needs about %d tokens at %.1f server tokens per nominal token (measured for the reference vLLM tokenizer only), over the context length %d; at 1.0 it fits (%d)\n", need, TokenizerAllowance, int(n), floor)
			}
		} else {
			fmt.Fprintf(w, "  warning: no context length reported: the context check is skipped\n")
		}
		if sc.Model != "" && len(info.Models) > 0 && !contains(info.Models, sc.Model) {
			errs = append(errs, fmt.Errorf("pre-flight %s: scenario model %q is not served (served: %s)", base, sc.Model, strings.Join(info.Models, ", ")))
		}
	}
	return out, errors.Join(errs...)
}

// vllmKV is the KV capacity vLLM servers report (vllm:cache_config_info:
// (num_gpu_blocks - 1) x block_size per engine, summed), unset when none does.
func vllmKV(infos []ServerInfo) engines.Value {
	total := 0
	for _, in := range infos {
		for _, e := range in.Engines {
			total += e.BlockSize * max(e.NumGPUBlocks-1, 0)
		}
	}
	if total == 0 {
		return engines.Value{}
	}
	return engines.Value{V: float64(total), Source: engines.SrcVLLMKVCapacity}
}

// metricsFlag names the server flag that turns /metrics on.
func metricsFlag(k engines.Kind) string {
	switch k {
	case engines.KindLlamaCpp:
		return "llama-server needs --metrics"
	case engines.KindSGLang:
		return "sglang.launch_server needs --enable-metrics"
	}
	return "metrics disabled"
}

// replicaEngine is the manifest's record of one replica of server es.
func replicaEngine(name string, es EngineServer) loadgen.ReplicaEngine {
	k := es.Info.Kind
	c := engines.CapabilityOf(k)
	var seen *engines.Stats
	if m := es.Info.Metrics; m != nil && len(m.Ranks) > 0 {
		seen = m.Ranks[0]
	}
	re := loadgen.ReplicaEngine{Replica: name, Kind: string(k), Evidence: es.Info.Evidence,
		Columns: loadgenhttp.EngineColumns(k, es.MetricsOff, seen)}
	if p := c.ResetPrefixCache; p.Path != "" {
		re.ResetPrefixCache = p.Method + " " + p.Path
	} else {
		re.ResetPrefixCache = "none: " + p.Note
	}
	return re
}

// NoResetNote is the manifest and summary note for an engine without a
// prefix-cache reset endpoint (llama.cpp).
func NoResetNote(k engines.Kind) string {
	return fmt.Sprintf("%s has no prefix-cache reset endpoint (%s): every variant after the first starts with the caches the previous one left warm; "+
		"for a cold start per variant run them as two runs with a server restart between (--variants off, then --variants on) and compare the two with warden compare",
		k, engines.CapabilityOf(k).ResetPrefixCache.Note)
}
