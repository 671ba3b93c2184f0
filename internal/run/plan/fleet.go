package plan

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/engineapi"
	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/scrape"
	"github.com/lmwarden/warden/internal/vllmmetrics"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/sim"
)

// Fleet is what the planner simulates: Replicas engines of one configuration.
// Zero NumGPUBlocks, BlockSize and MaxModelLen take the profile's (sim.EngineConfig).
type Fleet struct {
	Profile      sim.Profile // step costs (prefill, decode) and, unless overridden, the KV cache
	Replicas     int
	MaxNumSeqs   int
	NumGPUBlocks int
	BlockSize    int
	MaxModelLen  int
	// Figures says where each figure came from, in print order.
	Figures []Figure
}

// Figure is one fleet figure and its source.
type Figure struct {
	Name   string // replicas, num_gpu_blocks, block_size, max_num_seqs, max_model_len, kv_tokens, step costs
	Value  string
	Source string
}

// Figure names.
const (
	FigReplicas     = "replicas"
	FigNumGPUBlocks = "num_gpu_blocks"
	FigBlockSize    = "block_size"
	FigMaxNumSeqs   = "max_num_seqs"
	FigMaxModelLen  = "max_model_len"
	FigKVTokens     = "kv_tokens_per_replica"
	FigStepCosts    = "step costs"
)

// engineConfig is the per-engine simulator configuration.
func (f *Fleet) engineConfig() sim.EngineConfig {
	return sim.EngineConfig{Profile: f.Profile, MaxNumSeqs: f.MaxNumSeqs, NumGPUBlocks: f.NumGPUBlocks, BlockSize: f.BlockSize, MaxModelLen: f.MaxModelLen}
}

// resolved returns the engine configuration with the simulator's defaults
// filled (sim.NewEngine), or its error (an impossible cache).
func (f *Fleet) resolved() (sim.EngineConfig, error) {
	e, err := sim.NewEngine(f.engineConfig())
	if err != nil {
		return sim.EngineConfig{}, fmt.Errorf("fleet of %s: %w", f.Profile.Name, err)
	}
	return e.Config(), nil
}

// KVTokens is one replica's KV cache in tokens: (num_gpu_blocks - 1) x block_size,
// as the router reads vllm:cache_config_info (block 0 is vLLM's null block).
func (f *Fleet) KVTokens() (int64, error) {
	c, err := f.resolved()
	if err != nil {
		return 0, err
	}
	return int64(c.NumGPUBlocks-1) * int64(c.BlockSize), nil
}

// withReplicas is the fleet with n replicas (the inverse search).
func (f Fleet) withReplicas(n int) Fleet {
	f.Replicas = n
	return f
}

// finish fills the figures the sources left to the simulator's defaults.
func (f *Fleet) finish() error {
	c, err := f.resolved()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, g := range f.Figures {
		have[g.Name] = true
	}
	def := "profile " + f.Profile.Name + " (sim defaults: memory arithmetic of the profile)"
	add := func(name string, v int) {
		if !have[name] {
			f.Figures = append(f.Figures, Figure{name, strconv.Itoa(v), def})
		}
	}
	add(FigNumGPUBlocks, c.NumGPUBlocks)
	add(FigBlockSize, c.BlockSize)
	add(FigMaxModelLen, c.MaxModelLen)
	kv := int64(c.NumGPUBlocks-1) * int64(c.BlockSize)
	f.Figures = append(f.Figures, Figure{FigKVTokens, strconv.FormatInt(kv, 10), "(num_gpu_blocks - 1) x block_size"})
	return nil
}

// FleetFromProfile is replicas engines of the named built-in profile, with
// maxNumSeqs per engine (0: sim.ReferenceMaxNumSeqs, the reference server's).
// Errors: unknown profile, replicas < 1.
func FleetFromProfile(profile string, replicas, maxNumSeqs int) (Fleet, error) {
	p, err := sim.LookupProfile(profile)
	if err != nil {
		return Fleet{}, err
	}
	if replicas < 1 {
		return Fleet{}, fmt.Errorf("fleet: replicas %d: must be at least 1", replicas)
	}
	f := Fleet{Profile: p, Replicas: replicas, MaxNumSeqs: maxNumSeqs}
	f.Figures = append(f.Figures, Figure{FigReplicas, strconv.Itoa(replicas), "--replicas"})
	f.Figures = append(f.Figures, Figure{FigStepCosts, p.Name, "profile"})
	if maxNumSeqs > 0 {
		f.Figures = append(f.Figures, Figure{FigMaxNumSeqs, strconv.Itoa(maxNumSeqs), "--max-num-seqs"})
	} else {
		f.MaxNumSeqs = sim.ReferenceMaxNumSeqs
		f.Figures = append(f.Figures, Figure{FigMaxNumSeqs, strconv.Itoa(sim.ReferenceMaxNumSeqs), "sim.ReferenceMaxNumSeqs (the reference server's)"})
	}
	return f, f.finish()
}

