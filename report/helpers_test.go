package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

// sec converts seconds to a Duration.
func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// writeRunDir writes a results directory in the format loadgen writes
// (docs/DESIGN-NOTES.md) from hand-made records. A nil series writes no series.csv.
func writeRunDir(t *testing.T, dir string, m *loadgen.Manifest, results []loadgen.Result, series []loadgen.SeriesSample) {
	t.Helper()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var turns strings.Builder
	for _, r := range results {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		turns.Write(line)
		turns.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, TurnsFile), []byte(turns.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if series == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, SeriesFile), encodeSeries(t, series), 0o644); err != nil {
		t.Fatal(err)
	}
}

// encodeSeries writes samples as series.csv (NaN as an empty cell).
func encodeSeries(t testing.TB, series []loadgen.SeriesSample) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	f := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	_ = w.Write(loadgen.SeriesHeader)
	for _, s := range series {
		_ = w.Write([]string{s.Variant, f(s.T.Seconds()), s.Replica,
			f(s.Running), f(s.Waiting), f(s.KVUsage), f(s.PrefixQueries), f(s.PrefixHits),
			f(s.PromptTokens), f(s.GenerationTokens), f(s.Preemptions), f(s.PromptComputedTokens)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// okTurn builds an OK turn sent at sent, first token ttfb later, done at done.
func okTurn(variant string, session int64, turn int, replica string, sent, ttfb, done float64, out int) loadgen.Result {
	return loadgen.Result{
		Variant: variant, Session: session, SessionKey: fmt.Sprintf("%s-%d", variant, session), Turn: turn,
		Replica: replica, Intended: sec(sent), Sent: sec(sent), Headers: sec(sent + ttfb/2),
		FirstEvent: sec(sent + ttfb), FirstToken: sec(sent + ttfb), LastToken: sec(done), Done: sec(done),
		Status: 200, PromptTokens: 1000, OutputTokens: out, CachedTokens: -1, NominalPromptTokens: 900,
	}
}

func testScenario(stages []int, stage time.Duration) *loadgen.Scenario {
	return &loadgen.Scenario{
		Name: "synthetic", Seed: 7, SystemPromptTokens: 3500, FirstTurnTokens: 6000, TurnTokens: 400,
		Turns: 6, MaxOutputTokens: 256, Stages: stages, StageDuration: stage, Variants: []string{"off", "on"},
	}
}

// syntheticRun builds a deterministic two-variant run (off, then on) with a
// closed loop of sessions over stages of 4, 8 and 16 sessions, 3 minutes each, on
// 4 replicas, with series polled every 5 s. The numbers are made up (seeded
// math/rand/v2); they only need to be plausible and stable for golden files and
// figures.
func syntheticRun() (*loadgen.Manifest, []loadgen.Result, []loadgen.SeriesSample) {
	const stageLen = 180.0
	levels := []int{4, 8, 16}
	replicas := []string{"r0", "r1", "r2", "r3"}
	m := &loadgen.Manifest{
		RunID: "synthetic-0001", Created: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Mode: "virtual", Target: "simulator", Scenario: testScenario(levels, 3*time.Minute), Seed: 7, Speed: 1,
		Replicas: replicas, Profile: "a4000-qwen3-4b", Policy: "sticky",
		Versions: map[string]string{"warden": "test"},
	}
	var results []loadgen.Result
	var series []loadgen.SeriesSample
	origin := 0.0
	for vi, name := range []string{"off", "on"} {
		on := vi == 1
		rng := rand.New(rand.NewPCG(7, uint64(vi)))
		v := loadgen.Variant{Name: name, Affinity: on, Complete: true}
		type inflight struct {
			replica       string
			start, end    float64
			prompt, cache int
		}
		var flights []inflight
		var session int64
		end := origin + stageLen*float64(len(levels))
		type slot struct {
			session int64
			turn    int
			t       float64
			placed  string
		}
		var slots []*slot
		for si, level := range levels {
			st := origin + stageLen*float64(si)
			v.Stages = append(v.Stages, loadgen.StageWindow{Sessions: level, Start: sec(st), End: sec(st + stageLen), Complete: true})
			for len(slots) < level {
				slots = append(slots, &slot{session: session, t: st})
				session++
			}
			for _, sl := range slots {
				for sl.t < st+stageLen && sl.t < end {
					replica := replicas[rng.IntN(len(replicas))]
					if sl.turn == 0 {
						sl.placed = replica
					} else if on && rng.Float64() < 0.95 {
						replica = sl.placed
					}
					load := float64(level) / 4
					base := 0.3 + 0.2*load
					if !on {
						base = 1.5 + 0.4*load
					}
					ttfb := base * (0.6 + 0.8*rng.Float64())
					if rng.Float64() < 0.05 {
						ttfb *= 3 // tail
					}
					done := sl.t + ttfb + 2 + 0.05*load*rng.Float64()
					prompt := 9500 + 500*sl.turn
					cached := int(float64(prompt) * (0.4 + 0.1*rng.Float64()))
					if on && replica == sl.placed && sl.turn > 0 {
						cached = int(float64(prompt) * 0.9)
					}
					r := okTurn(name, sl.session, sl.turn, replica, sl.t, ttfb, done, 200+rng.IntN(57))
					r.PromptTokens, r.CachedTokens, r.NominalPromptTokens = prompt, cached, 9000+400*sl.turn
					r.LastTurn = sl.turn == 5
					if rng.Float64() < 0.02 {
						r.Status, r.Err, r.OutputTokens, r.FirstToken, r.LastToken = 502, "upstream reset", 0, 0, 0
					}
					results = append(results, r)
					flights = append(flights, inflight{replica, sl.t, done, prompt, cached})
					sl.t = done + 0.5
					sl.turn++
					if sl.turn == 6 {
						sl.session, sl.turn, sl.placed = session, 0, ""
						session++
					}
				}
			}
		}
		// Accounting: every turn sent in a stage is done (no timeouts in this data).
		for si := range v.Stages {
			st := &v.Stages[si]
			for _, r := range results {
				if r.Variant == name && r.Sent >= st.Start && r.Sent < st.End {
					st.Started++
					if r.OK() {
						st.Completed++
					} else {
						st.Failed++
					}
				}
			}
		}
		m.Variants = append(m.Variants, v)
		// Series: poll every 5 s.
		for t := origin; t <= end+10; t += 5 {
			for _, rep := range replicas {
				s := loadgen.SeriesSample{Variant: name, T: sec(t), Replica: rep}
				for _, f := range flights {
					if f.replica != rep {
						continue
					}
					if f.start <= t && t < f.end {
						s.Running++
					}
					if f.start <= t {
						s.PrefixQueries += float64(f.prompt)
						s.PrefixHits += float64(f.cache)
						s.PromptTokens += float64(f.prompt)
						s.PromptComputedTokens += float64(f.prompt - f.cache)
					}
				}
				series = append(series, s)
			}
		}
		origin = end + 30
	}
	return m, results, series
}
