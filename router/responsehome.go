package router

import "time"

// Responses API continuations. A request naming previous_response_id can only be
// served by the server that stored that response: vLLM keeps stored responses in
// the API-server process's memory (serving_responses.py response_store, behind
// VLLM_ENABLE_RESPONSES_API_STORE) and answers any other id with 404
// (docs/responses-api.md). So the router learns which replica produced each
// response (LearnResponse, from the id in response.created or the JSON body) and
// sends a continuation there whatever its load (ReasonResponse), as long as it is
// healthy; an id it does not know routes by the session key as usual.

// responseKeyPrefix keeps response ids apart from session keys in the shared
// store's home keys.
const responseKeyPrefix = "response\x00"

// responseHomes is the table of response ids -> replica: a SessionTable (same TTL
// and bound as the session homes) of its own, so the ids neither count as
// sessions nor take their LRU room.
func (b *Balancer) responseTable() *SessionTable {
	if b.responses == nil {
		b.responses = NewSessionTable(b.now, b.sessionTTL, b.maxSessions, 0)
	}
	return b.responses
}

// LearnResponse records that replica i produced the Responses API response id,
// so a later request naming it in previous_response_id goes to i. With shared
// state the mapping is written to the store too (a home under the id; the
// store's in-flight count is left as it was). Ignored for "" or an unknown
// replica. It returns the wall time the store took (0 without shared state).
func (b *Balancer) LearnResponse(id string, i int) time.Duration {
	if id == "" {
		return 0
	}
	b.mu.Lock()
	if i < 0 || i >= len(b.reps) {
		b.mu.Unlock()
		return 0
	}
	b.responseTable().Set(id, i)
	sh := b.shared
	b.mu.Unlock()
	if sh == nil {
		return 0
	}
	cr, wait, ok := sh.Claim(responseKeyPrefix+id, "", []int{i}, false, false, nil)
	if rep := cr.Replica; ok {
		// Claim counted one request in flight on rep; none is: undo it.
		sh.Claimed(rep)
		sh.Released(rep)
	}
	return wait
}

// responseHome returns the replica that produced response id, or -1 when
// unknown (caller holds mu; sv is the shared store's answer, nil without one).
func (b *Balancer) responseHome(id string, sv *SharedHome) int {
	if id == "" {
		return -1
	}
	t := b.responseTable()
	if home, ok := t.Lookup(id); ok && home < len(b.reps) {
		return home
	}
	if sv != nil && sv.Replica >= 0 && sv.Replica < len(b.reps) {
		t.Set(id, sv.Replica)
		return sv.Replica
	}
	return -1
}
