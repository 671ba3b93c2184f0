package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/sim"
	"github.com/lmwarden/warden/sim/simhttp"
)

func newSimCmd() *cobra.Command {
	cfg := simhttp.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a simulated vLLM cluster on loopback",
		Long: `Starts simulated vLLM servers, each a real HTTP server speaking vLLM's OpenAI API
(/v1/chat/completions, /v1/completions, /v1/responses), its Anthropic API
(/v1/messages, /v1/messages/count_tokens), /v1/models, /health, /version, /tokenize,
/metrics (vLLM's series and labels) and POST /reset_prefix_cache.

Each engine models a vLLM V1 engine: a prefix cache of 16-token blocks with chained
hashes and LRU eviction, continuous batching up to max_num_seqs, chunked prefill,
preemption, and step times from the GPU/model profile. Time runs --speed times faster
than wall time; all reported times (TTFT histogram, usage) are simulated.

Profiles: ` + strings.Join(sim.ProfileNames(), ", ") + `.

Example:
  warden sim --replicas 4 --base-port 8001          # four servers, ports 8001-8004
  warden sim --replicas 1 --data-parallel-size 4    # one server, four DP ranks`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("replicas") && cfg.Replicas <= 0 {
				return fmt.Errorf("--replicas %d: must be at least 1", cfg.Replicas)
			}
			if !cmd.Flags().Changed("served-model-name") {
				cfg.Model = "" // the profile's own name (Config fills it from --profile)
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			cl, err := simhttp.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			c := cl.Config()
			fmt.Fprintf(out, "simulated vLLM: profile %s, model %q, speed %gx\n", c.Profile, c.Model, c.Speed)
			ranks := ""
			if c.DataParallelSize > 1 {
				ranks = fmt.Sprintf(" (%d DP ranks behind vLLM's balancer; X-data-parallel-rank pins one)", c.DataParallelSize)
				if c.IgnoreRankHeader {
					ranks = fmt.Sprintf(" (%d DP ranks behind vLLM's balancer; X-data-parallel-rank IGNORED, --ignore-rank-header)", c.DataParallelSize)
				}
			}
			for i, u := range cl.URLs() {
				fmt.Fprintf(out, "  replica %d: %s%s\n", i, u, ranks)
			}
			fmt.Fprintln(out, "press Ctrl-C to stop")
			<-cmd.Context().Done()
			cl.Close()
			return cl.Wait()
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "number of servers, each on its own port")
	f.IntVar(&cfg.DataParallelSize, "data-parallel-size", cfg.DataParallelSize, "engines (DP ranks) per server, behind vLLM's internal balancer")
	f.StringVar(&cfg.Profile, "profile", cfg.Profile, "GPU/model profile: "+strings.Join(sim.ProfileNames(), ", "))
	f.StringVar(&cfg.Model, "served-model-name", "", "served model name (default: the profile's, e.g. "+cfg.Model+" for "+cfg.Profile+")")
	f.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", cfg.MaxNumSeqs, "max running sequences per engine")
	f.IntVar(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.MaxNumBatchedTokens, "token budget per step per engine")
	f.IntVar(&cfg.MaxModelLen, "max-model-len", cfg.MaxModelLen, "max prompt + output tokens per request")
	f.IntVar(&cfg.ReplyTokens, "reply-tokens", cfg.ReplyTokens, "length of the simulated model's own reply: a request with a larger max_tokens gets this many tokens and finish_reason stop, a smaller max_tokens cuts it (length)")
	f.IntVar(&cfg.NumGPUBlocks, "num-gpu-blocks", cfg.NumGPUBlocks, "KV blocks per engine (0 = from the profile's memory arithmetic)")
	f.Float64Var(&cfg.Speed, "speed", cfg.Speed, "simulated seconds per wall second")
	f.StringVar(&cfg.Host, "host", cfg.Host, "address to listen on")
	f.IntVar(&cfg.BasePort, "base-port", cfg.BasePort, "server i listens on base-port+i (0 = random free ports)")
	f.BoolVar(&cfg.DevMode, "dev-mode", cfg.DevMode, "enable POST /reset_prefix_cache (vLLM's VLLM_SERVER_DEV_MODE=1)")
	f.BoolVar(&cfg.ResponsesStore, "responses-store", responsesStoreEnv(), "keep stored /v1/responses answers per server so previous_response_id works, as vLLM's VLLM_ENABLE_RESPONSES_API_STORE=1 (default: that variable)")
	f.StringVar(&cfg.APIKey, "api-key", "", "require \"Authorization: Bearer KEY\" on /v1 paths, as vllm serve --api-key does")
	f.BoolVar(&cfg.IgnoreRankHeader, "ignore-rank-header", false, "ignore X-data-parallel-rank and let the internal balancer place every request, as a vLLM that does not read the header does (to try the router's pinning check)")
	return cmd
}

// responsesStoreEnv reads VLLM_ENABLE_RESPONSES_API_STORE as vLLM does
// (vllm/envs.py: bool(int(os.getenv(name, "0")))); a value that is not an integer
// counts as off.
func responsesStoreEnv() bool {
	n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("VLLM_ENABLE_RESPONSES_API_STORE")))
	return err == nil && n != 0
}
