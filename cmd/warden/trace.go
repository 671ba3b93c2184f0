package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lmwarden/warden/internal/atomicfile"
	"github.com/lmwarden/warden/loadgen"
	"github.com/lmwarden/warden/loadgen/trace"
	"github.com/lmwarden/warden/report"
)

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Summarise, size a cache for and slice request traces; compare agent sessions with synthesized ones",
		Long: `Request traces in the Mooncake format (kvcache-ai/Mooncake FAST25-release/traces):
one JSON object per line with timestamp (ms), input_length, output_length and
hash_ids (one id per --block-size prompt tokens). agents reads Claude Code session
trees (kv-cache-tester format) instead. See docs/traces.md.

  warden trace stats FILE                      requests, mean input/output, cache ratio, conversations
  warden trace lru FILE --capacity 0.1M,1M,10M hit % of an LRU cache of each size (CSV + PNG)
  warden trace slice FILE --from 10m --to 20m --speedup 2 --sample 0.25 --out OUT
  warden trace agents DIR|FILE                 Claude Code sessions vs synthesized ones, figure by figure`,
	}
	cmd.AddCommand(newTraceStatsCmd(), newTraceLRUCmd(), newTraceSliceCmd(), newTraceAgentsCmd())
	return cmd
}

// openTrace opens a trace file for streaming; the caller closes the file.
func openTrace(path string, blockSize int) (*trace.Reader, *os.File, error) {
	if blockSize <= 0 {
		return nil, nil, fmt.Errorf("--block-size %d: want a positive number of tokens", blockSize)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("opening trace: %w", err)
	}
	return trace.NewReader(f, filepath.Base(path), blockSize), f, nil
}

