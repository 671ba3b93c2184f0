package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lmwarden/warden/loadgen"
)

// Histogram bounds for TTFB, in microseconds: 1 µs to 1 h with 3 significant digits
// (a relative error of at most 0.1 % on every quantile). A TTFB above 1 h is
// recorded as 1 h. The default per-turn timeout (loadgen.Scenario.RequestTimeout) is
// 10 min, so the clamp does not bite in practice.
const (
	ttfbLowestUS  = 1
	ttfbHighestUS = int64(time.Hour / time.Microsecond)
	// conversationHighestUS bounds the conversation completion time histogram.
	conversationHighestUS = int64(24 * time.Hour / time.Microsecond)
	ttfbSigFigs           = 3
)

// SubWindow is the length of the sub-windows a measured window is cut into to
// estimate noise: the window of length W is cut into n = max(1, round(W/SubWindow))
// equal parts, the metric is computed in each part, and its standard error is
// sd(parts)/sqrt(n). With 3-minute stages that is 3 one-minute values.
const SubWindow = time.Minute

// z95 is the two-sided 95 % normal quantile used for confidence intervals.
const z95 = 1.96

// Summary is the figure set of one stage of one variant, computed over the stage's
// measured window [Start+Warmup, End) (loadgen.StageWindow). A value that cannot be
// computed (no samples, no OK turns, a series the scraper did not find, a zero
// denominator) is NaN, printed "n/a" and written as an empty CSV cell or JSON null;
// it is never 0 (docs/bench.md, failure case 4). Notes say why.
//
// Attribution (docs/DESIGN-NOTES.md, "Stage rule"): a turn belongs to the window
// that contains its Done instant; a session is completed in the window that
// contains the Done instant of its last turn, if that turn was OK.
type Summary struct {
	Variant     string        `json:"variant"`         // loadgen.Variant.Name, e.g. "off" or "on"
	Affinity    bool          `json:"affinity"`        // loadgen.Variant.Affinity
	Stage       int           `json:"stage"`           // 0-based index in loadgen.Variant.Stages
	Sessions    int           `json:"sessions"`        // concurrent sessions held in the stage
	WindowStart time.Duration `json:"window_start_ns"` // Start+Warmup, simulated time
	WindowEnd   time.Duration `json:"window_end_ns"`   // End (exclusive)
	Complete    bool          `json:"complete"`        // loadgen.StageWindow.Complete

	// Turns done in the window: OK (status 200, no error) and failed.
	TurnsOK     int `json:"turns_ok"`
	TurnsFailed int `json:"turns_failed"`
	// FailedBy counts the failed turns by reason (failureReason: status and
	// error text, numbers as N); absent when none failed.
	FailedBy map[string]int `json:"turns_failed_by,omitempty"`
	// TurnsNoOutput counts the OK turns that streamed no content, reasoning or
	// tool-call delta (Result.FirstToken == 0): they have no TTFB and are left out
	// of it. They stay in TurnsOK and, as a session's last turn, in SessionsPerH:
	// the server answered with status 200 and a complete stream, and the closed
	// loop went on with the session (an empty reply). A note gives their share.
	TurnsNoOutput int `json:"turns_no_output"`

	// SessionsCompleted counts sessions whose last turn is done OK in the window;
	// SessionsPerH is that count scaled to an hour: SessionsCompleted * 3600 / window_s.
	SessionsCompleted int     `json:"sessions_completed"`
	SessionsPerH      float64 `json:"sessions_per_h"`

	// ConversationP50S / ConversationP95S are the quantiles, in seconds, of the
	// conversation completion time of those sessions: from the first send of
	// the session (the earliest Result.Sent of its turns, so a hold at the
	// router and any retry count) to its last turn's Done, think time between
	// turns included: what an agent waits for its whole task. HDR histogram in
	// microseconds up to 24 h, 3 significant digits; NaN when no session
	// completed in the window.
	ConversationP50S float64 `json:"conversation_p50_s"`
	ConversationP95S float64 `json:"conversation_p95_s"`

	// OutputTokensPerMin is the sum of Result.OutputTokens (server-counted
	// completion tokens) of OK turns done in the window, per minute of window.
	OutputTokensPerMin float64 `json:"output_tokens_per_min"`

	// TTFB quantiles in seconds over OK turns done in the window that produced a
	// token (Result.TTFB() > 0): client side, Sent to FirstToken. Computed with an
	// HDR histogram at microsecond resolution, 3 significant digits; a quantile is
	// the nearest-rank value (hdrhistogram-go ValueAtQuantile).
	TTFBP50S float64 `json:"ttfb_p50_s"`
	TTFBP95S float64 `json:"ttfb_p95_s"`

	// Send lag quantiles in seconds over the turns done in the window (OK or
	// not): Result.Sent - Result.Intended, how late the harness wrote each request
	// after the closed loop wanted it sent (client scheduling, connection setup; in
	// virtual time a hold at the router). It is not part of TTFB, which starts at
	// Sent; a large lag means the harness, not the server, limited the offered
	// load. Same histogram settings as TTFB; NaN when no turn is in the window.
	SendLagP50S float64 `json:"send_lag_p50_s"`
	SendLagP99S float64 `json:"send_lag_p99_s"`

	// HeldTurns counts the turns done in the window (OK or not) that the router
	// held before sending them upstream (Result.Held > 0: admission), and
	// HoldP50S / HoldP95S / HoldMaxS are the quantiles and the longest of their
	// hold in seconds (same histogram settings as TTFB; NaN when none was held).
	// The hold is part of their TTFB.
	HeldTurns int     `json:"held_turns"`
	HoldP50S  float64 `json:"hold_p50_s"`
	HoldP95S  float64 `json:"hold_p95_s"`
	HoldMaxS  float64 `json:"hold_max_s"`

	// ReplicasBusy is the mean number of replicas with running > 0
	// (vllm:num_requests_running) per poll in the window. Computed per replica as
	// the share of its polls in the window with running > 0, summed over replicas:
	// equal to the mean over poll instants of the busy count when all replicas are
	// polled at the same instants, and robust to a missed poll when they are not.
	// Not GPU utilisation.
	ReplicasBusy float64 `json:"replicas_busy"`

	// Prefix-cache counters (vllm:prefix_cache_queries_total, _hits_total, in
	// tokens) as deltas over the window, summed over replicas: from the last sample
	// at or before the window start (or the replica's first sample, if it has none
	// before) to the last sample at or before the window end, adding reset-aware
	// deltas (vllmmetrics.CounterDelta) between consecutive samples so a restart in
	// the window loses nothing. PrefixHitsPct = 100 * hits / queries.
	PrefixQueriesTokens float64 `json:"prefix_queries_tokens"`
	PrefixHitsTokens    float64 `json:"prefix_hits_tokens"`
	PrefixHitsPct       float64 `json:"prefix_hits_pct"`

	// StayedPct is the share, in percent, of OK later turns (Turn > 0) done in the
	// window that were served by the replica that served the session's turn 0
	// (Result.Replica, from the router's X-Warden-Replica header). Turns whose own
	// replica or whose session's first replica is unknown are left out.
	StayedTurns int     `json:"stayed_turns"`
	MovedTurns  int     `json:"moved_turns"`
	StayedPct   float64 `json:"stayed_pct"`

	// Side requests (loadgen.SideRequests) done in the window, OK and failed, and
	// the share of the OK ones served by the replica of their session's turn 0
	// (NaN when none is known). They count in no other figure of the summary,
	// except the server's own counters (prefix hits, busy replicas).
	SideOK        int     `json:"side_requests_ok"`
	SideFailed    int     `json:"side_requests_failed"`
	SideOnHomePct float64 `json:"side_on_home_pct"`

	// UsageCachedPct is the server's per-request view of the same hit rate:
	// 100 * sum(CachedTokens) / sum(PromptTokens) over OK turns in the window whose
	// usage reported cached tokens (CachedTokens >= 0).
	UsageCachedPct float64 `json:"usage_cached_pct"`

	// Goodput under the scenario's SLO (loadgen.SLO; NaN without one): the
	// share of the turns done in the window (OK or failed; side requests left
	// out) that are OK and meet both the TTFB and the time-per-output-token
	// limits, in percent, and those turns per minute of window. GoodTurns counts
	// them.
	GoodTurns     int     `json:"good_turns"`
	GoodputPct    float64 `json:"goodput_pct"`
	GoodputPerMin float64 `json:"goodput_per_min"`

	// ComputedPromptTokens is the delta of the engines' computed-prompt counter
	// (series prompt_computed_tokens, loadgen.SeriesSample.PromptComputedTokens)
	// over the window, summed over replicas, as counterDelta takes it; and
	// ComputedCachedPct the cached share it implies against the prompt tokens
	// the responses reported: 100 * (P - computed) / P, P the sum of usage
	// prompt_tokens of the OK turns and side requests whose first token fell in
	// the window (side requests too: the counter counts them; the first token,
	// because the engines count then). A cross-check of PrefixHitsPct and
	// UsageCachedPct that holds when nothing else uses the servers (llama.cpp's
	// capability HitRate). NaN when a replica lacks the counter, and in a
	// variant's last window when turns were in flight at its end (they reached
	// their first token, counted, but left no usage).
	ComputedPromptTokens float64 `json:"computed_prompt_tokens"`
	ComputedCachedPct    float64 `json:"computed_cached_pct"`

	// Mean prompt size of OK turns in the window: server-counted (usage
	// prompt_tokens, after chat template and real tokenizer) and nominal (the
	// generator's word count).
	PromptTokensMean        float64 `json:"prompt_tokens_mean"`
	NominalPromptTokensMean float64 `json:"nominal_prompt_tokens_mean"`

	// Noise estimates from SubWindows equal sub-windows (see SubWindow): the
	// standard error of the metric's per-sub-window values. NaN with fewer than two
	// sub-windows holding data.
	SubWindows               int     `json:"sub_windows"`
	OutputTokensPerMinStdErr float64 `json:"output_tokens_per_min_stderr"`
	TTFBP50StdErrS           float64 `json:"ttfb_p50_stderr_s"`
	TTFBP95StdErrS           float64 `json:"ttfb_p95_stderr_s"`

	// Concurrency is the concurrency the stage achieved (concurrency.go).
	Concurrency Concurrency `json:"concurrency"`

	// Accounting is the harness's own turn accounting at the end of the window,
	// copied from the manifest (docs/bench.md, failure case 5).
	Accounting Accounting `json:"accounting"`

	// ByTurn breaks the window's turns (the same ones as above: Done in the window,
	// side requests left out) down by turn index, one TurnStats per index with at
	// least one turn done, OK or failed, sorted by index; empty when no turn was
	// done in the window.
	ByTurn []TurnStats `json:"by_turn"`

	Notes []string `json:"notes,omitempty"`
}

