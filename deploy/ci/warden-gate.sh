#!/usr/bin/env bash
# A regression gate on a live server: a short `warden bench` against it, then
# `warden compare --junit` against a committed baseline of the same benchmark
# (docs/operations.md, "The CI gate").
#
#   WARDEN_SERVER_URL=http://vllm-host:8000 deploy/ci/warden-gate.sh           # gate
#   WARDEN_SERVER_URL=http://vllm-host:8000 deploy/ci/warden-gate.sh baseline  # (re)make the baseline, then commit it
#
# WARDEN_SERVER_URL  the vLLM (or SGLang, llama.cpp) server's base URL (required)
# WARDEN_BASELINE    committed baseline results directory (default results/baseline/live-gate)
# WARDEN_OUT         this run's results directory (default results/ci-live); the JUnit file is $WARDEN_OUT/junit.xml
# WARDEN             the warden binary (default bin/warden: make build)
# Exit: 0 gates passed, 4 a gate crossed, other: the bench or the compare failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${WARDEN_SERVER_URL:?set WARDEN_SERVER_URL to the base URL of the server, e.g. http://vllm-host:8000}"
WARDEN=${WARDEN:-bin/warden}
BASELINE=${WARDEN_BASELINE:-results/baseline/live-gate}
OUT=${WARDEN_OUT:-results/ci-live}

if [ "${1:-}" = baseline ]; then
	rm -rf "$BASELINE"
	"$WARDEN" bench --replicas "$WARDEN_SERVER_URL" --scenario scenarios/smoke.yaml --stage-duration 2m --out "$BASELINE" --run-id live-gate-baseline
	echo "baseline written to $BASELINE: commit it"
	exit 0
fi
if [ ! -f "$BASELINE/manifest.json" ]; then
	echo "no baseline at $BASELINE: run '$0 baseline' against a known-good server and commit it" >&2
	exit 1
fi

rm -rf "$OUT"
"$WARDEN" bench --replicas "$WARDEN_SERVER_URL" --scenario scenarios/smoke.yaml --stage-duration 2m --out "$OUT"
"$WARDEN" compare "$BASELINE" "$OUT" --fail-on output_tokens_per_min:-5% --fail-on ttfb_p95_s:+20% --fail-on on/prefix_hits_pct:-5 --junit "$OUT/junit.xml"
