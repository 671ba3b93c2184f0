// Package agent holds coding-agent sessions as trees: a parent agent's calls
// in order, and the subagents it spawned between two of them, each with calls
// of its own. It reads the Claude Code traces of the kv-cache-tester set
// (callanjfox/kv-cache-tester, traces/; one JSON object per session: Read) and
// turns a tree into the steps a replay sends (Plan): every call with the calls
// it waits for and the recorded gap after each. It is pure: no net/http, no
// clock, no goroutines. The replay itself is loadgen's AgentLoop.
package agent
