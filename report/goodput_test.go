package report

import (
	"math"
	"testing"
	"time"

	"github.com/lmwarden/warden/loadgen"
)

func TestGoodput(t *testing.T) {
	slo := &loadgen.SLO{TTFB: 2 * time.Second, TPOT: 50 * time.Millisecond}
	// A turn sent at 10 s: first token after ttfb, then n tokens over decode.
	turn := func(ttfb, decode time.Duration, n int, err string) loadgen.Result {
		r := loadgen.Result{Variant: "on", Sent: 10 * time.Second, Status: 200, Err: err, OutputTokens: n}
		r.FirstToken = r.Sent + ttfb
		r.LastToken = r.FirstToken + decode
		r.Done = r.LastToken
		return r
	}
	results := []loadgen.Result{
		turn(time.Second, 99*40*time.Millisecond, 100, ""),        // good: TPOT 40 ms
		turn(3*time.Second, 99*40*time.Millisecond, 100, ""),      // TTFB over
		turn(time.Second, 99*60*time.Millisecond, 100, ""),        // TPOT 60 ms over
		turn(time.Second, 0, 1, ""),                               // one token: no TPOT, good
		turn(time.Second, 99*40*time.Millisecond, 100, "timeout"), // failed
		turn(2*time.Second, 99*50*time.Millisecond, 100, ""),      // both at the limit: good
	}
	for i, want := range []bool{true, false, false, true, false, true} {
		if got := MeetsSLO(&results[i], slo); got != want {
			t.Errorf("turn %d: meets %v, want %v", i, got, want)
		}
	}
	side := turn(time.Second, 0, 1, "")
	side.Side = true // not a turn
	results = append(results, side)
	ptrs := make([]*loadgen.Result, len(results))
	for i := range results {
		ptrs[i] = &results[i]
	}
	s := Summary{WindowStart: 0, WindowEnd: time.Minute}
	summarizeGoodput(&s, ptrs, &loadgen.Scenario{SLO: slo})
	if s.GoodTurns != 3 || s.GoodputPct != 50 || s.GoodputPerMin != 3 {
		t.Errorf("good %d, goodput %.1f %%, %.1f/min; want 3, 50 %%, 3/min", s.GoodTurns, s.GoodputPct, s.GoodputPerMin)
	}
	s = Summary{WindowStart: 0, WindowEnd: time.Minute}
	summarizeGoodput(&s, ptrs, &loadgen.Scenario{})
	if !math.IsNaN(s.GoodputPct) || !math.IsNaN(s.GoodputPerMin) {
		t.Errorf("without an slo: %v %v, want NaN", s.GoodputPct, s.GoodputPerMin)
	}
}
