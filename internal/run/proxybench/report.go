package proxybench

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// runMeta is the run's context for the summary.
type runMeta struct {
	start, end             time.Time
	loadStart, loadEnd     string
	uptimeStart, uptimeEnd string
	skipped                []string
	targets                []*target
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// quantiles reported, in percent.
var quantiles = []float64{50, 90, 99}

// agg is one (level, target) over all rounds: pooled histograms, and the
// per-round added quantiles (target minus direct in the same round).
type agg struct {
	ttfb, hop       *hdrhistogram.Histogram
	streams, failed int
	cpu, sys        float64
	perRound        [][3]float64 // added TTFB p50/p90/p99 ms per round
	perRoundCPU     []float64    // CPU s per 1,000 streams per round (kept for inspection)
	added, hopAdded [3]float64   // pooled target minus pooled direct, ms
	lo, hi          [3]float64   // per-round added range, ms
	cpuPer1000      float64
	cpuLo, cpuHi    float64
	ttfbQ, hopQ     [3]float64 // pooled quantiles, ms
	measured        int64
}

func writeResults(o Options, meta runMeta, results []phaseResult) error {
	byKey := map[[2]string]*agg{}
	round := map[string]phaseResult{} // level/target/round -> phase
	key := func(level int, t string) [2]string { return [2]string{strconv.Itoa(level), t} }
	var names []string
	for _, t := range meta.targets {
		names = append(names, t.name)
	}
	for _, r := range results {
		k := key(r.level, r.target)
		a := byKey[k]
		if a == nil {
			a = &agg{ttfb: newHist(), hop: newHist()}
			byKey[k] = a
		}
		a.ttfb.Merge(r.ttfb)
		a.hop.Merge(r.hop)
		a.streams += r.streams
		a.failed += r.failed
		a.cpu += r.cpu
		a.sys += r.sys
		round[fmt.Sprintf("%d/%s/%d", r.level, r.target, r.round)] = r
	}
	q := func(h interface{ ValueAtQuantile(float64) int64 }, i int) float64 {
		return ms(h.ValueAtQuantile(quantiles[i]))
	}
	for _, level := range o.Levels {
		d := byKey[key(level, Direct)]
		for _, name := range names {
			a := byKey[key(level, name)]
			a.measured = a.ttfb.TotalCount()
			for i := range quantiles {
				a.ttfbQ[i], a.hopQ[i] = q(a.ttfb, i), q(a.hop, i)
				a.added[i] = a.ttfbQ[i] - q(d.ttfb, i)
				a.hopAdded[i] = a.hopQ[i] - q(d.hop, i)
				a.lo[i], a.hi[i] = math.Inf(1), math.Inf(-1)
			}
			a.cpuPer1000 = a.cpu / float64(a.streams) * 1000
			a.cpuLo, a.cpuHi = math.Inf(1), math.Inf(-1)
			for r := range o.Rounds {
				tr, dr := round[fmt.Sprintf("%d/%s/%d", level, name, r)], round[fmt.Sprintf("%d/%s/%d", level, Direct, r)]
				var add [3]float64
				for i := range quantiles {
					add[i] = q(tr.ttfb, i) - q(dr.ttfb, i)
					a.lo[i], a.hi[i] = min(a.lo[i], add[i]), max(a.hi[i], add[i])
				}
				a.perRound = append(a.perRound, add)
				c := tr.cpu / float64(tr.streams) * 1000
				a.perRoundCPU = append(a.perRoundCPU, c)
				a.cpuLo, a.cpuHi = min(a.cpuLo, c), max(a.cpuHi, c)
			}
		}
	}
	if err := writeCSV(filepath.Join(o.Out, "results.csv"), o, names, results, byKey, key); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(o.Out, "summary.md"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := writeSummary(w, o, meta, names, byKey, key); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeCSV(path string, o Options, names []string, results []phaseResult, byKey map[[2]string]*agg, key func(int, string) [2]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"level", "target", "round", "streams", "failed", "measured",
		"ttfb_p50_ms", "ttfb_p90_ms", "ttfb_p99_ms", "added_p50_ms", "added_p90_ms", "added_p99_ms",
		"hop_p50_ms", "hop_p90_ms", "hop_p99_ms", "cpu_s", "cpu_sys_s", "cpu_s_per_1000_streams", "wall_s", "load_start", "load_end"})
	f3 := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	direct := map[string]phaseResult{}
	for _, r := range results {
		if r.target == Direct {
			direct[fmt.Sprintf("%d/%d", r.level, r.round)] = r
		}
	}
	for _, r := range results {
		d := direct[fmt.Sprintf("%d/%d", r.level, r.round)]
		row := []string{strconv.Itoa(r.level), r.target, strconv.Itoa(r.round + 1), strconv.Itoa(r.streams),
			strconv.Itoa(r.failed), strconv.FormatInt(r.ttfb.TotalCount(), 10)}
		for _, qq := range quantiles {
			row = append(row, f3(ms(r.ttfb.ValueAtQuantile(qq))))
		}
		for _, qq := range quantiles {
			row = append(row, f3(ms(r.ttfb.ValueAtQuantile(qq))-ms(d.ttfb.ValueAtQuantile(qq))))
		}
		for _, qq := range quantiles {
			row = append(row, f3(ms(r.hop.ValueAtQuantile(qq))))
		}
		row = append(row, f3(r.cpu), f3(r.sys), f3(r.cpu/float64(r.streams)*1000), f3(r.wall.Seconds()), r.loadStart, r.end)
		w.Write(row)
	}
	for _, level := range o.Levels {
		for _, name := range names {
			a := byKey[key(level, name)]
			row := []string{strconv.Itoa(level), name, "all", strconv.Itoa(a.streams), strconv.Itoa(a.failed), strconv.FormatInt(a.measured, 10)}
			for i := range quantiles {
				row = append(row, f3(a.ttfbQ[i]))
			}
			for i := range quantiles {
				row = append(row, f3(a.added[i]))
			}
			for i := range quantiles {
				row = append(row, f3(a.hopQ[i]))
			}
			row = append(row, f3(a.cpu), f3(a.sys), f3(a.cpuPer1000), "", "", "")
			w.Write(row)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeSummary(w io.Writer, o Options, meta runMeta, names []string, byKey map[[2]string]*agg, key func(int, string) [2]string) error {
	fmt.Fprintf(w, "# Proxy benchmark: warden vs nginx vs HAProxy\n\n")
	fmt.Fprintf(w, "Run %s to %s UTC (`warden proxybench`, docs/router.md \"Side by side with nginx and HAProxy\").\n\n",
		meta.start.Format("2006-01-02 15:04:05"), meta.end.Format("15:04:05"))
	fmt.Fprintf(w, "- Machine: %d cores (%s), shared with other jobs.\n", runtime.NumCPU(), cpuModel())
	fmt.Fprintf(w, "- Load at start: `%s`\n- Load at end: `%s`\n", meta.uptimeStart, meta.uptimeEnd)
	fmt.Fprintf(w, "- Stub: %d replicas (loopback ports), %d events %s apart per stream, headers flushed at once.\n",
		o.Replicas, o.Events, o.Interval)
	fmt.Fprintf(w, "- %d interleaved rounds; each round runs every level over every target (orders rotate by round); "+
		"a phase is C slots started evenly over one stream length, each 1 unmeasured + %d measured streams.\n",
		o.Rounds, o.PerSlot)
	fmt.Fprintf(w, "- Added TTFB: pooled quantile of the target minus pooled quantile of direct at the same level; "+
		"range: min..max over rounds of (target minus direct in the same round), round median: its median. Hop: TTFB minus the stub's own "+
		"wait before its first event. CPU: utime+stime of the proxy's processes over its phases.\n")
	for _, t := range meta.targets {
		fmt.Fprintf(w, "- %s: %s", t.name, t.version)
		if t.cmd != nil && o.Idle > 0 {
			fmt.Fprintf(w, "; idle CPU %.3f s per minute (up, no traffic, %s)", t.idlePerMin, o.Idle)
		}
		fmt.Fprintln(w)
	}
	for _, s := range meta.skipped {
		fmt.Fprintf(w, "- skipped %s\n", s)
	}
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	rng := func(lo, hi float64) string { return f2(lo) + ".." + f2(hi) }
	for _, level := range o.Levels {
		d := byKey[key(level, Direct)]
		fmt.Fprintf(w, "\n## %d concurrent streams\n\nDirect TTFB p50 / p90 / p99: %s / %s / %s ms; hop %s / %s / %s ms (%d samples).\n\n",
			level, f2(d.ttfbQ[0]), f2(d.ttfbQ[1]), f2(d.ttfbQ[2]), f2(d.hopQ[0]), f2(d.hopQ[1]), f2(d.hopQ[2]), d.measured)
		t := tablewriter.NewTable(w, tablewriter.WithRenderer(renderer.NewMarkdown()),
			tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAlignment(tw.AlignRight))
		t.Header("proxy", "added p50 ms", "p50 range", "added p90 ms", "p90 range", "added p99 ms", "p99 range",
			"round median p50 / p99 ms",
			"hop added p50 / p99 ms", "CPU s / 1000 streams", "CPU range", "of it system", "samples", "failed")
		for _, name := range names[1:] {
			a := byKey[key(level, name)]
			if err := t.Append([]string{name,
				f2(a.added[0]), rng(a.lo[0], a.hi[0]), f2(a.added[1]), rng(a.lo[1], a.hi[1]), f2(a.added[2]), rng(a.lo[2], a.hi[2]),
				f2(roundMedian(a.perRound, 0)) + " / " + f2(roundMedian(a.perRound, 2)),
				f2(a.hopQ[0]-d.hopQ[0]) + " / " + f2(a.hopQ[2]-d.hopQ[2]),
				strconv.FormatFloat(a.cpuPer1000, 'f', 3, 64), strconv.FormatFloat(a.cpuLo, 'f', 3, 64) + ".." + strconv.FormatFloat(a.cpuHi, 'f', 3, 64),
				strconv.FormatFloat(a.sys/float64(a.streams)*1000, 'f', 3, 64),
				strconv.FormatInt(a.measured, 10), strconv.Itoa(a.failed)}); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
		verdict(w, level, names, byKey, key)
	}
	return nil
}

// roundMedian is the median over rounds of the added quantile i (less swayed
// than the pooled figure by one round the machine's other load hit).
func roundMedian(per [][3]float64, i int) float64 {
	v := make([]float64, len(per))
	for k, r := range per {
		v[k] = r[i]
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// verdict compares warden with the better peer per quantile: warden's pooled
// added TTFB against the peer's pooled figure plus its noise (the width of its
// per-round range), and warden's CPU per 1,000 streams against nginx's.
func verdict(w io.Writer, level int, names []string, byKey map[[2]string]*agg, key func(int, string) [2]string) {
	wa := byKey[key(level, Warden)]
	if wa == nil {
		return
	}
	fmt.Fprintln(w)
	for i, qq := range quantiles {
		best, bestName := math.Inf(1), ""
		var noise float64
		for _, n := range []string{Nginx, HAProxy} {
			if a := byKey[key(level, n)]; a != nil && a.added[i] < best {
				best, bestName, noise = a.added[i], n, a.hi[i]-a.lo[i]
			}
		}
		if bestName == "" {
			continue
		}
		ok := "met"
		if wa.added[i] > best+noise {
			ok = "NOT met"
		}
		fmt.Fprintf(w, "- p%.0f: warden %+.2f ms vs %s %+.2f ms + noise %.2f = %.2f: %s\n", qq, wa.added[i], bestName, best, noise, best+noise, ok)
	}
	if a := byKey[key(level, Nginx)]; a != nil {
		ok := "met"
		if wa.cpuPer1000 > a.cpuPer1000 {
			ok = "NOT met"
		}
		fmt.Fprintf(w, "- CPU per 1,000 streams: warden %.3f s vs nginx %.3f s: %s\n", wa.cpuPer1000, a.cpuPer1000, ok)
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
