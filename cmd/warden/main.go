// Command warden is LM Warden's single binary; main only wires flags to package
// functions. Its commands, the whole cobra tree (TestPackageDocListsCommands
// checks this list against it, hidden commands marked):
//
//	warden route                     the session-affinity router in front of vLLM replicas
//	warden sim                       a simulated vLLM cluster on loopback
//	warden bench                     the closed-loop Claude Code-style benchmark, affinity off vs on
//	warden report                    results.csv, summary.md and PNG figures from a results directory
//	warden compare                   two runs stage by stage; non-zero exit when a threshold is crossed
//	warden study                     routing policies in virtual time over several seeds
//	warden plan                      how many agent sessions a fleet serves under an SLO, per policy
//	warden trace                     request traces and agent sessions (the four below)
//	warden trace stats               a trace's requests, token means, cache ratio and conversations
//	warden trace lru                 hit % of one LRU prefix cache per capacity
//	warden trace slice               part of a trace: a time window, sped up, a sample
//	warden trace agents              Claude Code session traces beside synthesized agent sessions
//	warden version                   the version
//	warden proxybench                (hidden) the proxy beside nginx and HAProxy (make proxy-bench)
//	warden proxybench profile-route  (hidden) warden route under pprof
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes of every command; exitCodesHelp lists them in each --help.
const (
	ExitOK    = 0 // success
	ExitError = 1 // bad flags, arguments or input, or the command could not go on
	// ExitAccounting: bench and report --check wrote the results but they are
	// not usable (a stage without a successful turn, turn accounting that does
	// not add up, an interrupted variant).
	ExitAccounting = 3
	ExitGate       = 4   // compare: a --fail-on gate was crossed
	ExitNoPlan     = 5   // plan: no point meets the SLO for any policy
	ExitInterrupt  = 130 // a second Ctrl-C (128 + SIGINT)
)

// exitCodesHelp is the footer of every command's --help.
const exitCodesHelp = `

Exit codes:
  0    success
  1    error: bad flags, arguments or input, or the run could not go on (bench:
       50 failed turns in a row; the stages it completed are still written)
  3    results written but not usable (bench, report --check): a stage without a
       successful turn, turn accounting that does not add up, an interrupted variant
  4    a --fail-on gate crossed (compare)
  5    no point meets the SLO for any policy (plan; nothing written)
  130  a second Ctrl-C (the first one stops, draining and writing what is complete)`

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signalContext()
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "warden:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(ExitError)
	}
}

// signalContext is cancelled by the first SIGINT or SIGTERM (commands drain and
// write what is complete); a second SIGINT (Ctrl-C) exits at once. SIGTERM never
// forces an exit: tools such as timeout(1) may deliver it twice, and the run must
// still keep what it completed.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		interrupts, cancelled := 0, false
		for sig := range ch {
			if sig == os.Interrupt {
				interrupts++
			}
			if interrupts >= 2 {
				os.Exit(ExitInterrupt)
			}
			if !cancelled {
				cancelled = true
				fmt.Fprintf(os.Stderr, "warden: %v: stopping; finishing what is under way (Ctrl-C again exits now)\n", sig)
				cancel()
			}
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "warden",
		Short: "Session-affinity routing for vLLM replicas, and the benchmark that measures it",
		Long: `LM Warden keeps each agent conversation on the vLLM replica that holds its prefix
cache, and measures with numbers what that routing does.

  warden sim      start a simulated vLLM cluster (OpenAI + Anthropic APIs, /metrics)
  warden route    run the session-affinity router in front of vLLM replicas
  warden bench    run the closed-loop Claude Code-style benchmark (affinity off vs on)
  warden report   make results.csv, summary.md and PNG figures from a results directory
  warden compare  compare two runs; non-zero exit when a threshold is crossed
  warden study    compare routing policies over seeds in virtual time (docs/routing.md)
  warden plan     how many sessions a fleet serves under an SLO, per policy (docs/planning.md)
  warden trace    summarise, size a cache for and slice request traces; compare agent
                  sessions with synthesized ones (docs/traces.md)
  warden version  print the version`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newSimCmd(), newRouteCmd(), newBenchCmd(), newReportCmd(), newCompareCmd(), newStudyCmd(), newPlanCmd(), newTraceCmd(), newProxyBenchCmd())
	for _, c := range append(root.Commands(), root) {
		if c.Long == "" {
			c.Long = c.Short
		}
		c.Long += exitCodesHelp
	}
	return root
}