// ErrMissingFigures is wrapped when a server does not say what the planner needs.
var ErrMissingFigures = errors.New("server lacks figures the planner needs")

// FleetFromServers reads the fleet of real vLLM servers: every DP rank of every
// URL is a replica; num_gpu_blocks and block_size come from each rank's
// vllm:cache_config_info on GET /metrics, max_model_len from GET /v1/models
// data[].max_model_len. vLLM does not export max_num_seqs, so it comes from
// maxNumSeqs (the serve command's --max-num-seqs) or, when 0, vLLM's default
// router.VLLMDefaultMaxNumSeqs (256), said so in Figures. Step costs come from the
// simulator profile (a server does not expose them). Errors: a server that
// cannot be read, one without the figures (wrapping ErrMissingFigures and
// naming each figure and what the server said instead), ranks that disagree.
func FleetFromServers(ctx context.Context, hc *http.Client, urls []string, header http.Header, profile string, maxNumSeqs int) (Fleet, error) {
	p, err := sim.LookupProfile(profile)
	if err != nil {
		return Fleet{}, err
	}
	if len(urls) == 0 {
		return Fleet{}, errors.New("fleet: no server URL")
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	f := Fleet{Profile: p}
	var ranks int
	var blocks, bsize, mml int
	var errs []error
	for _, u := range urls {
		base := strings.TrimRight(u, "/")
		info, err := engineapi.Probe(ctx, hc, base, header, engines.KindUnknown)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if info.Kind != engines.KindVLLM {
			errs = append(errs, fmt.Errorf("%w: %s is %s (%s), not vLLM: the planner reads num_gpu_blocks and block_size from vllm:cache_config_info", ErrMissingFigures, base, kindName(info.Kind), info.Evidence))
			continue
		}
		snap, err := scrape.Fetch(ctx, hc, base+"/metrics", "warden-plan")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var missing []string
		if info.ContextLength.Source != engines.SrcModelsMaxModelLen {
			missing = append(missing, "max_model_len (GET /v1/models data[].max_model_len: absent)")
		}
		if len(snap.Engines) == 0 {
			missing = append(missing, "num_gpu_blocks and block_size (GET /metrics: no vllm: series)")
		}
		for _, e := range snap.Engines {
			if !e.Present[vllmmetrics.CacheConfigInfo] || e.NumGPUBlocks <= 1 || e.BlockSize <= 0 {
				missing = append(missing, fmt.Sprintf("num_gpu_blocks and block_size (GET /metrics engine %q: no %s with them)", e.Engine, vllmmetrics.CacheConfigInfo))
				continue
			}
			if ranks > 0 && (e.NumGPUBlocks != blocks || e.BlockSize != bsize) {
				errs = append(errs, fmt.Errorf("fleet: %s engine %q has %d blocks of %d tokens, an earlier rank %d of %d: the planner simulates one configuration", base, e.Engine, e.NumGPUBlocks, e.BlockSize, blocks, bsize))
				continue
			}
			blocks, bsize = e.NumGPUBlocks, e.BlockSize
			ranks++
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("%w: %s: %s", ErrMissingFigures, base, strings.Join(missing, "; ")))
			continue
		}
		if l := int(info.ContextLength.V); mml == 0 || l < mml {
			mml = l
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Fleet{}, fmt.Errorf("reading the fleet from its servers: %w", err)
	}
	f.Replicas, f.NumGPUBlocks, f.BlockSize, f.MaxModelLen = ranks, blocks, bsize, mml
	src := fmt.Sprintf("GET /metrics %s on %d server(s)", vllmmetrics.CacheConfigInfo, len(urls))
	f.Figures = append(f.Figures,
		Figure{FigReplicas, strconv.Itoa(ranks), "DP ranks (engine labels) on GET /metrics, summed over servers"},
		Figure{FigNumGPUBlocks, strconv.Itoa(blocks), src + " num_gpu_blocks"},
		Figure{FigBlockSize, strconv.Itoa(bsize), src + " block_size"},
		Figure{FigMaxModelLen, strconv.Itoa(mml), engines.SrcModelsMaxModelLen},
		Figure{FigStepCosts, p.Name, "simulator profile (--profile): a server does not expose its step times"},
	)
	if maxNumSeqs > 0 {
		f.MaxNumSeqs = maxNumSeqs
		f.Figures = append(f.Figures, Figure{FigMaxNumSeqs, strconv.Itoa(maxNumSeqs), "--max-num-seqs (vLLM does not export it)"})
	} else {
		f.MaxNumSeqs = router.VLLMDefaultMaxNumSeqs
		f.Figures = append(f.Figures, Figure{FigMaxNumSeqs, strconv.Itoa(router.VLLMDefaultMaxNumSeqs), "vLLM's default (not exported on /metrics; give --max-num-seqs if the server was started with another)"})
	}
	return f, f.finish()
}

func kindName(k engines.Kind) string {
	if k == engines.KindUnknown {
		return "an unknown engine"
	}
	return string(k)
}
