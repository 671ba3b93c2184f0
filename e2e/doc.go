// Package e2e holds cross-process integration tests of the router: the simulated
// vLLM cluster (sim/simhttp) and the router (router.New) over loopback HTTP, looked
// at by headless Chromium (the status card, card_test.go) and driven by the real
// Claude Code CLI (claudecode_test.go; subagent_test.go, with stub replicas whose model
// makes the CLI launch a subagent). It has no non-test code.
//
// Each test skips, saying why, when its outside tool is missing: Chromium
// (/usr/bin/chromium, or WARDEN_CHROMIUM=path) and npm (the CLI is installed
// with npm into a cache directory, WARDEN_E2E_CACHE or ~/.cache/warden-e2e, and
// reused on later runs; WARDEN_CLAUDE=path uses an installed CLI instead).
// WARDEN_SCREENSHOT_DIR, when set, receives the card's screenshot.
//
// Nothing here leaves loopback: the simulator, the router and the test's own
// clients listen on 127.0.0.1; Chromium runs with background networking off and
// Claude Code with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 and its base URL
// pointed at the router.
package e2e
