#!/usr/bin/env bash
# Regenerates the worked examples of docs/simulate.md with fleetctl
# simulate: the charts (docs/simulate/*.svg) and the outputs they come with
# (docs/simulate/*.txt, pasted into the page).
#
# Usage: scripts/simulate-docs.sh           write them
#        scripts/simulate-docs.sh --check   fail if they are out of date
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/simulate
if [[ "${1:-}" == "--check" ]]; then
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi
bin=$(mktemp -d)/fleetctl
go build -o "$bin" ./cmd/fleetctl

# The fleet and the outage of both examples: 50,000 uploads on 25 agents ×
# 20 (500 calls in flight, 200ms each: 2,500 calls/s), and a storage
# service that refuses every call, in 50ms, for 20s from 5s in.
common=(examples/nightly-upload.yaml --items 50000 --agents 25 --concurrency 20
	--step-duration 200ms --fail-duration 50ms --outage 20s --at 5s --bucket 200ms)

# 1. The job budget: none, 10% (the spec), and 10% with a circuit breaker.
"$bin" simulate "${common[@]}" --name '10% budget' \
	--compare 'name=no budget; retry_budget=250000' \
	--compare 'name=10% budget + breaker; circuit_breaker={failure_threshold: 20, timeout: 5s}' \
	--plot "$out/budget.svg" | sed '$d' >"$out/budget.txt"

# 2. Jitter, with max_parallel: 500 (the job never has more than its 500
#    in-flight items failing): none, full, equal.
"$bin" simulate "${common[@]}" --set 'max_parallel=500' --name 'no jitter' \
	--compare 'name=full jitter; jitter=full' \
	--compare 'name=equal jitter; jitter=equal' \
	--plot "$out/jitter.svg" | sed '$d' >"$out/jitter.txt"

if [[ "$out" != docs/simulate ]]; then
	diff -r docs/simulate "$out"
	echo "docs/simulate is up to date"
fi
