package study

import (
	"math"
	"slices"
	"time"

	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/report"
)

// Trace is the ground truth of one variant of a run, per replica over time, at the
// instants the harness polled the engines (series.csv, every second by default).
// Everything is rebuilt from the results directory alone (turns.jsonl and
// series.csv), so a trace can be drawn for any past run, virtual or HTTP.
//
// Definitions (a conversation is one session of the closed loop):
//   - A conversation is live from its first request until its last turn is done
//     (or the run ends); it is on the replica that served its latest request.
//   - Its context is the prompt plus the output of its latest turn (the tokens the
//     next turn re-sends as a prefix); the working set of a replica is the sum of
//     the contexts of the conversations live on it.
//   - In flight: requests sent and not done on the replica.
//   - Running, waiting, KV usage and preemptions are the engine's gauges and
//     counter as polled (preemptions counted from the variant's first poll).
type Trace struct {
	Variant  string
	Replicas []string
	Start    time.Duration // the variant's first poll
	T        []float64     // seconds since Start, one per tick

	// [replica][tick]
	Live, WorkingSet, InFlight     [][]float64
	Running, Waiting, KV, Preempts [][]float64
	// Cumulative prefix-cache counters as polled (vllm:prefix_cache_queries_total,
	// _hits_total), from the variant's first poll.
	PrefixQueries, PrefixHits [][]float64

	// Placements: each conversation's first request, with the live conversations
	// per replica just before it.
	Placements []TracePlacement
}

// TracePlacement is one conversation's placement as the trace sees it.
type TracePlacement struct {
	T          float64 // seconds since Trace.Start
	Replica    int
	Live       []int     // live conversations per replica just before the placement
	WorkingSet []float64 // their contexts summed per replica, tokens
}

// BuildTrace builds the trace of variant from run, or nil when the variant has no
// poll samples or no turns.
func BuildTrace(run *report.Run, variant string) *Trace {
	tr, idx, ticks := traceSeries(run, variant)
	if tr == nil {
		return nil
	}
	tr.addTurns(run, variant, idx, ticks)
	return tr
}

// tickAt returns the index of the first of ticks (sorted) at or after t.
func tickAt(ticks []time.Duration, t time.Duration) int {
	k, _ := slices.BinarySearch(ticks, t)
	return k
}

// traceSeries starts the trace of variant from run's poll samples: the
// replicas (index by name), the sorted distinct sample times and the per-tick
// engine series; nil when the variant has no samples.
func traceSeries(run *report.Run, variant string) (*Trace, map[string]int, []time.Duration) {
	tr := &Trace{Variant: variant}
	idx := map[string]int{}
	for _, r := range run.Manifest.Replicas {
		idx[r] = len(tr.Replicas)
		tr.Replicas = append(tr.Replicas, r)
	}
	var ticks []time.Duration
	for _, s := range run.Series {
		if s.Variant != variant {
			continue
		}
		if _, ok := idx[s.Replica]; !ok {
			idx[s.Replica] = len(tr.Replicas)
			tr.Replicas = append(tr.Replicas, s.Replica)
		}
		ticks = append(ticks, s.T)
	}
	slices.Sort(ticks)
	ticks = slices.Compact(ticks)
	if len(ticks) == 0 {
		return nil, nil, nil
	}
	tr.Start = ticks[0]
	n, m := len(tr.Replicas), len(ticks)
	mk := func() [][]float64 {
		out := make([][]float64, n)
		for i := range out {
			out[i] = make([]float64, m)
		}
		return out
	}
	tr.Live, tr.WorkingSet, tr.InFlight = mk(), mk(), mk()
	tr.Running, tr.Waiting, tr.KV, tr.Preempts = mk(), mk(), mk(), mk()
	tr.PrefixQueries, tr.PrefixHits = mk(), mk()
	tr.T = make([]float64, m)
	for k, t := range ticks {
		tr.T[k] = (t - tr.Start).Seconds()
	}
	first := make([]float64, n)
	firstQ, firstH := make([]float64, n), make([]float64, n)
	seen := make([]bool, n)
	for _, s := range run.Series {
		if s.Variant != variant {
			continue
		}
		i, k := idx[s.Replica], tickAt(ticks, s.T)
		tr.Running[i][k], tr.Waiting[i][k], tr.KV[i][k] = s.Running, s.Waiting, s.KVUsage
		if !seen[i] {
			first[i], firstQ[i], firstH[i], seen[i] = s.Preemptions, s.PrefixQueries, s.PrefixHits, true
		}
		tr.Preempts[i][k] = s.Preemptions - first[i]
		tr.PrefixQueries[i][k], tr.PrefixHits[i][k] = s.PrefixQueries-firstQ[i], s.PrefixHits-firstH[i]
	}
	return tr, idx, ticks
}

