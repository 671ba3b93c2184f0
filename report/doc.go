// Package report turns a results directory into tables and figures. It only reads
// what the harness wrote (manifest.json, turns.jsonl, series.csv; see
// docs/DESIGN-NOTES.md) and never runs, scrapes or simulates anything.
//
// It owns: reading a results directory (Load), stage summaries (Summarize, Summary),
// off -> on deltas with a noise verdict (NewDelta, Delta), the output files
// (Generate, ResultsCSV, TurnsByIndexCSV, ResultsJSON, SummaryMarkdown, WritePlots),
// the one axis format of every figure, run and study alike (PlainTicks, LogTicks,
// TickLabel in axes.go; internal/study draws with them),
// the breakdown of each stage by turn index (Summary.ByTurn, TurnStats), the terminal
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
// # Columns (brief/workload.md, "Columns the report must have")
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
// harness's accounting (started = completed + failed + in flight, peers.md case 14).
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
// results.json, with a note saying why. It is never printed as 0 (peers.md case 13).
//
// # Noise
//
// No bootstrap: the window is cut into round(W / 1 min) sub-windows, out tok/min and
// the TTFB quantiles are computed in each, and their standard error is
// sd / sqrt(n). The 95 % interval of a difference is 1.96 * sqrt(se_a^2 + se_b^2);
// a difference whose interval contains 0 is "within noise" (marked * in tables).
//
// # Files written by Generate
//
//	results.csv, turns_by_index.csv, results.json, summary.md
//	ttfb.png, output_tokens.png, sessions_per_h.png, replicas_busy.png,
//	prefix_hits.png, ttfb_cdf.png, replica_requests.png, replica_hits.png,
//	prompt_tokens_<variant>.png (one per variant with series samples)
//
// All are written atomically (temporary file in the same directory + rename).
// Affinity off is drawn vermillion and on blue in every figure (Okabe-Ito palette).
package report