// Accounting is loadgen.StageWindow's turn accounting. Balanced reports whether
// CarriedIn + Started == Completed + Failed + InFlight (loadgen.StageWindow.Balanced;
// a manifest without turns_carried_in is converted when read); an unbalanced stage
// means the harness lost turns and its figures are suspect.
type Accounting struct {
	CarriedIn int  `json:"turns_carried_in"` // in flight at the window's start
	Started   int  `json:"turns_started"`    // sent inside the window
	Completed int  `json:"turns_completed"`
	Failed    int  `json:"turns_failed"`
	InFlight  int  `json:"turns_in_flight"`
	Balanced  bool `json:"balanced"`
}

// WindowSeconds is the length of the measured window in seconds.
func (s *Summary) WindowSeconds() float64 { return (s.WindowEnd - s.WindowStart).Seconds() }

// SummarizeDir loads the results directory dir (Load) and summarises it
// (Summarize).
func SummarizeDir(dir string) ([]Summary, error) {
	run, err := Load(dir)
	if err != nil {
		return nil, err
	}
	return Summarize(run)
}

// Summarize computes one Summary per stage of every variant in run.Manifest, in
// manifest order (variants, then stages). It fails only when the manifest has no
// variant; missing data shows as NaN values with notes.
func Summarize(run *Run) ([]Summary, error) {
	if len(run.Manifest.Variants) == 0 {
		return nil, errors.New("summarizing run: manifest lists no variant")
	}
	byVariant := make(map[string][]*loadgen.Result)
	for i := range run.Results {
		r := &run.Results[i]
		byVariant[r.Variant] = append(byVariant[r.Variant], r)
	}
	seriesByVariant := make(map[string][]loadgen.SeriesSample)
	for _, s := range run.Series {
		seriesByVariant[s.Variant] = append(seriesByVariant[s.Variant], s)
	}

	var out []Summary
	for _, v := range run.Manifest.Variants {
		results := byVariant[v.Name]
		// Replica that served each session's turn 0: where it was placed; and
		// the session's first send.
		placed := make(map[int64]string)
		firstSent := make(map[int64]time.Duration)
		for _, r := range results {
			if r.Side {
				continue
			}
			if r.Turn == 0 && r.Replica != "" {
				placed[r.Session] = r.Replica
			}
			if t, ok := firstSent[r.Session]; !ok || r.Sent < t {
				firstSent[r.Session] = r.Sent
			}
		}
		replicas := groupSeries(seriesByVariant[v.Name])
		for i, st := range v.Stages {
			s := Summary{
				Variant:     v.Name,
				Affinity:    v.Affinity,
				Stage:       i,
				Sessions:    st.Sessions,
				WindowStart: st.Start + st.Warmup,
				WindowEnd:   st.End,
				Complete:    st.Complete,
				Accounting: Accounting{
					CarriedIn: st.CarriedIn,
					Started:   st.Started,
					Completed: st.Completed,
					Failed:    st.Failed,
					InFlight:  st.InFlight,
					Balanced:  st.Balanced(),
				},
			}
			summarizeTurns(&s, results, placed, firstSent)
			if sc := run.Manifest.Scenario; sc != nil && sc.Trace != nil {
				// A replayed trace marks no conversation's last turn: no
				// completed-session count to give (not 0).
				s.SessionsPerH = math.NaN()
			}
			summarizeGoodput(&s, results, run.Manifest.Scenario)
			summarizeSeries(&s, replicas)
			summarizeComputed(&s, results, replicas)
			if i == len(v.Stages)-1 && st.InFlight > 0 && !math.IsNaN(s.ComputedCachedPct) {
				// Turns cut at the variant's end reached their first token
				// (counted) but left no record with usage.
				s.ComputedCachedPct = math.NaN()
				s.note(fmt.Sprintf("computed_cached_pct n/a: %d turns were in flight at the variant's end; the engines counted their prompt tokens, but they left no usage to set beside", st.InFlight))
			}
			summarizeConcurrency(&s, results, replicas, st, run.Manifest.Scenario, keysOf(&run.Manifest).windows)
			switch {
			case !s.Complete && run.Manifest.Stopped != nil:
				s.note(fmt.Sprintf("stage did not complete (run stopped: %s): figures cover a partial window", run.Manifest.Stopped.Reason))
			case !s.Complete:
				s.note("stage did not complete (run interrupted): figures cover a partial window")
			}
			if !s.Accounting.Balanced {
				s.note(fmt.Sprintf("turn accounting does not balance: carried in %d + started %d != completed %d + failed %d + in flight %d",
					st.CarriedIn, st.Started, st.Completed, st.Failed, st.InFlight))
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func (s *Summary) note(msg string) { s.Notes = append(s.Notes, msg) }

// contains reports whether t lies in the half-open window [start, end).
func contains(start, end, t time.Duration) bool { return t >= start && t < end }

// summarizeTurns fills the per-turn columns of s from the variant's results.
func summarizeTurns(s *Summary, results []*loadgen.Result, placed map[int64]string, firstSent map[int64]time.Duration) {
	w := s.WindowSeconds()
	if w <= 0 {
		s.note("empty measured window (warm-up covers the stage)")
	}
	inWindow := summarizeSide(s, results, placed)
	summarizeWindowTurns(s, inWindow, placed, firstSent, w)
	summarizeNoise(s, inWindow, w)
}

// summarizeSide counts the side requests done in s's window into s and returns
// the turns (not side requests) done in it.
func summarizeSide(s *Summary, results []*loadgen.Result, placed map[int64]string) []*loadgen.Result {
	var inWindow []*loadgen.Result
	var sideHome, sideAway int
	for _, r := range results {
		if !contains(s.WindowStart, s.WindowEnd, r.Done) {
			continue
		}
		if !r.Side {
			inWindow = append(inWindow, r)
			continue
		}
		// A side request: counted apart, never in the turn figures.
		if !r.OK() {
			s.SideFailed++
			continue
		}
		s.SideOK++
		if first, ok := placed[r.Session]; ok && r.Replica != "" {
			if r.Replica == first {
				sideHome++
			} else {
				sideAway++
			}
		}
	}
	s.SideOnHomePct = pct(float64(sideHome), float64(sideHome+sideAway))
	return inWindow
}

// summarizeWindowTurns fills the turn, TTFB, hold, lag, conversation and
// placement columns of s from the turns of its window (w seconds long).
func summarizeWindowTurns(s *Summary, inWindow []*loadgen.Result, placed map[int64]string, firstSent map[int64]time.Duration, w float64) {
	nan := math.NaN()
	var outTokens, promptSum, nominalSum int64
	var cachedSum, cachedPromptSum int64
	hist, lag, held := newTTFBHistogram(), newTTFBHistogram(), newTTFBHistogram()
	conv := hdrhistogram.New(ttfbLowestUS, conversationHighestUS, ttfbSigFigs)
	for _, r := range inWindow {
		if r.Sent >= r.Intended && r.Intended >= 0 {
			_ = lag.RecordValue(min(max(int64((r.Sent-r.Intended)/time.Microsecond), 0), ttfbHighestUS))
		}
		if r.Held > 0 {
			s.HeldTurns++
			_ = held.RecordValue(min(int64(r.Held/time.Microsecond), ttfbHighestUS))
		}
		if !r.OK() {
			s.TurnsFailed++
			if s.FailedBy == nil {
				s.FailedBy = map[string]int{}
			}
			s.FailedBy[failureReason(r)]++
			continue
		}
		s.TurnsOK++
		if r.FirstToken == 0 {
			s.TurnsNoOutput++
		}
		outTokens += int64(r.OutputTokens)
		promptSum += int64(r.PromptTokens)
		nominalSum += int64(r.NominalPromptTokens)
		if r.CachedTokens >= 0 {
			cachedSum += int64(r.CachedTokens)
			cachedPromptSum += int64(r.PromptTokens)
		}
		if r.LastTurn {
			s.SessionsCompleted++
			if t0, ok := firstSent[r.Session]; ok && r.Done > t0 {
				_ = conv.RecordValue(min(max(int64((r.Done-t0)/time.Microsecond), ttfbLowestUS), conversationHighestUS))
			}
		}
		recordTTFB(hist, r)
		if r.Turn > 0 {
			first, ok := placed[r.Session]
			switch {
			case !ok || r.Replica == "":
				// Unknown placement or unknown server: cannot say.
			case r.Replica == first:
				s.StayedTurns++
			default:
				s.MovedTurns++
			}
		}
	}

	s.SessionsPerH, s.OutputTokensPerMin = nan, nan
	if w > 0 {
		s.SessionsPerH = float64(s.SessionsCompleted) * 3600 / w
		s.OutputTokensPerMin = float64(outTokens) * 60 / w
	}
	s.TTFBP50S, s.TTFBP95S = quantileS(hist, 50), quantileS(hist, 95)
	s.SendLagP50S, s.SendLagP99S = quantileS(lag, 50), quantileS(lag, 99)
	s.HoldP50S, s.HoldP95S, s.HoldMaxS = quantileS(held, 50), quantileS(held, 95), quantileS(held, 100)
	s.ConversationP50S, s.ConversationP95S = quantileS(conv, 50), quantileS(conv, 95)
	if hist.TotalCount() == 0 {
		s.note("no OK turn with a first token in the window: TTFB n/a")
	}
	if s.TurnsNoOutput > 0 {
		s.note(fmt.Sprintf("%d of %d OK turns (%.1f %%) produced no output token (no content, reasoning or tool-call delta): "+
			"left out of TTFB, still counted in turns_ok and sessions/h (turns_no_output)",
			s.TurnsNoOutput, s.TurnsOK, pct(float64(s.TurnsNoOutput), float64(s.TurnsOK))))
	}
	s.StayedPct = pct(float64(s.StayedTurns), float64(s.StayedTurns+s.MovedTurns))
	s.UsageCachedPct = pct(float64(cachedSum), float64(cachedPromptSum))
	s.ByTurn = byTurn(inWindow)
	s.PromptTokensMean, s.NominalPromptTokensMean = nan, nan
	if s.TurnsOK > 0 {
		s.PromptTokensMean = float64(promptSum) / float64(s.TurnsOK)
		s.NominalPromptTokensMean = float64(nominalSum) / float64(s.TurnsOK)
	}
}

// summarizeNoise fills the standard errors of s from per-sub-window values of
// the turns of its window (w seconds long).
func summarizeNoise(s *Summary, inWindow []*loadgen.Result, w float64) {
	nan := math.NaN()
	s.OutputTokensPerMinStdErr, s.TTFBP50StdErrS, s.TTFBP95StdErrS = nan, nan, nan
	if w <= 0 {
		return
	}
	n := max(1, int(math.Round(float64(s.WindowEnd-s.WindowStart)/float64(SubWindow))))
	s.SubWindows = n
	length := (s.WindowEnd - s.WindowStart) / time.Duration(n)
	tokens := make([]float64, n)
	hists := make([]*hdrhistogram.Histogram, n)
	for k := range hists {
		hists[k] = newTTFBHistogram()
	}
	for _, r := range inWindow {
		if !r.OK() {
			continue
		}
		k := min(n-1, int((r.Done-s.WindowStart)/length))
		tokens[k] += float64(r.OutputTokens)
		recordTTFB(hists[k], r)
	}
	var p50s, p95s []float64
	for k := range n {
		tokens[k] *= 60 / length.Seconds()
		if hists[k].TotalCount() > 0 {
			p50s = append(p50s, quantileS(hists[k], 50))
			p95s = append(p95s, quantileS(hists[k], 95))
		}
	}
	_, s.OutputTokensPerMinStdErr = MeanStdErr(tokens)
	_, s.TTFBP50StdErrS = MeanStdErr(p50s)
	_, s.TTFBP95StdErrS = MeanStdErr(p95s)
}

// summarizeGoodput fills the goodput columns of s (see Summary.GoodputPct).
func summarizeGoodput(s *Summary, results []*loadgen.Result, sc *loadgen.Scenario) {
	s.GoodputPct, s.GoodputPerMin = math.NaN(), math.NaN()
	if sc == nil || sc.SLO == nil {
		return
	}
	n := 0
	for _, r := range results {
		if r.Side || !contains(s.WindowStart, s.WindowEnd, r.Done) {
			continue
		}
		n++
		if MeetsSLO(r, sc.SLO) {
			s.GoodTurns++
		}
	}
	s.GoodputPct = pct(float64(s.GoodTurns), float64(n))
	if w := s.WindowSeconds(); w > 0 {
		s.GoodputPerMin = float64(s.GoodTurns) * 60 / w
	}
}

// MeetsSLO reports whether turn r meets slo: OK, a first token, TTFB at most
// slo.TTFB and TPOT = (LastToken - FirstToken) / (OutputTokens - 1) at most
// slo.TPOT (vLLM benchmarks/serve.py: (latency - ttft) / (output_len - 1); a
// one-token reply has no TPOT and meets that limit). A zero limit is none.
func MeetsSLO(r *loadgen.Result, slo *loadgen.SLO) bool {
	if !r.OK() || r.FirstToken == 0 {
		return false
	}
	if slo.TTFB > 0 && r.TTFB() > slo.TTFB {
		return false
	}
	if slo.TPOT > 0 && r.OutputTokens > 1 {
		tpot := (r.LastToken - r.FirstToken) / time.Duration(r.OutputTokens-1)
		if tpot > slo.TPOT {
			return false
		}
	}
	return true
}

func newTTFBHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(ttfbLowestUS, ttfbHighestUS, ttfbSigFigs)
}

// recordTTFB records r's TTFB in microseconds if it produced a token.
func recordTTFB(h *hdrhistogram.Histogram, r *loadgen.Result) {
	d := r.TTFB()
	if d <= 0 {
		return
	}
	us := min(max(int64(d/time.Microsecond), ttfbLowestUS), ttfbHighestUS)
	// Cannot fail: us is within the histogram's trackable range.
	_ = h.RecordValue(us)
}

// quantileS returns the q-th percentile in seconds, NaN for an empty histogram.
func quantileS(h *hdrhistogram.Histogram, q float64) float64 {
	if h.TotalCount() == 0 {
		return math.NaN()
	}
	return float64(h.ValueAtQuantile(q)) / 1e6
}

// pct returns 100*num/den, NaN when den is 0 or either is NaN.
func pct(num, den float64) float64 {
	if den == 0 || math.IsNaN(num) || math.IsNaN(den) {
		return math.NaN()
	}
	return 100 * num / den
}

// MeanStdErr returns the mean and the standard error of the mean (sample
// standard deviation / sqrt(n)) of v, the per-sub-window values of a metric
// (see SubWindow) or any other set of samples of it; the standard error is NaN
// for fewer than two values, the mean too for none.
func MeanStdErr(v []float64) (mean, se float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) < 2 {
		return mean, math.NaN()
	}
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(v)-1))
	return mean, sd / math.Sqrt(float64(len(v)))
}

