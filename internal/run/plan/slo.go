package plan

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmwarden/warden/loadgen"
)

// Defaults of an SLO given without some terms (and of --slo absent): a TTFB p95 of
// 10 s and nine turns in ten within 10 s. Ten seconds is the point where an
// interactive coding agent's user is left waiting on every turn (the reference
// measurement calls its 24- and 32-session stages, with waits of tens of
// seconds, deliberate overload: docs/measurements.md, "The reference
// measurement"); it is a default to be replaced, not a measured figure.
const (
	DefaultTTFBP95     = 10 * time.Second
	DefaultGoodput     = 0.9
	DefaultGoodputTTFB = 10 * time.Second
)

// SLO is what a point must meet. A zero duration or fraction means the term is
// not checked; Parse and Load fill the defaults.
type SLO struct {
	TTFBP50 time.Duration // TTFB p50 of OK turns at most this
	TTFBP95 time.Duration // TTFB p95 of OK turns at most this
	// Goodput is the least share of turns that must be good (Goodput below);
	// GoodputTTFB is the TTFB a good turn stays within (default: TTFBP95 when
	// given, else DefaultGoodputTTFB), used for the goodput reported at every
	// point even when Goodput is 0 (not checked).
	Goodput     float64
	GoodputTTFB time.Duration
}

// DefaultSLO is the SLO used without --slo.
func DefaultSLO() SLO {
	return SLO{TTFBP95: DefaultTTFBP95, Goodput: DefaultGoodput, GoodputTTFB: DefaultGoodputTTFB}
}

// sloKeys are the terms in the order they are checked and printed.
var sloKeys = []string{"ttfb_p50", "ttfb_p95", "goodput", "goodput_ttfb"}

// ParseSLO reads "ttfb_p95=10s,goodput=0.9" (terms: ttfb_p50, ttfb_p95 and
// goodput_ttfb as Go durations, goodput as a fraction in (0, 1]). Terms not
// given are off, except that an SLO with no TTFB term gets DefaultTTFBP95 and
// goodput_ttfb defaults as SLO says. Errors name the term and what was wrong.
func ParseSLO(s string) (SLO, error) {
	var o SLO
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return SLO{}, fmt.Errorf("slo %q: term %q: want key=value (keys %s)", s, part, strings.Join(sloKeys, ", "))
		}
		if seen[k] {
			return SLO{}, fmt.Errorf("slo %q: term %q given twice", s, k)
		}
		seen[k] = true
		if err := o.set(k, v); err != nil {
			return SLO{}, fmt.Errorf("slo %q: %w", s, err)
		}
	}
	if len(seen) == 0 {
		return SLO{}, fmt.Errorf("slo %q: no term (keys %s)", s, strings.Join(sloKeys, ", "))
	}
	return o.withDefaults(), nil
}

