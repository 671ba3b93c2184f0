// Package wire names the HTTP contract the router (router/routerhttp), the
// simulator (sim/simhttp) and the harness (loadgen/loadgenhttp) exchange: header
// names, URL paths and server-sent event names, each defined once. It is ground:
// it imports nothing, so every shell and core may use it.
//
// HTTP header names are case-insensitive (RFC 9110 section 5.1) and net/http
// canonicalizes them on Set and Get, so an engine that documents another
// spelling (vLLM's X-data-parallel-rank) reads the same header.
package wire

// Request headers a client sets to name its session (docs/router.md section 4).
const (
	// HeaderClaudeSession carries Claude Code's session id (a UUID), the same on
	// every request of one session; set by Claude Code >= 2.1.86 and by the harness
	// (session_header: claude-code), read first by the router.
	HeaderClaudeSession = "X-Claude-Code-Session-Id"
	// HeaderClaudeAgent carries the agent id of a Claude Code subagent, set by
	// Claude Code beside HeaderClaudeSession; the router reads it with
	// split_subagents.
	HeaderClaudeAgent = "X-Claude-Code-Agent-Id"
	// HeaderSessionID carries a session id from other clients: vLLM's multi-turn
	// benchmark with --send-conversation-id, and the harness (session_header:
	// x-session-id); the router's default extra session header.
	HeaderSessionID = "X-Session-ID"
	// HeaderCodexSession and HeaderCodexThread carry the Codex CLI's thread id
	// (a UUIDv7, the same on every request of a conversation and across `codex
	// exec resume`); codex-cli 0.171.0 sends both with the same value
	// (docs/responses-api.md). The harness sends both (session_header: codex).
	HeaderCodexSession = "Session-Id"
	HeaderCodexThread  = "Thread-Id"
	// HeaderCodexLegacySession and HeaderCodexConversation are what earlier
	// Codex releases sent (codex-rs/codex-api/src/requests/headers.rs
	// build_conversation_headers: "session_id", and "conversation_id").
	HeaderCodexLegacySession = "Session_id"
	HeaderCodexConversation  = "Conversation_id"
)

// HeaderDPRank is the request header that pins a request to data-parallel rank k
// (decimal, 0-based), bypassing vLLM's internal DP balancer; vLLM spells it
// X-data-parallel-rank (vllm/entrypoints/openai/engine/serving.py
// _get_data_parallel_rank). The router sets it for dp_ranks replicas; the
// simulator reads it.
const HeaderDPRank = "X-Data-Parallel-Rank"

// Response headers the router sets and the harness reads.
const (
	// HeaderReplica is the name of the replica that served the request (a DP
	// rank as "name/k"); on every proxied response, in the trailer of a
	// kept-alive one. The harness records it as Result.Replica.
	HeaderReplica = "X-Warden-Replica"
	// HeaderDecision is why that replica was chosen (router.Reason's string).
	HeaderDecision = "X-Warden-Decision"
	// HeaderHeldMs is how long the router held the request before sending it
	// upstream (admission), in milliseconds of the router's clock, 0 when not
	// held; on every proxied response. A kept-alive response has the hold so far
	// in its header and the final hold in its trailer (the trailer wins). The
	// harness records it as Result.Held.
	HeaderHeldMs = "X-Warden-Held-Ms"
	// HeaderAdmission is the admission gate's decision (router.Admission's
	// string); only when the model's gate is on. AdmissionWaiting in a kept-alive
	// response's header, the decision in its trailer.
	HeaderAdmission = "X-Warden-Admission"
	// HeaderStateMs is how long the request waited on the shared state, only
	// with `state:` configured: the wall time of every store call of its routing
	// decisions (home read, fresh in-flight read, claim; admission polls and
	// retries before the first byte included), in milliseconds with microsecond
	// resolution ("0.004" for a home read from the client-side cache). At most
	// state_timeout plus the scheduler's delay while the store hangs; the
	// in-flight counts of a request's start and end are published off its path
	// and are not in it.
	HeaderStateMs = "X-Warden-State-Ms"
)

