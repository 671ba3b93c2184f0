// Package trace reads, summarises and slices request traces in the Mooncake
// format (kvcache-ai/Mooncake FAST25-release/traces, Apache 2.0): JSON Lines, one
// request per line,
//
//	{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [block ids]}
//
// with one block id per BlockSize (512) tokens of the prompt; two requests whose
// hash_ids share a leading run share that prefix. An optional "session_id" (string)
// is this project's extension for traffic recorded by warden route.
//
// It owns the streaming Reader (errors name the line), Stats (the columns of the
// Mooncake paper's Table 2), the conversation reconstruction from block-id chains
// (Chainer), an LRU over block ids at a token capacity (the prefix-hit ceiling of a
// cache of that size) and Slice (time window, speedup, sampling by conversation).
// It is pure: no net/http, no clock, no goroutines. It does not send requests
// (internal/run/bench and internal/run/virtual do) and does not draw figures (report does).
package trace
