#!/usr/bin/env bash
# Byte-identity check for refactors (docs/DESIGN-NOTES.md): runs the virtual-time
# regression set and prints one sha256 line per output file. Run it on the commit
# before and after a change and diff the two listings:
#   scripts/identity.sh > /tmp/before.txt; ...; scripts/identity.sh > /tmp/after.txt
#   diff /tmp/before.txt /tmp/after.txt
# Usage: scripts/identity.sh [WARDEN_BINARY]   (default: builds bin/warden)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then go build -o bin/warden ./cmd/warden; bin=bin/warden; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # name, flags...
	local name=$1; shift
	"$bin" bench --virtual --run-id identity --out "$out/$name" "$@" >/dev/null 2>&1 ||
		{ echo "$name: warden bench failed (exit $?)" >&2; exit 1; }
	for f in results.csv turns.jsonl series.csv turns_by_index.csv; do
		echo "$(sha256sum < "$out/$name/$f" | cut -c1-16)  $name/$f"
	done
}
run reference
run reference-admission --admission fit
run fleet-bf16 --scenario scenarios/fleet-7x5090.yaml --profile rtx5090-27b --sim-replicas 7
run fleet-fp8 --scenario scenarios/fleet-7x5090.yaml --profile rtx5090-27b-fp8kv --sim-replicas 7
run fleet-fp8-sticky --scenario scenarios/fleet-7x5090.yaml --profile rtx5090-27b-fp8kv --sim-replicas 7 --policy sticky
run gap-coldmove --scenario scenarios/reference-gap-16.yaml --policy cold-move
run smoke-side-hash --scenario scenarios/smoke-side.yaml --policy session-hash
