package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// FormatClaudeCode names the kv-cache-tester trace format (loadgen's
// trace.format).
const FormatClaudeCode = "claude-code"

// DefaultBlockSize is the tokens per hash id of the kv-cache-tester traces
// (their "block_size": 64).
const DefaultBlockSize = 64

// basisTolerance absorbs the rounding of recorded times (whole seconds in some
// fields) when a subagent's first call is compared with its spawning call's end.
const basisTolerance = time.Second

// ErrNotClaudeCode is wrapped by Read's error for input that is not one JSON
// object of this format.
var ErrNotClaudeCode = errors.New("not a Claude Code trace (kv-cache-tester format: one JSON object with block_size and requests)")

type fileJSON struct {
	ID           *string         `json:"id"`
	Models       []string        `json:"models"`
	BlockSize    *int            `json:"block_size"`
	HashIDScope  string          `json:"hash_id_scope"`
	ToolTokens   int             `json:"tool_tokens"`
	SystemTokens int             `json:"system_tokens"`
	Requests     []itemJSON      `json:"requests"`
	Totals       json.RawMessage `json:"totals"`
}

type itemJSON struct {
	T           *float64 `json:"t"`
	Type        string   `json:"type"`
	Model       string   `json:"model"`
	In          *int     `json:"in"`
	Out         *int     `json:"out"`
	HashIDs     *[]int64 `json:"hash_ids"`
	InputTypes  []string `json:"input_types"`
	OutputTypes []string `json:"output_types"`
	Stop        string   `json:"stop"`
	APITime     *float64 `json:"api_time"`
	ThinkTime   *float64 `json:"think_time"`
	TTFT        *float64 `json:"ttft"`
	// Subagents.
	AgentID      string     `json:"agent_id"`
	SubagentType string     `json:"subagent_type"`
	DurationMS   *float64   `json:"duration_ms"`
	TotalTokens  *int64     `json:"total_tokens"`
	ToolUseCount *int       `json:"tool_use_count"`
	Status       string     `json:"status"`
	Requests     []itemJSON `json:"requests"`
	Models       []string   `json:"models"`
	ToolTokens   int        `json:"tool_tokens"`
	SystemTokens int        `json:"system_tokens"`
}

// Read decodes one session of the kv-cache-tester Claude Code format from r
// and plans it (Tree.Steps). name (a file name) prefixes errors, which name the
// call: "trace_0277.json requests[2].requests[5]: ...". Checked: exactly the
// known fields; block_size positive; every call of type "n" or "s" with t,
// in, out and hash_ids, t >= 0, in > 0, out >= 0, len(hash_ids) ==
// floor(in / block_size), api_time and think_time >= 0; every subagent with an
// agent_id and at least one call; times in non-decreasing order within each
// list; one timestamp basis for all subagents of the file (Tree.Basis).
func Read(r io.Reader, name string) (*Tree, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, fmt.Errorf("%s: %w", name, ErrNotClaudeCode)
	}
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return nil, fmt.Errorf("%s: %w: %v", name, ErrNotClaudeCode, err)
		}
		return nil, fmt.Errorf("%s: malformed JSON: %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: %w: more than one JSON value (a JSON Lines trace is read with format mooncake)", name, ErrNotClaudeCode)
	}
	switch {
	case f.BlockSize == nil || f.Requests == nil:
		return nil, fmt.Errorf("%s: %w: missing block_size or requests", name, ErrNotClaudeCode)
	case *f.BlockSize <= 0:
		return nil, fmt.Errorf("%s: block_size %d is not positive", name, *f.BlockSize)
	case len(f.Requests) == 0:
		return nil, fmt.Errorf("%s: requests is empty", name)
	}
	t := &Tree{Name: name, BlockSize: *f.BlockSize, ToolTokens: f.ToolTokens, SystemTokens: f.SystemTokens,
		Agents: []*Agent{{}}}
	if f.ID != nil {
		t.ID = *f.ID
	}
	if err := checkItems(t, f.Requests, "requests"); err != nil {
		return nil, err
	}
	basis, err := detectBasis(t, f.Requests, "requests")
	if err != nil {
		return nil, err
	}
	t.Basis = basis
	items := buildItems(t, f.Requests, "requests", 0)
	p := &planner{t: t}
	p.agentSeq(0, items, -1)
	t.NegativeGaps = p.negative
	if len(t.Steps) == 0 {
		return nil, fmt.Errorf("%s: no calls", name)
	}
	return t, t.Validate()
}

func seconds(f float64) time.Duration { return time.Duration(math.Round(f * 1e9)) }

