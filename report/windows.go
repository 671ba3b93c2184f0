package report

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// stageKeys says how the per-stage tables name a stage. The zero value is the
// closed loop's layout: a stage is its concurrent sessions, and the variants'
// stages pair when index and sessions agree. A trace replay has report windows
// instead (windows): a stage is its window in minutes since its variant's
// start ("window (min)", e.g. "0-5"), paired by index, and its manifest
// "sessions" are what started in it, not a level held: the session trees of
// an agent-session replay (manifest agent_traces: agent, "trees started"),
// the conversations of a request trace ("conversations started").
type stageKeys struct {
	windows bool
	agent   bool
	start   map[string]time.Duration // variant -> its first window's start
}

// keysOf returns the layout of m's per-stage tables.
func keysOf(m *loadgen.Manifest) stageKeys {
	agent := len(m.AgentTraces) > 0
	if !agent && (m.Scenario == nil || m.Scenario.Trace == nil) {
		return stageKeys{}
	}
	k := stageKeys{windows: true, agent: agent, start: map[string]time.Duration{}}
	for _, v := range m.Variants {
		if len(v.Stages) > 0 {
			k.start[v.Name] = v.Stages[0].Start
		}
	}
	return k
}

// header returns the columns that name a stage.
func (k stageKeys) header() []string {
	switch {
	case k.agent:
		return []string{"window (min)", "trees started"}
	case k.windows:
		return []string{"window (min)", "conversations started"}
	}
	return []string{"sessions"}
}

// cells returns the naming cells of one variant's stage s.
func (k stageKeys) cells(s *Summary) []string {
	if k.windows {
		return []string{k.window(s), strconv.Itoa(s.Sessions)}
	}
	return []string{strconv.Itoa(s.Sessions)}
}

// label names stage s in a sentence: "8 sessions", or "window 0-5 min".
func (k stageKeys) label(s *Summary) string {
	if k.windows {
		return "window " + k.window(s) + " min"
	}
	return strconv.Itoa(s.Sessions) + " sessions"
}

// window is s's window in minutes since its variant's first window started,
// "start-end", each with at most one decimal.
func (k stageKeys) window(s *Summary) string {
	t0 := k.start[s.Variant]
	return minutes(s.WindowStart-t0) + "-" + minutes(s.WindowEnd-t0)
}

func minutes(d time.Duration) string {
	return strconv.FormatFloat(math.Round(d.Minutes()*10)/10, 'f', -1, 64)
}

// rowCells returns the naming cells of a paired row: the closed loop's
// sessions; for windows, the window (one label, or "a -> b" where the
// variants' windows differ, as a last window cut at each variant's end does)
// and the trees started in each variant ("9 -> 8").
func (k stageKeys) rowCells(r stageRow) []string {
	if !k.windows {
		return []string{strconv.Itoa(r.sessions)}
	}
	var wins, trees []string
	drain := !k.agent
	for _, s := range r.cells {
		drain = drain && s != nil && s.Sessions == 0
		if s == nil {
			trees = append(trees, "n/a")
			continue
		}
		if w := k.window(s); len(wins) == 0 || wins[len(wins)-1] != w {
			wins = append(wins, w)
		}
		trees = append(trees, strconv.Itoa(s.Sessions))
	}
	w := strings.Join(wins, " -> ")
	if drain {
		w += " (drain)" // no conversation started: the tail of the last ones
	}
	return []string{w, strings.Join(trees, " -> ")}
}

// rowLabel names a paired row in a sentence: "8 sessions", "window 0-5 min".
func (k stageKeys) rowLabel(r stageRow) string {
	if !k.windows {
		return strconv.Itoa(r.sessions) + " sessions"
	}
	w, drain := strings.CutSuffix(k.rowCells(r)[0], " (drain)")
	if drain {
		return "window " + w + " min (drain)"
	}
	return "window " + w + " min"
}

// rows lines up the stages of variants: by index and sessions for the closed
// loop (stageRows), by index alone for windows.
func (k stageKeys) rows(variants []string, sums []Summary) []stageRow {
	return stageRowsBy(variants, sums, k.windows)
}
