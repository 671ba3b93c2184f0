// Package report turns a results directory into tables and figures. It only reads
// what the harness wrote (manifest.json, turns.jsonl, series.csv; see
// docs/DESIGN-NOTES.md) and never runs, scrapes or simulates anything.
//
// It owns: reading a results directory (Load), stage summaries (Summarize, Summary),
// off -> on deltas with a noise verdict (NewDelta, Delta), the output files
// (Generate, ResultsCSV, TurnsByIndexCSV, ResultsJSON, SummaryMarkdown, WritePlots),
// the one axis format of every figure, run and study alike (PlainTicks, LogTicks,
// TickLabel in axes.go; internal/run/study draws with them),
// the breakdown of each stage by turn index (Summary.ByTurn, TurnStats), the
// whole-run figures of agent-session replays (SummarizeAgents, TreesCSV), the terminal
// table (WriteTable) and run-to-run comparison with regression gates (Compare,
// ParseGate). It does not own the record types (loadgen.Result, Manifest,
// SeriesSample), the vLLM metric names or counter-reset rule (internal/vllmmetrics),
// nor the CLI (cmd/warden maps Compare's ErrThresholdExceeded to a non-zero exit).
//
// # Stage rule
//
// Every figure of a stage is computed over its measured window [Start+Warmup, End)
// in simulated time. A turn belongs to the window containing its Done instant; a
// session is completed in the window containing the Done instant of its last turn,
// if that turn was OK (status 200, no error).
//
// # Columns (the reference measurement's, docs/measurements.md, and more)
//
//	sessions_per_h         completed sessions * 3600 / window seconds
//	output_tokens_per_min  sum(OutputTokens of OK turns) * 60 / window seconds
//	ttfb_p50_s, ttfb_p95_s client-side TTFB (Result.TTFB: Sent -> first token) of OK
//	                       turns, HDR histogram in microseconds, 3 significant digits
//	                       (hdrhistogram-go ValueAtQuantile: nearest rank)
//	replicas_busy          per replica, share of its polls in the window with
//	                       vllm:num_requests_running > 0, summed over replicas
//	                       (= mean busy count per poll instant when polls align)
//	prefix_hits_pct        100 * delta(vllm:prefix_cache_hits_total) /
//	                       delta(vllm:prefix_cache_queries_total), summed over replicas,
//	                       from the last sample at or before the window start (else
//	                       the replica's first sample) to the last at or before its
//	                       end, reset-aware per consecutive pair (vllmmetrics.CounterDelta)
//	stayed_pct             later turns (Turn > 0, OK) served by the replica of the
//	                       session's turn 0 (Result.Replica, from X-Warden-Replica)
//	usage_cached_pct       100 * sum(CachedTokens) / sum(PromptTokens) over OK turns
//	                       that reported cached tokens (per-request usage)
//
// plus turns OK/failed, mean server-counted and nominal prompt tokens, and the
// harness's accounting (started = completed + failed + in flight; docs/bench.md,
// failure case 5).
//
// # By turn index
//
// Each stage's turns (the same ones: Done in the window, side requests left out)
// are also broken down by turn index, 0-based within the session, since every turn
// re-sends the whole history: per index, turns OK/failed, TTFB mean/p50/p95 of OK
// turns (same histogram as ttfb_p50_s), mean prompt and cached tokens and
// usage_cached_pct (TurnStats; turns_by_index.csv, summary.md, results.json
// "by_turn" in each summary).
//
// A value that cannot be computed (no samples, no OK turn, a missing series, a zero
// denominator) is NaN: "n/a" in tables, an empty cell in results.csv, null in
// results.json, with a note saying why. It is never printed as 0 (docs/bench.md,
// failure case 4).
//
// # Noise
//
// No bootstrap: the window is cut into round(W / 1 min) sub-windows, out tok/min and
// the TTFB quantiles are computed in each, and their standard error is
// sd / sqrt(n). The 95 % interval of a difference is 1.96 * sqrt(se_a^2 + se_b^2);
// a difference whose interval contains 0 is "within noise" (marked * in tables).
//
// # Agent sessions (whole run)
//
// An agent-session replay (manifest agent_traces; docs/traces.md, "Agent
// sessions") replays session trees: a parent agent and its subagents, each
// call a line of turns.jsonl placed by trace.agent (tree, file, agent, call,
// round). Its stages are report windows of the replay, not concurrency
// levels: the per-stage tables name a stage by its window in minutes since
// its variant's start ("window (min)") with the trees whose play started in
// it ("trees started"; the manifest's sessions), pair the variants' windows
// by index, and give no concurrency target (concurrency_pct n/a, no note).
// Before them, one table over each variant's whole run W (its first window's
// start to its last window's end, the stop), cells "off -> on"
// (SummarizeAgents, AgentSummary); one value per run, no noise estimate:
//
//	sessions done          trees every call of which ended: none failed before its
//	                       agent's last call (last_turn), and, when the variant did not
//	                       end every play (agent_traces plays_ended < plays), the
//	                       parent and every subagent seen have their last call in
//	                       turns.jsonl (turns.jsonl does not list a tree's calls; a
//	                       last call skipped over max_model_len or a background
//	                       subagent not started at the stop can fool this rule, and
//	                       a note says when its count differs from the manifest's)
//	sessions cut           the other trees with a call in turns.jsonl
//	session time p50, p95  over the complete trees: max(Done) - min(Sent) of the
//	                       tree's calls, background subagents included, seconds;
//	                       nearest rank (rank round(q n / 100), at least 1, as
//	                       hdrhistogram-go's ValueAtQuantile), exact
//	calls per session p50  calls in turns.jsonl per complete tree, nearest rank
//	out tok/min            sum(OutputTokens of OK calls) * 60 / |W| s
//	calls done, parent and subagent  calls in turns.jsonl (OK or failed) with
//	                       trace.agent.agent "" and not ""
//	TTFB p50, p95, parent and subagent  as ttfb_p50_s over OK calls of each kind
//	usage cached %, parent and subagent  100 * sum(CachedTokens) / sum(PromptTokens)
//	                       over OK calls of each kind reporting cached tokens: the
//	                       responses' usage, since the engines' counters do not say
//	                       which request a hit belongs to
//	prefix hits % (counters)  prefix_hits_pct over W (all requests)
//	stayed %               OK calls after an agent conversation's first (the parent,
//	                       or one subagent: trace.agent.call > 0) served by the
//	                       replica of that conversation's call 0
//	live trees (mean)      sum over trees of |[min(Sent), max(Done)) within W|, to
//	                       the stop for a tree cut there, / |W|
//	live calls (mean)      sum over calls of |[Sent, Done) within W| plus the
//	                       windows' unrecorded_in_flight_ns, / |W|
//	calls skipped over max_model_len, calls not sent  agent_traces
//	                       skipped_over_length, not_sent
//	calls failed           calls in turns.jsonl not OK
//	calls in flight at the stop  agent_traces sent less the calls in turns.jsonl
//
// trees.csv has one row per tree (TreesCSVColumns), session_time_cdf.png the
// CDF of the complete trees' session time per variant.
//
// # Files written by Generate
//
//	results.csv, turns_by_index.csv, results.json, summary.md
//	ttfb.png, output_tokens.png, sessions_per_h.png, replicas_busy.png,
//	prefix_hits.png, ttfb_cdf.png, replica_requests.png, replica_hits.png,
//	prompt_tokens_<variant>.png (one per variant with series samples)
//	trees.csv, session_time_cdf.png (agent-session replays only)
//
// prefix_hits.png and replica_hits.png come from the engines' prefix-cache
// counters, or, for engines without them (llama.cpp), from the responses'
// usage (prefix_hits.png else the computed-prompt counter); a run with none
// of these leaves them out, and summary.md says which source each used or
// why it is missing (hitsource.go), so no figure is empty axes.
//
// sessions_per_h.png draws each stage's exact Poisson 95 % interval of its
// completed-sessions count as error bars (Summary.SessionsPerHInterval), and
// summary.md's line under it says so: a short window completes few sessions.
//
// All are written atomically (temporary file in the same directory + rename).
// Affinity off is drawn vermillion and on blue in every figure (Okabe-Ito palette).
package report