// LoadSLO reads an SLO file: YAML with the ParseSLO keys, e.g.
//
//	ttfb_p95: 10s
//	goodput: 0.9
//
// decoded strictly (an unknown key is an error naming it and its line).
func LoadSLO(path string) (SLO, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return SLO{}, fmt.Errorf("reading slo file: %w", err)
	}
	var raw struct {
		TTFBP50     string   `yaml:"ttfb_p50"`
		TTFBP95     string   `yaml:"ttfb_p95"`
		Goodput     *float64 `yaml:"goodput"`
		GoodputTTFB string   `yaml:"goodput_ttfb"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return SLO{}, fmt.Errorf("slo file %s: %w (keys %s)", path, err, strings.Join(sloKeys, ", "))
	}
	var o SLO
	for _, kv := range [][2]string{{"ttfb_p50", raw.TTFBP50}, {"ttfb_p95", raw.TTFBP95}, {"goodput_ttfb", raw.GoodputTTFB}} {
		if kv[1] != "" {
			if err := o.set(kv[0], kv[1]); err != nil {
				return SLO{}, fmt.Errorf("slo file %s: %w", path, err)
			}
		}
	}
	if raw.Goodput != nil {
		if err := o.set("goodput", strconv.FormatFloat(*raw.Goodput, 'g', -1, 64)); err != nil {
			return SLO{}, fmt.Errorf("slo file %s: %w", path, err)
		}
	}
	if o == (SLO{}) {
		return SLO{}, fmt.Errorf("slo file %s: no term (keys %s)", path, strings.Join(sloKeys, ", "))
	}
	return o.withDefaults(), nil
}

func (o *SLO) set(k, v string) error {
	switch k {
	case "ttfb_p50", "ttfb_p95", "goodput_ttfb":
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("term %s=%q: want a positive duration such as 10s", k, v)
		}
		switch k {
		case "ttfb_p50":
			o.TTFBP50 = d
		case "ttfb_p95":
			o.TTFBP95 = d
		default:
			o.GoodputTTFB = d
		}
	case "goodput":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Errorf("term goodput=%q: want a fraction in (0, 1], such as 0.9", v)
		}
		o.Goodput = f
	default:
		return fmt.Errorf("unknown term %q (keys %s)", k, strings.Join(sloKeys, ", "))
	}
	return nil
}

func (o SLO) withDefaults() SLO {
	if o.TTFBP50 == 0 && o.TTFBP95 == 0 && o.Goodput == 0 {
		o.TTFBP95 = DefaultTTFBP95
	}
	// goodput_ttfb is set even without a goodput term: goodput is reported at
	// every point.
	if o.GoodputTTFB == 0 {
		o.GoodputTTFB = DefaultGoodputTTFB
		if o.TTFBP95 > 0 {
			o.GoodputTTFB = o.TTFBP95
		}
	}
	return o
}

// String is the SLO in ParseSLO's syntax.
func (o SLO) String() string {
	var parts []string
	if o.TTFBP50 > 0 {
		parts = append(parts, "ttfb_p50="+o.TTFBP50.String())
	}
	if o.TTFBP95 > 0 {
		parts = append(parts, "ttfb_p95="+o.TTFBP95.String())
	}
	if o.Goodput > 0 {
		parts = append(parts, "goodput="+strconv.FormatFloat(o.Goodput, 'g', -1, 64), "goodput_ttfb="+o.GoodputTTFB.String())
	}
	return strings.Join(parts, ",")
}

// term is one checked SLO term: a metric of a point and its bound.
type term struct {
	Name      string                  // ttfb_p50, ttfb_p95, goodput
	Threshold float64                 // seconds, or a fraction for goodput
	AtLeast   bool                    // goodput: the metric must be >= the threshold
	metric    func(s *sample) float64 // the per-seed value
}

func (o SLO) terms() []term {
	var ts []term
	if o.TTFBP50 > 0 {
		ts = append(ts, term{Name: "ttfb_p50", Threshold: o.TTFBP50.Seconds(), metric: func(s *sample) float64 { return s.TTFBP50S }})
	}
	if o.TTFBP95 > 0 {
		ts = append(ts, term{Name: "ttfb_p95", Threshold: o.TTFBP95.Seconds(), metric: func(s *sample) float64 { return s.TTFBP95S }})
	}
	if o.Goodput > 0 {
		ts = append(ts, term{Name: "goodput", Threshold: o.Goodput, AtLeast: true, metric: func(s *sample) float64 { return s.Goodput }})
	}
	return ts
}

// Goodput is this package's one definition of goodput: the share of good turns
// among the turns of the measured window [start, end) (side requests excluded).
// A turn done in the window (results) is good when it finished OK
// (loadgen.Result.OK) with a TTFB (Result.TTFB: Sent to first token, a router
// hold included) of at most within; a failed or timed-out turn is not good. A
// turn cut off open at the end (cut: virtual.Config.OnCut) counts, as not good,
// when it had already missed: sent more than within before end without a first
// token, or its first token more than within after it was sent; other open
// turns are not counted. Without the cut turns, a router that holds
// conversations (admission) would hide its longest waits. NaN without turns.
func Goodput(results, cut []loadgen.Result, variant string, start, end, within time.Duration) float64 {
	var good, all int
	for i := range results {
		r := &results[i]
		if r.Side || r.Variant != variant || r.Done < start || r.Done >= end {
			continue
		}
		all++
		if r.OK() && r.FirstToken > 0 && r.TTFB() <= within {
			good++
		}
	}
	for i := range cut {
		r := &cut[i]
		if r.Side || r.Variant != variant || r.Sent >= end {
			continue
		}
		if (r.FirstToken == 0 && end-r.Sent > within) || (r.FirstToken > 0 && r.TTFB() > within) {
			all++
		}
	}
	if all == 0 {
		return math.NaN()
	}
	return float64(good) / float64(all)
}

// errNoTerm guards against an SLO with nothing to check.
var errNoTerm = errors.New("the SLO checks nothing")