// addTurns adds the turn-derived series (in flight, live conversations, working
// set) and the placements of variant's turns in run to tr (ticks as traceSeries
// returned them).
func (tr *Trace) addTurns(run *report.Run, variant string, idx map[string]int, ticks []time.Duration) {
	n, m := len(tr.Replicas), len(ticks)
	// Sessions: their turns in order.
	sess := map[int64][]*loadgen.Result{}
	for j := range run.Results {
		r := &run.Results[j]
		if r.Variant == variant && r.Replica != "" && !r.Side { // side requests are not turns
			sess[r.Session] = append(sess[r.Session], r)
		}
	}
	end := ticks[m-1] + time.Nanosecond
	// Difference arrays over ticks: add v on [a, b).
	add := func(arr []float64, a, b time.Duration, v float64) {
		ka, kb := tickAt(ticks, a), tickAt(ticks, b)
		for k := ka; k < kb && k < m; k++ {
			arr[k] += v
		}
	}
	type start struct {
		at      time.Duration
		replica int
	}
	var starts []start
	type span struct {
		a, b    time.Duration
		replica int
		tokens  float64
	}
	var live []span
	for _, turns := range sess {
		slices.SortFunc(turns, func(a, b *loadgen.Result) int { return a.Turn - b.Turn })
		for j, r := range turns {
			i, ok := idx[r.Replica]
			if !ok {
				continue
			}
			done := r.Done
			if done == 0 {
				done = end
			}
			add(tr.InFlight[i], r.Sent, done, 1)
			b := end
			switch {
			case j+1 < len(turns):
				b = turns[j+1].Sent
			case r.LastTurn || !r.OK():
				b = done
			}
			add(tr.Live[i], r.Sent, b, 1)
			add(tr.WorkingSet[i], r.Sent, b, float64(r.PromptTokens+r.OutputTokens))
			live = append(live, span{r.Sent, b, i, float64(r.PromptTokens + r.OutputTokens)})
			if r.Turn == 0 {
				starts = append(starts, start{r.Sent, i})
			}
		}
	}
	slices.SortFunc(starts, func(a, b start) int { return int(a.at - b.at) })
	for _, s := range starts {
		p := TracePlacement{T: (s.at - tr.Start).Seconds(), Replica: s.replica, Live: make([]int, n), WorkingSet: make([]float64, n)}
		for _, l := range live {
			if l.a < s.at && s.at < l.b {
				p.Live[l.replica]++
				p.WorkingSet[l.replica] += l.tokens
			}
		}
		tr.Placements = append(tr.Placements, p)
	}
}

// stageMeans fills the trace means of st over ticks in [a, b).
func (tr *Trace) stageMeans(st *Stage, a, b time.Duration) {
	var nt, live, ws, spread, idle float64
	for k, t := range tr.T {
		at := tr.Start + time.Duration(t*float64(time.Second))
		if at < a || at >= b {
			continue
		}
		nt++
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := range tr.Replicas {
			l := tr.Live[i][k]
			live += l
			ws += tr.WorkingSet[i][k]
			lo, hi = min(lo, l), max(hi, l)
			if l == 0 {
				idle++
			}
		}
		spread += hi - lo
	}
	var pre float64
	for i := range tr.Replicas {
		first := tr.Preempts[i][0]
		last := first
		for k, t := range tr.T {
			at := tr.Start + time.Duration(t*float64(time.Second))
			if at <= a {
				first = tr.Preempts[i][k]
			}
			if at < b {
				last = tr.Preempts[i][k]
			}
		}
		pre += last - first
	}
	st.Preemptions = pre
	if nt == 0 {
		st.LiveConversations, st.WorkingSetTokens, st.LiveSpread, st.IdleReplicas = nan(), nan(), nan(), nan()
		return
	}
	st.LiveConversations, st.WorkingSetTokens = live/nt, ws/nt
	st.LiveSpread, st.IdleReplicas = spread/nt, idle/nt
}

func nan() float64 { return math.NaN() }

// HitRate returns the fleet's prefix hit rate in percent over consecutive bins of
// the given length: (delta hits) / (delta queries) summed over replicas, the
// counters' own definition; x is the bin's end in seconds since Start. Bins with
// no queries are left out.
func (tr *Trace) HitRate(bin time.Duration) (x, pct []float64) {
	step := bin.Seconds()
	lastQ, lastH, lastT := 0.0, 0.0, 0.0
	for k, t := range tr.T {
		if t-lastT < step && k != len(tr.T)-1 {
			continue
		}
		var q, h float64
		for i := range tr.Replicas {
			q += tr.PrefixQueries[i][k]
			h += tr.PrefixHits[i][k]
		}
		if q > lastQ {
			x = append(x, t)
			pct = append(pct, 100*(h-lastH)/(q-lastQ))
		}
		lastQ, lastH, lastT = q, h, t
	}
	return x, pct
}
