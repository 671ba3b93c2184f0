package routerhttp

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
)

// Keyless requests (no session key anywhere) whose bodies extend one another go
// where the first went (decision prefix, the default keyless placement); one with
// another body goes by the shortest queue (no-key). keyless: shortest-queue
// keeps every keyless request on the shortest queue.
func TestKeylessPrefixThroughProxy(t *testing.T) {
	conv := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("first message words ", 100) + `"}`
	turn2 := conv + `,{"role":"assistant","content":"reply"},{"role":"user","content":"more"}]}`
	other := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("another conversation ", 100) + `"}]}`
	for _, keyless := range []string{"", "shortest-queue"} {
		f := newFront(t, true, func(c *Config) { c.Models[0].Keyless = keyless }, newStub(t, "a"), newStub(t, "b"))
		r1, _ := f.post(t, wire.PathChatCompletions, nil, conv+"]}")
		r2, _ := f.post(t, wire.PathChatCompletions, nil, turn2)
		r3, _ := f.post(t, wire.PathChatCompletions, nil, other)
		d1, d2, d3 := r1.Header.Get(wire.HeaderDecision), r2.Header.Get(wire.HeaderDecision), r3.Header.Get(wire.HeaderDecision)
		if keyless == "" {
			if d1 != "no-key" || d2 != "prefix" || r2.Header.Get(wire.HeaderReplica) != r1.Header.Get(wire.HeaderReplica) || d3 != "no-key" {
				t.Errorf("default: decisions %s %s %s, replicas %s %s", d1, d2, d3, r1.Header.Get(wire.HeaderReplica), r2.Header.Get(wire.HeaderReplica))
			}
			continue
		}
		if d1 != "no-key" || d2 != "no-key" || d3 != "no-key" {
			t.Errorf("shortest-queue: decisions %s %s %s", d1, d2, d3)
		}
	}
}