// coverageGaps is how many typical poll intervals a replica's samples may miss at
// the end of a window before the summary says so.
const coverageGaps = 3

// noteCoverage adds a note for each replica whose /metrics samples do not cover
// the window (a replica that died or stopped answering its scrapes): no sample
// in the window, or the last one more than coverageGaps typical poll intervals
// (the median gap between consecutive samples of any replica) before its end.
// Prefix hits and replicas busy then cover only what was sampled; the note says
// so instead of leaving "all replicas" to be believed (docs/bench.md, failure
// case 4).
func noteCoverage(s *Summary, replicas []replicaSeries) {
	var gaps []time.Duration
	for _, rs := range replicas {
		for k := 1; k < len(rs.samples); k++ {
			if g := rs.samples[k].T - rs.samples[k-1].T; g > 0 {
				gaps = append(gaps, g)
			}
		}
	}
	if len(gaps) == 0 {
		return
	}
	slices.Sort(gaps)
	poll := gaps[len(gaps)/2]
	for _, rs := range replicas {
		last, in := time.Duration(-1), 0
		for _, x := range rs.samples {
			if contains(s.WindowStart, s.WindowEnd, x.T) {
				in++
				last = x.T
			}
		}
		switch {
		case in == 0:
			s.note(fmt.Sprintf("replica %s: no /metrics sample in the window (scrapes failed?): prefix hits and replicas busy leave it out", rs.name))
		case s.WindowEnd-last > coverageGaps*poll:
			s.note(fmt.Sprintf("replica %s: /metrics samples stop %.0f s before the window's end (scrapes failed?): prefix hits and replicas busy cover it only until then",
				rs.name, (s.WindowEnd - last).Seconds()))
		}
	}
}