func newTraceStatsCmd() *cobra.Command {
	var blockSize int
	cmd := &cobra.Command{
		Use:   "stats FILE",
		Short: "Print a trace's requests, mean input/output tokens, cache ratio and conversations",
		Long: `Prints the columns of the Mooncake paper's Table 2 (requests, average input and
output length, cache ratio) and the conversations reconstructed from block-id chains
(a request whose ids start with an earlier request's full blocks is its next turn).
The cache ratio is the reuse ceiling: the share of prompt tokens an unbounded prefix
cache shared by all replicas would serve, from the block ids alone.

Example:
  warden trace stats conversation_trace.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, f, err := openTrace(args[0], blockSize)
			if err != nil {
				return err
			}
			defer f.Close()
			s, err := trace.ReadStats(r)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "requests        %s over %v\n", report.Thousands(float64(s.Requests)), s.Duration.Round(time.Second))
			fmt.Fprintf(w, "mean input      %s tokens (%.1f; longest %s)\n", report.Thousands(s.MeanInput), s.MeanInput, report.Thousands(float64(s.MaxInput)))
			fmt.Fprintf(w, "mean output     %s tokens (%.1f)\n", report.Thousands(s.MeanOutput), s.MeanOutput)
			fmt.Fprintf(w, "cache ratio     %.1f %% of prompt tokens (unbounded shared prefix cache; %.1f %% of block ids seen before)\n", s.CacheRatioPct, s.BlockReusePct)
			fmt.Fprintf(w, "conversations   %s (%s requests continue one)\n", report.Thousands(float64(s.Conversations)), report.Thousands(float64(s.Requests-s.Conversations)))
			fmt.Fprintf(w, "turns/conv      %s\n", report.TurnsDistribution(s.TurnsPerConversation))
			return nil
		},
	}
	cmd.Flags().IntVar(&blockSize, "block-size", trace.DefaultBlockSize, "prompt tokens per hash id")
	return cmd
}

// parseTokenCounts reads a list such as "0.1M,1M,500k,2000000" (k = 1e3, M = 1e6,
// G = 1e9 tokens).
func parseTokenCounts(list []string) ([]int, error) {
	var out []int
	for _, s := range list {
		s = strings.TrimSpace(s)
		mult := 1.0
		switch {
		case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
			mult = 1e3
		case strings.HasSuffix(s, "M"):
			mult = 1e6
		case strings.HasSuffix(s, "G"):
			mult = 1e9
		}
		num := s
		if mult != 1 {
			num = s[:len(s)-1]
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || v*mult < 1 || math.IsInf(v, 0) || v*mult > 1e15 {
			return nil, fmt.Errorf("--capacity %q: want a positive token count such as 100000, 500k or 0.1M", s)
		}
		out = append(out, int(math.Round(v*mult)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--capacity: no capacities given")
	}
	return out, nil
}

func newTraceLRUCmd() *cobra.Command {
	var (
		blockSize int
		caps      []string
		out       string
	)
	cmd := &cobra.Command{
		Use:   "lru FILE",
		Short: "Hit % of one LRU prefix cache per capacity, fed the trace in order (CSV + PNG)",
		Long: `Feeds the trace in order to an LRU cache of block ids per capacity and prints the
share of prompt tokens served from cache (whole leading blocks, vLLM's rule), with
the unbounded cache's ceiling. Writes OUT.csv (capacity_tokens,hit_pct; the
ceiling as capacity "unbounded") and OUT.png. Unlike bench, study and plan, --out
is a file prefix, not a directory: --out results/trace-lru writes
results/trace-lru.csv and results/trace-lru.png.

Example:
  warden trace lru conversation_trace.jsonl --capacity 0.1M,1M,3M,10M --out results/trace-lru`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			capacities, err := parseTokenCounts(caps)
			if err != nil {
				return err
			}
			r, f, err := openTrace(args[0], blockSize)
			if err != nil {
				return err
			}
			defer f.Close()
			pts, err := trace.LRUCurve(r, append(slices.Clone(capacities), math.MaxInt))
			if err != nil {
				return err
			}
			ceiling := pts[len(pts)-1].HitPct
			pts = pts[:len(pts)-1]
			var csv bytes.Buffer
			csv.WriteString("capacity_tokens,hit_pct\n")
			figPts := make([]report.TraceCurvePoint, len(pts))
			for i, p := range pts {
				fmt.Fprintf(&csv, "%d,%.3f\n", p.CapacityTokens, p.HitPct)
				fmt.Fprintf(cmd.OutOrStdout(), "%14s tokens  %6.2f %%\n", report.Thousands(float64(p.CapacityTokens)), p.HitPct)
				figPts[i] = report.TraceCurvePoint{CapacityTokens: float64(p.CapacityTokens), HitPct: p.HitPct}
			}
			fmt.Fprintf(&csv, "unbounded,%.3f\n", ceiling)
			fmt.Fprintf(cmd.OutOrStdout(), "%14s         %6.2f %%\n", "unbounded", ceiling)
			png, err := report.TraceCurveFigure("Prefix hits of one LRU cache: "+filepath.Base(args[0]), figPts, ceiling)
			if err != nil {
				return fmt.Errorf("drawing %s.png: %w", out, err)
			}
			if err := atomicfile.Write(out+".csv", csv.Bytes()); err != nil {
				return err
			}
			if err := atomicfile.Write(out+".png", png); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.csv and %s.png\n", out, out)
			return nil
		},
	}
	cmd.Flags().IntVar(&blockSize, "block-size", trace.DefaultBlockSize, "prompt tokens per hash id")
	cmd.Flags().StringSliceVar(&caps, "capacity", []string{"0.1M", "1M", "3M", "10M"}, "cache capacities in tokens (k, M, G suffixes)")
	cmd.Flags().StringVar(&out, "out", "trace-lru", "output file prefix, not a directory: writes OUT.csv and OUT.png")
	return cmd
}

func newTraceSliceCmd() *cobra.Command {
	var (
		blockSize      int
		from, to, outP string
		o              trace.SliceOptions
	)
	cmd := &cobra.Command{
		Use:   "slice FILE --out OUT",
		Short: "Write part of a trace: a time window, sped up, a sample of its conversations",
		Long: `Keeps the requests recorded in [--from, --to), shifts the window to start at 0,
divides timestamps by --speedup, and keeps a --sample fraction of conversations (all
their turns or none, chosen by --seed; conversations are reconstructed over the whole
trace). Writes OUT in the same format, or nothing if the input has an error.

Example:
  warden trace slice conversation_trace.jsonl --from 10m --to 20m --sample 0.25 --out slice.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if outP == "" {
				return fmt.Errorf("--out: required (the sliced trace's path)")
			}
			var err error
			if from != "" {
				if o.From, err = time.ParseDuration(from); err != nil {
					return fmt.Errorf("--from %q: want a duration such as 10m", from)
				}
			}
			if to != "" {
				if o.To, err = time.ParseDuration(to); err != nil {
					return fmt.Errorf("--to %q: want a duration such as 20m", to)
				}
			}
			r, f, err := openTrace(args[0], blockSize)
			if err != nil {
				return err
			}
			defer f.Close()
			var buf bytes.Buffer
			read, written, err := trace.Slice(r, trace.NewWriter(&buf), o)
			if err != nil {
				return fmt.Errorf("slicing: %w", err)
			}
			if written == 0 {
				return fmt.Errorf("slicing %s: no request of %d kept (window %v..%v, sample %g): nothing written", args[0], read, o.From, o.To, o.Sample)
			}
			if err := atomicfile.Write(outP, buf.Bytes()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kept %s of %s requests: wrote %s\n", report.Thousands(float64(written)), report.Thousands(float64(read)), outP)
			return nil
		},
	}
	cmd.Flags().IntVar(&blockSize, "block-size", trace.DefaultBlockSize, "prompt tokens per hash id")
	cmd.Flags().StringVar(&from, "from", "", "window start, recorded time (e.g. 10m; default the start)")
	cmd.Flags().StringVar(&to, "to", "", "window end, recorded time, exclusive (default the end)")
	cmd.Flags().Float64Var(&o.Speedup, "speedup", 1, "divide timestamps by this factor")
	cmd.Flags().Float64Var(&o.Sample, "sample", 1, "fraction of conversations to keep, in (0, 1]")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "seed of the conversation sample")
	cmd.Flags().StringVar(&outP, "out", "", "output trace path (required)")
	return cmd
}

