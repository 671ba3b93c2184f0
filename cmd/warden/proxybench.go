package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/lmwarden/warden/internal/run/proxybench"
)

// newProxyBenchCmd is the hidden dev tool behind `make proxy-bench`.
func newProxyBenchCmd() *cobra.Command {
	var o proxybench.Options
	cmd := &cobra.Command{
		Use:    "proxybench",
		Short:  "Dev tool: warden's proxy path side by side with nginx and HAProxy (make proxy-bench)",
		Hidden: true,
		Long: `Starts a paced SSE stub upstream on several loopback ports, warden route, nginx and
HAProxy (each its own process, keyed on X-Session-ID, keep-alive upstreams, no
buffering; a peer not installed is skipped), drives paced streams at each
--level direct and through each proxy in interleaved rounds, and writes
results.csv and summary.md (added TTFB p50/p90/p99 over direct, CPU seconds
per 1,000 streams per proxy process, the load) into --out. docs/router.md,
"Side by side with nginx and HAProxy" (section 10).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return proxybench.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", "", "results directory (required)")
	f.IntSliceVar(&o.Levels, "level", []int{32, 256}, "concurrent streams per phase, repeatable")
	f.IntVar(&o.Rounds, "rounds", 5, "interleaved rounds")
	f.IntVar(&o.PerSlot, "per-slot", 4, "measured streams per slot and phase (after one unmeasured)")
	f.IntVar(&o.Events, "events", 64, "SSE events per stream")
	f.DurationVar(&o.Interval, "interval", 20*time.Millisecond, "time between two events")
	f.IntVar(&o.Replicas, "replicas", 4, "stub upstream ports")
	f.StringSliceVar(&o.Peers, "peer", []string{proxybench.Warden, proxybench.Nginx, proxybench.HAProxy}, "proxies to measure: warden, nginx, haproxy")
	f.StringVar(&o.Profile, "profile", "", "directory for warden's cpu.pprof and allocs.pprof (runs warden under profile-route)")
	f.StringVar(&o.Baseline, "baseline", "", "another warden binary to run as a further target (warden-base), for before/after side by side")
	cmd.MarkFlagRequired("out")
	cmd.AddCommand(newProfileRouteCmd())
	return cmd
}

// newProfileRouteCmd runs `warden route ARGS` with a CPU profile and, at exit,
// an allocation profile written into --dir.
func newProfileRouteCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "profile-route --dir DIR -- route [route flags]",
		Short:  "Run warden route under pprof (CPU and allocations)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			cf, err := os.Create(filepath.Join(dir, "cpu.pprof"))
			if err != nil {
				return err
			}
			defer cf.Close()
			if err := pprof.StartCPUProfile(cf); err != nil {
				return err
			}
			root := newRootCmd()
			root.SetArgs(args)
			runErr := root.ExecuteContext(cmd.Context())
			pprof.StopCPUProfile()
			runtime.GC()
			af, err := os.Create(filepath.Join(dir, "allocs.pprof"))
			if err != nil {
				return err
			}
			defer af.Close()
			if err := pprof.Lookup("allocs").WriteTo(af, 0); err != nil {
				return fmt.Errorf("writing the allocation profile: %w", err)
			}
			return runErr
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for cpu.pprof and allocs.pprof")
	cmd.MarkFlagRequired("dir")
	return cmd
}
