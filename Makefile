# LM Warden: `make bench` runs the reference benchmark (embedded simulated cluster by
# default), `make test` runs every test. See README.md.

GO       ?= go
BIN      := bin/warden
# Benchmark knobs (all optional):
#   SCENARIO  scenario file (default: the reference workload)
#   REPLICAS  comma-separated vLLM base URLs: benchmark real servers instead of the simulator
#   DP_RANKS  with one URL in REPLICAS: number of DP ranks behind it (X-data-parallel-rank)
#   ROUTER    URL of an already running warden router (its admin API switches affinity)
#   SPEED     simulated seconds per wall second for the embedded simulator
#   VIRTUAL   1 = deterministic virtual-time run (no HTTP; seconds of wall time)
#   OUT       results directory (default results/<run-id>)
#   ARGS      any further `warden bench` flags
SCENARIO ?=
REPLICAS ?=
DP_RANKS ?=
ROUTER   ?=
SPEED    ?=
VIRTUAL  ?=
OUT      ?=
ARGS     ?=

BENCH_FLAGS := $(if $(SCENARIO),--scenario $(SCENARIO)) \
	$(if $(REPLICAS),--replicas $(REPLICAS)) \
	$(if $(DP_RANKS),--dp-ranks $(DP_RANKS)) \
	$(if $(ROUTER),--router $(ROUTER)) \
	$(if $(SPEED),--speed $(SPEED)) \
	$(if $(filter 1 true yes,$(VIRTUAL)),--virtual) \
	$(if $(OUT),--out $(OUT)) $(ARGS)

.PHONY: all build bench test unit race smoke regression baseline vet fmt-check clean agreement-off proxy-bench

all: build

build:
	$(GO) build -o $(BIN) ./cmd/warden

bench: build
	./$(BIN) bench $(BENCH_FLAGS)

# Everything CI runs: formatting, vet, unit + integration tests, and a short
# end-to-end bench over real HTTP whose CSV is checked.
test: fmt-check vet unit race smoke regression

# Not in `make test` (about 4 minutes of wall time): the "off" variant's
# HTTP/virtual agreement over 12-minute stages (docs/simulator.md, "Agreement").
agreement-off:
	WARDEN_AGREEMENT_OFF=1 $(GO) test -count=1 -timeout 20m -run TestVirtualAgreesWithHTTPOffLongStages -v ./internal/run/bench/

# Not in `make test` (about 5 minutes): warden's proxy path side by side with
# nginx and HAProxy (docs/router.md, "Side by side with nginx and HAProxy"); PROXY_OUT is
# the results directory, PROXY_ARGS further `warden proxybench` flags.
PROXY_OUT  ?= results/bench/proxy-$(shell date -u +%Y%m%dT%H%M%SZ)
PROXY_ARGS ?=
proxy-bench: build
	./$(BIN) proxybench --out $(PROXY_OUT) $(PROXY_ARGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# -parallel 4 and -p 4 (the default of both is the core count): internal/run/bench's
# tests (t.Parallel) and e2e's mostly wait on wall time (HTTP worlds on loopback),
# so CPU-bound packages (sim's trace check) run beside them, not after them.
unit:
	$(GO) test -count=1 -p 4 -parallel 4 -timeout 10m ./...

# The race detector over the concurrent packages: the router and its shared
# state, the HTTP runner, the simulator's server, the benches over HTTP, and
# e2e's shared-state tests (two routers, one redis-server).
RACE_PKGS := ./router/... ./loadgen/loadgenhttp ./sim/simhttp ./internal/run/bench
RACE_E2E  := TestResponseContinuationAcrossRouters|TestTwoRoutersShareAdmission|TestSharedStateCardShowsWhatPoliciesDecideOn|TestSharedAdmission|TestTwoRoutersSharedState
race:
	$(GO) test -race -count=1 -p 4 -parallel 4 -timeout 15m $(RACE_PKGS)
	$(GO) test -race -count=1 -timeout 10m -run '^($(RACE_E2E))' ./e2e

smoke: build
	rm -rf results/ci-smoke
	./$(BIN) bench --scenario scenarios/smoke.yaml --out results/ci-smoke --speed 20
	./$(BIN) report results/ci-smoke --check

# Regression gate: rerun the deterministic virtual-time reference benchmark and
# compare it with the committed baseline; fails when output tokens/min drop more
# than 5% or TTFB p95 rises more than 20% at any stage.
BASELINE := results/baseline/virtual-reference
GATES    := --fail-on output_tokens_per_min:-5% --fail-on ttfb_p95_s:+20%
regression: build
	rm -rf results/ci-virtual
	./$(BIN) bench --virtual --out results/ci-virtual > /dev/null
	./$(BIN) compare $(BASELINE) results/ci-virtual $(GATES)

# Refresh the baseline after an intended change (commit the result).
baseline: build
	rm -rf $(BASELINE)
	./$(BIN) bench --virtual --out $(BASELINE) --run-id baseline

clean:
	rm -rf bin results/ci-smoke
