// Package simhttp is the HTTP front of the simulated vLLM cluster: real HTTP servers on
// loopback that speak vLLM's OpenAI and Anthropic APIs and /metrics, each driving one or
// more sim.Engine state machines on a scaled clock (internal/simclock).
//
// It owns:
//   - Config, Start and Cluster: N servers ("replicas", one port each), each with
//     DataParallelSize engines; Server is one `vllm serve` process as an http.Handler.
//   - The engine driver (Engine): one goroutine per engine steps it at the exact
//     simulated instants it asks for (StepResult.NextAt), sleeping on the scaled clock
//     in between and catching up exactly when a wakeup is late, and hands each step's
//     events to the waiting handlers through per-request mailboxes that never block
//     the engine. A client that disconnects aborts its request (Engine.Abort).
//   - The endpoints, shaped like vLLM's: POST /v1/chat/completions, /v1/completions,
//     /v1/responses (responses.go: streamed events, usage, the per-server store
//     behind Config.ResponsesStore), /v1/messages (also ?beta=true),
//     /v1/messages/count_tokens; GET /v1/models,
//     /health, /version, /metrics; POST /reset_prefix_cache with DevMode.
//   - Request rendering: OpenAI messages and Anthropic messages (converted as vLLM
//     converts them to a chat request) become sim.ChatMessage lists rendered by
//     sim.RenderChat, so one conversation gives the same tokens through both APIs.
//   - /metrics: a per-server Prometheus registry with a collector that reads
//     Engine.Stats at scrape time and writes vLLM's series names (internal/vllmmetrics),
//     labels engine and model_name, counters as _total plus _created.
//   - vLLM's internal DP balancer for DataParallelSize > 1 (balancer.go), with its
//     ~100 ms stale load snapshots; the X-data-parallel-rank header pins a rank.
//
// Streams follow vLLM: headers go out at once; the first chat event (role-only delta)
// and Anthropic's message_start are sent when the engine has produced the first token;
// then one event per token. Token text is sim.DetokenizeToken (a leading space except
// on the first token), so the deltas concatenate to sim.Detokenize of the reply.
//
// Times: the engine's instants are simulated (time.Duration since the clock's origin);
// TTFT in /metrics is simulated seconds from submission to the first token. HTTP
// "created" timestamps are wall-clock unix seconds, as a client expects.
//
// It does not own the engine model (package sim), routing (router) or load generation
// (loadgen), and it does not take part in the virtual-time world, which drives
// sim.Engine directly.
package simhttp