// checkItems checks one list of items (see Read) and registers its subagents.
func checkItems(t *Tree, items []itemJSON, path string) error {
	last := math.Inf(-1)
	for i := range items {
		it := &items[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		if it.T == nil {
			return fmt.Errorf("%s %s: missing t", t.Name, p)
		}
		if *it.T < 0 || math.IsNaN(*it.T) {
			return fmt.Errorf("%s %s: t %g is negative", t.Name, p, *it.T)
		}
		if *it.T < last {
			return fmt.Errorf("%s %s: t %g is before the previous entry's %g: a list must be in time order", t.Name, p, *it.T, last)
		}
		last = *it.T
		switch it.Type {
		case "n", "s":
			if err := checkCall(t, it, p); err != nil {
				return err
			}
		case "subagent":
			if it.AgentID == "" {
				return fmt.Errorf("%s %s: subagent without agent_id", t.Name, p)
			}
			if len(it.Requests) == 0 {
				return fmt.Errorf("%s %s: subagent %s has no requests", t.Name, p, it.AgentID)
			}
			if it.DurationMS != nil && *it.DurationMS < 0 {
				return fmt.Errorf("%s %s: subagent %s: duration_ms %g is negative", t.Name, p, it.AgentID, *it.DurationMS)
			}
			if err := checkItems(t, it.Requests, p+".requests"); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s %s: type %q: want \"n\", \"s\" or \"subagent\"", t.Name, p, it.Type)
		}
	}
	return nil
}

func checkCall(t *Tree, it *itemJSON, p string) error {
	switch {
	case it.In == nil:
		return fmt.Errorf("%s %s: missing in", t.Name, p)
	case it.Out == nil:
		return fmt.Errorf("%s %s: missing out", t.Name, p)
	case it.HashIDs == nil:
		return fmt.Errorf("%s %s: missing hash_ids", t.Name, p)
	case *it.In <= 0:
		return fmt.Errorf("%s %s: in %d is not positive", t.Name, p, *it.In)
	case *it.Out < 0:
		return fmt.Errorf("%s %s: out %d is negative", t.Name, p, *it.Out)
	case it.APITime != nil && *it.APITime < 0:
		return fmt.Errorf("%s %s: api_time %g is negative", t.Name, p, *it.APITime)
	case it.ThinkTime != nil && *it.ThinkTime < 0:
		return fmt.Errorf("%s %s: think_time %g is negative", t.Name, p, *it.ThinkTime)
	}
	if want := *it.In / t.BlockSize; len(*it.HashIDs) != want {
		return fmt.Errorf("%s %s: %d hash_ids for in %d: want floor(%d / %d) = %d, one per full block",
			t.Name, p, len(*it.HashIDs), *it.In, *it.In, t.BlockSize, want)
	}
	return nil
}

func callEnd(it *itemJSON) float64 {
	if it.APITime == nil {
		return *it.T
	}
	return *it.T + *it.APITime
}

// detectBasis decides the file's timestamp basis from its subagents: a
// subagent's first call that starts before the end of the call that spawned it
// can only be on a timeline of its own (BasisRelative); if none does, the times
// are absolute. A file whose subagents disagree is an error.
func detectBasis(t *Tree, items []itemJSON, path string) (string, error) {
	basis := BasisNone
	var walk func(items []itemJSON, path string) error
	walk = func(items []itemJSON, path string) error {
		prevEnd := -1.0
		for i := range items {
			it := &items[i]
			if it.Type != "subagent" {
				prevEnd = callEnd(it)
				continue
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			b := BasisAbsolute
			if prevEnd >= 0 && seconds(*it.Requests[0].T)+basisTolerance < seconds(prevEnd) {
				b = BasisRelative
			}
			if basis != BasisNone && b != basis {
				return fmt.Errorf("%s %s: subagent %s has %s times where an earlier subagent has %s ones (first call at %g s, spawning call ended at %g s)",
					t.Name, p, it.AgentID, b, basis, *it.Requests[0].T, prevEnd)
			}
			basis = b
			if err := walk(it.Requests, p+".requests"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(items, path); err != nil {
		return "", err
	}
	if basis == BasisAbsolute {
		// A file whose every subagent was spawned at its parent's start is
		// undecided; absolute is the reading that moves nothing.
		return BasisAbsolute, nil
	}
	return basis, nil
}

// buildItems converts one list to the parent's timeline; origin is the list's
// start on it (relative basis).
func buildItems(t *Tree, items []itemJSON, path string, origin time.Duration) []item {
	out := make([]item, 0, len(items))
	for i := range items {
		it := &items[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		if it.Type != "subagent" {
			c := &Call{Path: p, T: origin + seconds(*it.T), APITime: -1, In: *it.In, Out: *it.Out,
				HashIDs: *it.HashIDs, Model: it.Model, Stop: it.Stop}
			if it.APITime != nil {
				c.APITime = seconds(*it.APITime)
			}
			think := time.Duration(-1)
			if it.ThinkTime != nil {
				think = seconds(*it.ThinkTime)
			}
			out = append(out, item{call: c, think: think})
			continue
		}
		a := &Agent{ID: it.AgentID, Type: it.SubagentType, Status: it.Status, Path: p,
			Background: it.Status == "async_launched", ToolTokens: it.ToolTokens, SystemTokens: it.SystemTokens}
		t.Agents = append(t.Agents, a)
		sub := &subagent{agent: len(t.Agents) - 1}
		start := origin
		if t.Basis == BasisRelative {
			start = origin + seconds(*it.T)
			if it.DurationMS != nil && it.Status != "async_launched" {
				start -= seconds(*it.DurationMS / 1000)
			}
			start = max(start, 0)
		}
		sub.items = buildItems(t, it.Requests, p+".requests", start)
		out = append(out, item{sub: sub})
	}
	return out
}
