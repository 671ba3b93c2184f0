package agent

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
)

func readFile(t *testing.T, path string) *Tree {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := Read(f, "trace_0277.json")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// trace_0277: a first parent call spawns three Explore subagents that run in
// parallel and are joined by the next parent call; later a Plan subagent.
func TestRead0277SpawnAndJoin(t *testing.T) {
	tr := readFile(t, sharedtrace.Path(t, "claude-code/trace_0277.json"))
	if tr.Basis != BasisRelative || tr.BlockSize != 64 || len(tr.Agents) != 5 {
		t.Fatalf("basis %s, block %d, %d agents: want relative, 64, parent + 4", tr.Basis, tr.BlockSize, len(tr.Agents))
	}
	// Step 0 is the parent's first call; then agent_001's 4 calls, agent_002's
	// 12, agent_003's 17 (file order), then the parent's second call.
	join := 1 + 4 + 12 + 17
	st := tr.Steps[join]
	if st.Agent != 0 || st.Index != 1 {
		t.Fatalf("step %d: agent %d call %d, want the parent's second call", join, st.Agent, st.Index)
	}
	waits := map[int]bool{}
	for _, d := range st.Deps {
		waits[d.Step] = true
	}
	// It waits for each sibling's last call (each sibling waited for the
	// parent's first call).
	for _, s := range []int{4, 16, 33} {
		if !waits[s] {
			t.Errorf("the join waits for %v, missing step %d", st.Deps, s)
		}
	}
	if len(st.Deps) != 3 {
		t.Errorf("the join has %d waits, want 3", len(st.Deps))
	}
	// Each sibling's first call waits only for the spawning call, about
	// 0.7 s after it ended (t - duration_ms/1000 - (0 + 18.78 s)).
	for _, first := range []int{1, 5, 17} {
		d := tr.Steps[first].Deps
		if len(d) != 1 || d[0].Step != 0 || d[0].Gap < 0 || d[0].Gap > 2*time.Second {
			t.Errorf("sibling's first call (step %d) waits %+v, want step 0 within 2 s", first, d)
		}
	}
	for _, a := range tr.Agents[1:] {
		if a.Background {
			t.Errorf("agent %s is background; every subagent of trace_0277 is joined", a.ID)
		}
	}
	s := tr.Stats()
	if s.Calls != len(tr.Steps) || s.Subagents != 4 || s.ParentCalls != 9 {
		t.Errorf("stats %+v: want 4 subagents and 9 parent calls", s)
	}
}

func TestReadRejectsBadInput(t *testing.T) {
	call := func(t0, in float64, ids string) string {
		return `{"t":` + ftoa(t0) + `,"type":"n","in":` + ftoa(in) + `,"out":5,"hash_ids":[` + ids + `],"api_time":1}`
	}
	head := `{"id":"x","block_size":64,"requests":[`
	cases := []struct{ name, body, want string }{
		{"jsonl", `{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1]}` + "\n" + `{"timestamp":1}`, "not a Claude Code trace"},
		{"not-object", `[1,2]`, "not a Claude Code trace"},
		{"no-requests", `{"id":"x","block_size":64}`, "missing block_size or requests"},
		{"ids", head + call(0, 130, "1") + `]}`, "requests[0]: 1 hash_ids for in 130: want floor(130 / 64) = 2"},
		{"negative-t", head + call(-1, 10, "") + `]}`, "requests[0]: t -1 is negative"},
		{"unsorted", head + call(5, 10, "") + `,` + call(2, 10, "") + `]}`, "requests[1]: t 2 is before the previous entry's 5"},
		{"empty-subagent", head + call(0, 10, "") + `,{"t":3,"type":"subagent","agent_id":"a1","status":"completed","requests":[]}]}`, "requests[1]: subagent a1 has no requests"},
		{"sub-call", head + call(0, 10, "") + `,{"t":3,"type":"subagent","agent_id":"a1","requests":[` + call(0, 200, "1") + `]}]}`, "requests[1].requests[0]: 1 hash_ids for in 200"},
		{"type", head + `{"t":0,"type":"q","in":1,"out":1,"hash_ids":[]}]}`, `requests[0]: type "q"`},
	}
	for _, c := range cases {
		_, err := Read(strings.NewReader(c.body), "f.json")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "f.json") {
			t.Errorf("%s: error %v, want one naming f.json and %q", c.name, err, c.want)
		}
	}
	if _, err := Read(strings.NewReader(`[1]`), "f.json"); !errors.Is(err, ErrNotClaudeCode) {
		t.Errorf("a JSON array: %v, want ErrNotClaudeCode", err)
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Absolute times: the subagent's first call starts after the spawning call
// ended; with no later parent call it runs in the background.
func TestReadAbsoluteBasisAndBackground(t *testing.T) {
	body := `{"id":"abs","block_size":64,"requests":[
{"t":0,"type":"n","in":100,"out":5,"hash_ids":[1],"api_time":2},
{"t":10,"type":"n","in":200,"out":5,"hash_ids":[1,2,3],"api_time":2},
{"t":40,"type":"subagent","agent_id":"a1","status":"completed","duration_ms":20000,"requests":[
 {"t":13,"type":"n","in":70,"out":5,"hash_ids":[9],"api_time":1},
 {"t":20,"type":"n","in":140,"out":5,"hash_ids":[9,10],"api_time":1}]}]}`
	tr, err := Read(strings.NewReader(body), "abs.json")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Basis != BasisAbsolute || !tr.Agents[1].Background {
		t.Fatalf("basis %s, background %v: want absolute, true", tr.Basis, tr.Agents[1].Background)
	}
	// Subagent's first call: 13 s - (10 + 2) s after the spawning call; its
	// second: 20 - (13 + 1) s after the first.
	if d := tr.Steps[2].Deps; len(d) != 1 || d[0].Step != 1 || d[0].Gap != time.Second {
		t.Errorf("first subagent call waits %+v, want step 1 + 1 s", d)
	}
	if d := tr.Steps[3].Deps; len(d) != 1 || d[0].Step != 2 || d[0].Gap != 6*time.Second {
		t.Errorf("second subagent call waits %+v, want step 2 + 6 s", d)
	}
	// The parent's second call: 10 - (0 + 2) s after the first.
	if d := tr.Steps[1].Deps; len(d) != 1 || d[0].Gap != 8*time.Second {
		t.Errorf("parent's second call waits %+v, want step 0 + 8 s", d)
	}
	mixed := strings.Replace(body, `]}]}`, `]},
{"t":50,"type":"n","in":300,"out":5,"hash_ids":[1,2,3,4],"api_time":2},
{"t":60,"type":"subagent","agent_id":"a2","status":"completed","duration_ms":1000,"requests":[
 {"t":0,"type":"n","in":70,"out":5,"hash_ids":[7],"api_time":1}]}]}`, 1)
	if _, err := Read(strings.NewReader(mixed), "mixed.json"); err == nil || !strings.Contains(err.Error(), "mixed.json requests[4]: subagent a2 has relative times") {
		t.Errorf("mixed bases: %v, want an error naming requests[4]", err)
	}
}
