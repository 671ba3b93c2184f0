package study

import (
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// Bound returns the unlimited-cache bound of the prefix hit rate, in percent, over
// the OK turns of variant whose Done instant is in [start, end): the share of their
// prompt tokens that a replica with a cache that never evicts, holding every turn
// of the conversation, would serve from cache. Per turn, the cached tokens are the
// longest reusable prefix, cut to whole blocks and to prompt - 1 tokens as vLLM's
// lookup does (vllm/v1/core/kv_cache_manager.py get_computed_blocks: the last
// prompt token is always recomputed):
//
//	turn 0:  the shared system prompt (sysTokens, its rendered length)
//	turn k:  the previous turn's prompt + its output - 1 (the last sampled token
//	         has no KV yet), at least the system prompt
//
// so bound = 100 * sum(floor(min(reuse, prompt-1) / block) * block) / sum(prompt).
// It assumes the reply re-renders to the same tokens it was generated as (true of
// the simulator's tokenizer) and that the first turn of a conversation finds the
// system prompt already cached (true after a replica's first request). NaN when no
// turn qualifies.
func Bound(results []loadgen.Result, variant string, start, end time.Duration, sysTokens, block int) float64 {
	type key struct {
		session int64
		turn    int
	}
	byTurn := make(map[key]*loadgen.Result)
	for i := range results {
		r := &results[i]
		if r.Variant == variant && r.OK() && !r.Side {
			byTurn[key{r.Session, r.Turn}] = r
		}
	}
	var cached, prompt float64
	for i := range results {
		r := &results[i]
		if r.Variant != variant || !r.OK() || r.Side || r.Done < start || r.Done >= end || r.PromptTokens <= 0 {
			continue
		}
		reuse := sysTokens
		if r.Turn > 0 {
			if p := byTurn[key{r.Session, r.Turn - 1}]; p != nil {
				reuse = max(reuse, p.PromptTokens+p.OutputTokens-1)
			}
		}
		c := min(reuse, r.PromptTokens-1)
		if block > 0 {
			c = c / block * block
		}
		cached += float64(max(c, 0))
		prompt += float64(r.PromptTokens)
	}
	if prompt == 0 {
		return nan()
	}
	return 100 * cached / prompt
}
