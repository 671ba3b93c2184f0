// Package loadgen is the pure core of LM Warden's benchmark harness: scenarios, a
// seeded synthetic workload of Claude Code-style sessions, the closed-loop
// controller, the per-turn Result, the Manifest and the results directory
// (manifest.json, turns.jsonl, series.csv). It links no net/http (internal/layout's
// test checks): the streaming clients for the OpenAI chat and Anthropic Messages
// APIs, the /metrics scraper and the HTTP runner are loadgen/loadgenhttp.
//
// It does not route (package router), simulate engines (package sim) or summarise
// results (package report reads what this package writes). It imports neither
// router nor sim.
//
// # Two worlds, one controller interface
//
// The same workload and closed loop run in the HTTP world (Run: goroutines, real
// streaming clients, a scaled wall clock) and in the virtual-time world
// (internal/run/virtual: one discrete-event loop, no goroutines, no HTTP). So the
// decisions live in pure types with no clock and no I/O:
//
//   - Workload / Session: deterministic content. Session i's text depends only on
//     (Scenario.Seed, i); every turn re-sends the whole history, so turn n+1's
//     messages are turn n's plus its reply plus one new user message.
//   - Controller (NewController): which sessions run, which turn is sent next and
//     when, and the per-window accounting; one of Loop (the closed loop of
//     synthetic sessions), TraceLoop (a Mooncake trace replay) or AgentLoop (agent
//     session trees). Callers pass the simulated instant of each event.
//
// loadgenhttp.Run is a thin driver around a Controller; internal/run/virtual calls
// the same methods. Neither world asks which controller it has.
//
// A scenario decodes through Scenario's yaml tags; a token count or think time
// decodes to the range of its draws and ParseScenario splits it into nominal and
// spread.
//
// # What the closed loop measures (coordinated omission, docs/bench.md failure case 6)
//
// A closed loop keeps a fixed number of sessions; each sends its next turn only when
// the previous one ended (plus Scenario.ThinkTime). When the server slows down the
// loop slows down with it: fewer requests are offered, so queueing that an open
// arrival process (users who do not wait for each other) would meet is never
// measured. TTFB here is therefore "time to first token for a request sent by one
// of N sessions that each wait for their previous answer", not the latency an
// open-loop load of the same throughput would see. Each Result records both the
// instant the loop intended to send the turn (Intended: previous turn's end + think
// time, or the stage start for sessions added by the ramp) and the instant it was
// actually written (Sent), so harness lag (Sent - Intended) is visible and latency
// is measured from Sent. The rate of work the loop achieved (turns, sessions and
// output tokens per minute) is reported next to latency for that reason.
//
// # Time stamps and the first token
//
// All instants are simulated time (simclock) since the run's clock origin. Sent is
// when the request was written; Headers when the response headers arrived (a
// streaming server sends them before prefill, so they are not TTFB); FirstEvent the
// first SSE event of any kind; FirstToken the first event carrying non-empty
// content, reasoning or tool-call text (never the role-only first chunk:
// docs/bench.md, failure case 1); LastToken the last such event; Done the end of the stream, an error or
// cancellation. TTFB = FirstToken - Sent. An event's instant is when its last bytes
// were read from the response body (the return of the Read that delivered them),
// taken before the event is split out and decoded, so parsing costs do not delay
// it; events that arrived in one Read share its instant (so FirstToken may equal
// FirstEvent when the role-only chunk and the first content came together).
// After the terminator the client reads the response to its end (at most 4 KiB,
// 100 ms) so that net/http keeps the connection for the session's next turn. Token counts come from the server's
// usage; usage-only, finish-only and [DONE] events carry no tokens (failure case 2). An
// error event inside an HTTP 200 stream, a stream cut before its terminator
// ([DONE] / message_stop), a non-200 status and a timeout are failed turns (failure
// case 3).
//
// # Stage attribution
//
// Stages form a continuous ramp: at a boundary running sessions carry over and new
// ones are added to reach the next level; when a stage has fewer sessions than the
// one before, ending sessions are not replaced until the count falls to its level.
// A turn belongs to the stage whose window [Start, End) contains its Done instant;
// a session counts as completed in the stage where its last turn is done; turns
// done during a stage's Warmup are excluded from its figures by the report. The
// manifest's per-stage accounting (StageWindow.CarriedIn, Started, Completed,
// Failed, InFlight) follows the same rule and must satisfy CarriedIn + Started ==
// Completed + Failed + InFlight, with CarriedIn(k+1) == InFlight(k)
// (Manifest.Check; docs/bench.md, failure case 5); Started counts only the turns sent in the
// window, so it sums over the stages to the turns sent.
//
// A failed turn ends its session (the conversation cannot continue without the
// reply it lacks); a new session replaces it after max(ThinkTime, FailureBackoff).
// Turns still in flight when a variant ends are canceled, counted InFlight in the
// last window, and not written to turns.jsonl.
//
// # Series
//
// The HTTP runner scrapes every replica's /metrics once at the variant's start, then
// once within every simulated second at an instant jittered uniformly in it
// (PollSchedule, the same instants as the virtual world's polls, so replicas busy
// cannot alias with a periodic load), and writes one SeriesSample per replica per
// scrape. A required series that is missing fails the
// run at the first scrape and is written as NaN afterwards, never as 0 (failure
// case 4).
package loadgen