// summarizeSeries fills ReplicasBusy and the prefix-cache columns of s.
func summarizeSeries(s *Summary, replicas []replicaSeries) {
	nan := math.NaN()
	s.ReplicasBusy, s.PrefixHitsPct = nan, nan
	s.PrefixQueriesTokens, s.PrefixHitsTokens = nan, nan
	if len(replicas) == 0 {
		s.note("no series samples for this variant: replicas busy and prefix hits n/a")
		return
	}

	noteCoverage(s, replicas)

	// Replicas busy.
	busy, polled := 0.0, 0
	for _, rs := range replicas {
		n, running := 0, 0.0
		for _, x := range rs.samples {
			if !contains(s.WindowStart, s.WindowEnd, x.T) {
				continue
			}
			n++
			switch {
			case math.IsNaN(x.Running):
				running = nan
			case x.Running > 0:
				running++
			}
		}
		if n > 0 {
			polled++
			busy += running / float64(n)
		}
	}
	switch {
	case polled == 0:
		s.note("no series sample inside the window: replicas busy n/a")
	case math.IsNaN(busy):
		s.note("running-requests series missing from some sample: replicas busy n/a")
	default:
		s.ReplicasBusy = busy
	}

	// Prefix hits.
	queries, hits, counted := 0.0, 0.0, 0
	for _, rs := range replicas {
		q, ok := counterDelta(rs.samples, s.WindowStart, s.WindowEnd, func(x loadgen.SeriesSample) float64 { return x.PrefixQueries })
		if !ok {
			continue
		}
		h, _ := counterDelta(rs.samples, s.WindowStart, s.WindowEnd, func(x loadgen.SeriesSample) float64 { return x.PrefixHits })
		queries += q
		hits += h
		counted++
	}
	switch {
	case counted == 0:
		s.note("no series sample at or before the window end: prefix hits n/a")
		return
	case math.IsNaN(queries) || math.IsNaN(hits):
		s.note("prefix-cache counters missing from some sample: prefix hits n/a")
		return
	}
	s.PrefixQueriesTokens, s.PrefixHitsTokens = queries, hits
	if queries == 0 {
		s.note("no prefix-cache queries in the window: prefix hits n/a")
	}
	s.PrefixHitsPct = pct(hits, queries)
}