// traceFlags are bench's trace replay flags; they build or override the
// scenario's trace: section.
type traceFlags struct {
	file, mode, from, to string
	speedup, sample      float64
	window               time.Duration
	blockSize            int
	keys                 bool
	sessionHeader        string
	// Agent sessions (format claude-code).
	format, overLength string
	maxGap, recycle    time.Duration
	tokenScale         float64
	live               int
}

func (t *traceFlags) register(f *pflag.FlagSet) {
	f.StringVar(&t.file, "trace", "", "replay this trace instead of synthetic sessions: a Mooncake JSON Lines file, or Claude Code sessions (a directory of kv-cache-tester *.json, or one file) (docs/traces.md)")
	f.StringVar(&t.format, "trace-format", "", "trace format: mooncake or claude-code (default: detected from --trace)")
	f.DurationVar(&t.maxGap, "max-gap", 0, "agent replay: cap every replayed gap (tool runs, human pauses) at this, e.g. 60s (default: none)")
	f.Float64Var(&t.tokenScale, "token-scale", 0, "agent replay: scale every prompt and output by this factor, whole 64-token blocks kept shared (64 x it must be whole: 0.25 -> 16-token blocks; default 1)")
	f.IntVar(&t.live, "live", 0, "agent replay: session trees live at once, a closed loop over trees (default 8)")
	f.DurationVar(&t.recycle, "recycle", 0, "agent replay: start sessions over for this long, each play with its own cache-bust (default: play each session once)")
	f.StringVar(&t.overLength, "over-length", "", "agent replay: calls over the servers' max_model_len: skip (default; the recorded server time stands in) or send")
	f.StringVar(&t.mode, "trace-mode", "", "trace replay mode: timestamp (open loop at the recorded times; default) or session (next turn at the previous turn's end + the recorded gap)")
	f.Float64Var(&t.speedup, "speedup", 0, "trace replay: divide the recorded times by this factor (default 1)")
	f.StringVar(&t.from, "from", "", "trace replay: start of the recorded window, e.g. 10m")
	f.StringVar(&t.to, "to", "", "trace replay: end of the recorded window (exclusive), e.g. 20m")
	f.Float64Var(&t.sample, "sample", 0, "trace replay: fraction of conversations kept, in (0, 1] (default 1)")
	f.DurationVar(&t.window, "trace-window", 0, "trace replay: report window (one results stage; default 5m)")
	f.IntVar(&t.blockSize, "block-size", 0, "trace replay: prompt tokens per hash id (default 512)")
	f.BoolVar(&t.keys, "trace-keys", false, "trace replay, timestamp mode: send a session key per reconstructed conversation (session mode always does)")
	f.StringVar(&t.sessionHeader, "session-header", "", "session key style: "+strings.Join(loadgen.SessionHeaders, ", ")+" (none: no session key; the router places the turns keyless)")
}

