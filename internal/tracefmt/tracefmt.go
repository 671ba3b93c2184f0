// Package tracefmt is the one definition of a request-trace line in the
// Mooncake format (kvcache-ai/Mooncake FAST25-release/traces) plus this
// project's session id, shared by the trace reader (loadgen/trace) and the
// router's recorder (router/routerhttp). It owns the JSON shape and its
// encoding only; checks, stats and replay live in loadgen/trace.
package tracefmt

import (
	"encoding/json"
	"time"
)

// DefaultBlockSize is the tokens per hash id of the Mooncake traces (their
// README: each hash id stands for a block of 512 tokens).
const DefaultBlockSize = 512

// Line is the JSON shape of one line; pointers tell a missing field from a
// zero when reading.
type Line struct {
	Timestamp    *int64  `json:"timestamp"`     // ms since the trace's first request
	InputLength  *int    `json:"input_length"`  // prompt tokens
	OutputLength *int    `json:"output_length"` // output tokens
	HashIDs      []int64 `json:"hash_ids"`      // one per block of the prompt
	SessionID    string  `json:"session_id,omitempty"`
}

// Marshal encodes one line (timestamp in whole milliseconds, rounded down)
// with its trailing newline.
func Marshal(ts time.Duration, inputLength, outputLength int, hashIDs []int64, sessionID string) ([]byte, error) {
	ms := int64(ts / time.Millisecond)
	b, err := json.Marshal(Line{Timestamp: &ms, InputLength: &inputLength, OutputLength: &outputLength, HashIDs: hashIDs, SessionID: sessionID})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