// AdmissionWaiting is HeaderAdmission's value in the header of a response the
// router committed while its request was still held (keep-alive).
const AdmissionWaiting = "waiting"

// URL paths of the OpenAI- and Anthropic-compatible APIs vLLM serves
// (vllm/entrypoints/openai/api_server.py), proxied by the router,
// served by the simulator, called by the harness.
const (
	PathChatCompletions = "/v1/chat/completions" // OpenAI Chat Completions
	PathCompletions     = "/v1/completions"      // OpenAI (legacy) Completions
	PathMessages        = "/v1/messages"         // Anthropic Messages
	PathResponses       = "/v1/responses"        // OpenAI Responses (the Codex CLI's only API)
	PathCountTokens     = "/v1/messages/count_tokens"
	PathModels          = "/v1/models" // GET: served model names
)

// PathReady is the router's readiness (GET): 200 while it takes new work, 503
// once its shutdown has begun or while a model has no healthy replica.
const PathReady = "/ready"

// PathLive is the router's process liveness (GET): 200 whenever the listener
// answers, whatever the replicas do, so a liveness probe never restarts a
// router for a backend outage. PathHealth on the router also says whether each
// model has a healthy replica.
const PathLive = "/livez"

// Engine side paths (vLLM's unless noted).
const (
	PathHealth  = "/health"  // GET: 200 when the server is up
	PathMetrics = "/metrics" // GET: Prometheus text exposition
	PathVersion = "/version" // GET: {"version": ...}
	// PathResetPrefixCache (POST) empties the prefix cache; vLLM serves it only
	// with VLLM_SERVER_DEV_MODE=1.
	PathResetPrefixCache = "/reset_prefix_cache"
	// PathTokenize (POST) counts a prompt's tokens: vLLM's {"messages" or
	// "prompt"} -> {"count", "tokens"}, llama.cpp's {"content"} -> {"tokens"}.
	PathTokenize = "/tokenize"
	// PathApplyTemplate (POST, llama.cpp) renders {"messages"} -> {"prompt"}.
	PathApplyTemplate = "/apply-template"
)

// OpenAI Responses stream event names (the `event:` line; the data's "type" is
// the same), as vLLM sends them (serving_responses.py; docs/responses-api.md).
const (
	EventResponseCreated    = "response.created"
	EventResponseInProgress = "response.in_progress"
	EventOutputItemAdded    = "response.output_item.added"
	EventContentPartAdded   = "response.content_part.added"
	EventOutputTextDelta    = "response.output_text.delta"
	EventOutputTextDone     = "response.output_text.done"
	EventContentPartDone    = "response.content_part.done"
	EventOutputItemDone     = "response.output_item.done"
	EventResponseCompleted  = "response.completed"
	EventResponseIncomplete = "response.incomplete"
	EventResponseFailed     = "response.failed"
	EventReasoningDelta     = "response.reasoning_text.delta"
	EventReasoningSumDelta  = "response.reasoning_summary_text.delta"
	EventFunctionArgsDelta  = "response.function_call_arguments.delta"
	EventRefusalDelta       = "response.refusal.delta"
)

// SSEDone is the data of the last event of an OpenAI stream ("data: [DONE]").
const SSEDone = "[DONE]"

// Anthropic Messages stream event names (the `event:` line; the data's "type"
// is the same), in stream order (Anthropic's "Streaming Messages" docs).
const (
	EventMessageStart      = "message_start"
	EventContentBlockStart = "content_block_start"
	EventContentBlockDelta = "content_block_delta"
	EventContentBlockStop  = "content_block_stop"
	EventMessageDelta      = "message_delta"
	EventMessageStop       = "message_stop"
	// EventPing may come at any point; the router sends it as keep-alive while
	// it holds a request.
	EventPing = "ping"
	// EventError reports an error after the stream started.
	EventError = "error"
)