// agentFlagsNote names the flags a scenario of shape agent takes.
func agentFlagsNote(sc *loadgen.Scenario) string {
	if sc.Shape == loadgen.ShapeAgent {
		return "; shape agent takes --token-scale and --max-gap"
	}
	return ""
}

// apply writes the flags given into sc.Trace (created by --trace), or the
// replay flags of shape agent into sc.Agent.
func (t *traceFlags) apply(cmd *cobra.Command, sc *loadgen.Scenario) error {
	ch := cmd.Flags().Changed
	if t.file != "" {
		spec := loadgen.TraceSpec{}
		if sc.Trace != nil {
			spec = *sc.Trace
		}
		spec.File, spec.Path = t.file, t.file
		spec.Format = t.format
		if spec.Format == "" {
			f, err := loadgen.DetectFormat(t.file)
			if err != nil {
				return fmt.Errorf("--trace: %w", err)
			}
			spec.Format = f
		}
		sc.Trace = &spec
		sc.Shape, sc.Agent = "", nil
		// The trace replaces the scenario's sessions: name the run after it.
		sc.Name = "trace-" + strings.TrimSuffix(filepath.Base(t.file), filepath.Ext(t.file))
	}
	if ch("session-header") {
		sc.SessionHeader = t.sessionHeader
	}
	traceOnly := []string{"trace-mode", "speedup", "from", "to", "sample", "trace-window", "block-size", "trace-keys",
		"trace-format", "max-gap", "token-scale", "live", "recycle", "over-length"}
	if sc.Trace == nil && sc.Shape == loadgen.ShapeAgent {
		// Synthesized sessions scale and cap their gaps as a replay does.
		a := loadgen.AgentShape{}
		if sc.Agent != nil {
			a = *sc.Agent
		}
		if ch("token-scale") {
			a.TokenScale = t.tokenScale
		}
		if ch("max-gap") {
			a.MaxGap = t.maxGap
		}
		sc.Agent = &a
		traceOnly = slices.DeleteFunc(traceOnly, func(n string) bool { return n == "token-scale" || n == "max-gap" })
	}
	if sc.Trace == nil {
		for _, n := range traceOnly {
			if ch(n) {
				return fmt.Errorf("--%s: only with a trace replay (--trace FILE, or trace: in the scenario)%s", n, agentFlagsNote(sc))
			}
		}
		return nil
	}
	s := sc.Trace
	var err error
	if ch("trace-mode") {
		s.Mode = t.mode
	}
	if ch("speedup") {
		s.Speedup = t.speedup
	}
	if ch("from") {
		if s.From, err = time.ParseDuration(t.from); err != nil {
			return fmt.Errorf("--from %q: want a duration such as 10m", t.from)
		}
	}
	if ch("to") {
		if s.To, err = time.ParseDuration(t.to); err != nil {
			return fmt.Errorf("--to %q: want a duration such as 20m", t.to)
		}
	}
	if ch("sample") {
		s.Sample = t.sample
	}
	if ch("trace-window") {
		s.Window = t.window
	}
	if ch("block-size") {
		s.BlockSize = t.blockSize
	}
	if ch("trace-keys") {
		s.Keys = t.keys
	}
	if ch("trace-format") {
		s.Format = t.format
	}
	if ch("max-gap") {
		s.MaxGap = t.maxGap
	}
	if ch("token-scale") {
		s.TokenScale = t.tokenScale
	}
	if ch("live") {
		s.Live = t.live
	}
	if ch("recycle") {
		s.Recycle, s.Duration = t.recycle > 0, t.recycle
	}
	if ch("over-length") {
		s.OverLength = t.overLength
	}
	return nil
}
