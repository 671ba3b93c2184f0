// Package loadgenhttp is the HTTP shell of the benchmark harness around the pure
// core in package loadgen: Run drives loadgen.Loop over real streaming clients
// (OpenAIClient for /v1/chat/completions, AnthropicClient for /v1/messages, both on
// go-sse with the first-token rules in loadgen's doc), scrapes every replica's
// /metrics through internal/scrape (Scraper) and writes the results directory.
// `warden bench` (internal/bench) calls Run; the virtual-time world
// (internal/virtual) calls the same loadgen types without this package.
package loadgenhttp
