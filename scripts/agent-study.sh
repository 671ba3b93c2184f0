#!/usr/bin/env bash
# Agent-session routing comparison (docs/routing.md, "Agent sessions"): the 69
# Claude Code traces replayed in virtual time, and synthesized sessions
# (scenarios/agent-sessions.yaml, shape: agent; once at the traces' fan-out and
# once at fan_out 0.1, a spawn every tenth parent call, ~20x the traces'), on
# two fleets, affinity off and on, subagent rule keep / split / follow,
# admission off / fit, seeds 1-3 (FLEET_SYNTH_SEEDS="1" runs the 7 x 5090
# synthesized workloads on seed 1 only: each run takes minutes there).
# Run names: [synth_|fanout_]FLEET-VARIANT-sSEED.
# Usage: scripts/agent-study.sh [OUT_DIR] [WARDEN_BINARY]
#   OUT_DIR default results/agents-raw (full run directories, not committed);
#   results/agents/ keeps each run's manifest.json, results.csv, summary.md and
#   trees.csv, written by scripts/agent-study-keep.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/agents-raw}
bin=${2:-}
if [ -z "$bin" ]; then go build -o bin/warden ./cmd/warden; bin=bin/warden; fi
traces=../shared/fixtures/traces/claude-code
[ -d "$traces" ] || { echo "agent-study: $traces not found (the public traces are read in place)" >&2; exit 1; }
mkdir -p "$out"
# Fleets: name, token scale (maps the traces' 200k window inside max_model_len),
# extra flags. Reference: 4 x A4000, max_model_len 32,768 -> 0.125 (25k).
# 7 x RTX 5090, 27B bf16 KV, max_model_len 131,072 -> 0.5 (100k).
fleets=("ref|0.125|" "f7x5090|0.5|--profile rtx5090-27b --sim-replicas 7")
common=(--virtual)
run() { # name, flags...
	local name=$1; shift
	if [ -f "$out/$name/manifest.json" ]; then return; fi
	"$bin" bench "${common[@]}" --out "$out/$name" --run-id "$name" "$@" > "$out/$name.log" 2>&1 ||
		{ echo "agent-study: $name failed (exit $?), see $out/$name.log" >&2; return 1; }
	echo "agent-study: $name done"
}
# Synthesized sessions: 24 live trees for 30 minutes, the fleet's token scale.
mkdir -p "$out/scenarios"
synth() { # name, token scale, extra agent: lines
	sed -e 's/^stages: .*/stages: [24]/' -e 's/^stage_duration: .*/stage_duration: 30m/' \
		-e "s/^  token_scale: .*/  token_scale: $2/" -e "s/^agent:\$/agent:$3/" \
		scenarios/agent-sessions.yaml > "$out/scenarios/$1.yaml"
}
jobs=()
for f in "${fleets[@]}"; do
	IFS='|' read -r fleet scale extra <<< "$f"
	synth "synth-$fleet" "$scale" ""
	synth "fanout-$fleet" "$scale" '\n  fan_out: 0.1'
	for wl in trace synth fanout; do
		src="--trace $traces --max-gap 60s --live 24 --token-scale $scale" pre=""
		if [ "$wl" != trace ]; then src="--scenario $out/scenarios/$wl-$fleet.yaml" pre="${wl}_"; fi
		seeds="1 2 3"
		if [ "$wl" != trace ] && [ "$fleet" != ref ]; then seeds=${FLEET_SYNTH_SEEDS:-1 2 3}; fi
		for seed in $seeds; do
			# shellcheck disable=SC2086
			jobs+=("$pre$fleet-off-s$seed $src --seed $seed --variants off $extra")
			for rule in keep split follow; do
				for adm in off fit; do
					jobs+=("$pre$fleet-$rule-adm$adm-s$seed $src --seed $seed --variants on --subagents $rule --admission $adm $extra")
				done
			done
		done
	done
done
# Two at a time (two cores).
pids=()
for j in "${jobs[@]}"; do
	# shellcheck disable=SC2086
	run $j &
	pids+=($!)
	if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