// summarizeComputed fills ComputedPromptTokens and ComputedCachedPct of s.
func summarizeComputed(s *Summary, results []*loadgen.Result, replicas []replicaSeries) {
	s.ComputedPromptTokens, s.ComputedCachedPct = math.NaN(), math.NaN()
	computed, counted := 0.0, 0
	for _, rs := range replicas {
		d, ok := counterDelta(rs.samples, s.WindowStart, s.WindowEnd, func(x loadgen.SeriesSample) float64 { return x.PromptComputedTokens })
		if !ok {
			continue
		}
		computed += d
		counted++
	}
	if counted == 0 || math.IsNaN(computed) {
		return
	}
	var prompt int64
	for _, r := range results {
		// The engines count prompt tokens by source when a request emits its
		// first token (vLLM IterationStats; sim.Engine likewise), so P is
		// taken over the requests whose first token fell in the window, not
		// those done in it: the same requests as the counter's delta.
		if r.OK() && r.PromptTokens > 0 && r.FirstToken > 0 && contains(s.WindowStart, s.WindowEnd, r.FirstToken) {
			prompt += int64(r.PromptTokens)
		}
	}
	s.ComputedPromptTokens = computed
	s.ComputedCachedPct = pct(float64(prompt)-computed, float64(prompt))
}
