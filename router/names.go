package router

import (
	"strconv"
	"strings"
)

// rankSep joins an upstream's name and a DP rank in a replica name.
const rankSep = "/rank"

// ReplicaName is the default name of the upstream at position i (0-based) of a
// model's replica list: "r<i>", e.g. "r0". The router, the virtual world and the
// benchmark's scrapers all name replicas with it and RankName, so turns.jsonl,
// series.csv, /metrics labels and the card agree.
func ReplicaName(i int) string { return "r" + strconv.Itoa(i) }

// RankName is the name of DP rank k (0-based) behind the upstream named base:
// "<base>/rank<k>", e.g. "r0/rank1".
func RankName(base string, k int) string { return base + rankSep + strconv.Itoa(k) }

// UpstreamNames returns the replica names of the upstream at position i of a
// model's list: named name ("" means ReplicaName(i)), with dpRanks DP ranks
// behind its URL (0: one replica, not pinned). One name, or dpRanks RankNames.
func UpstreamNames(name string, i, dpRanks int) []string {
	if name == "" {
		name = ReplicaName(i)
	}
	if dpRanks <= 0 {
		return []string{name}
	}
	out := make([]string, dpRanks)
	for k := range out {
		out[k] = RankName(name, k)
	}
	return out
}

// RankBase returns the upstream name of a replica named by RankName, and
// whether it was one ("r0/rank1" -> "r0", true; "r0" -> "r0", false).
func RankBase(replica string) (string, bool) {
	i := strings.LastIndex(replica, rankSep)
	if i < 0 {
		return replica, false
	}
	if _, err := strconv.Atoi(replica[i+len(rankSep):]); err != nil {
		return replica, false
	}
	return replica[:i], true
}

// Subagent rules: where a Claude Code subagent's calls (X-Claude-Code-Agent-Id
// beside the parent's session id) are placed. Keep: under the parent's key, so
// on the parent's replica; split: a key of their own, placed as a new
// conversation; follow: a key of their own, the first call on the parent's
// replica while it is under the overflow threshold (Facts.ParentKey).
const (
	SubagentsKeep   = "keep"
	SubagentsSplit  = "split"
	SubagentsFollow = "follow"
)

// SubagentRules lists the subagent rules, default first.
var SubagentRules = []string{SubagentsKeep, SubagentsSplit, SubagentsFollow}
