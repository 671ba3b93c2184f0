// Package loadgenhttp is the HTTP shell of the benchmark harness around the pure
// core in package loadgen: Run drives loadgen.Loop over real streaming clients,
// scrapes every replica's /metrics through internal/scrape (Scraper) and writes
// the results directory. `warden bench` (internal/run/bench) calls Run; the
// virtual-time world (internal/run/virtual) calls the same loadgen types without this
// package.
//
// The clients, each a Client (TestDocListsEveryClient checks this list against
// the package's Client types and NewClient):
//
//   - OpenAIClient: api openai-chat, POST /v1/chat/completions, streamed; the
//     only one a trace replay can use (it forces the output length)
//   - AnthropicClient: api anthropic-messages, POST /v1/messages?beta=true as
//     Claude Code sends it, streamed
//   - ResponsesClient: api openai-responses, POST /v1/responses as the Codex CLI
//     sends it, streamed, store false
//   - RoundRobin: each turn through the next of several clients, one per root
//     of RunConfig.BaseURLs (several routers sharing state)
//
// The streaming ones read SSE with go-sse and share the first-token and
// token-count rules of loadgen's doc (streamState in sse.go).
package loadgenhttp
