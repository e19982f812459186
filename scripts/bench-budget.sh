#!/usr/bin/env bash
# Retry-budget benchmarks (internal/budget), each on its own embedded nats-server:
#  - contention: claims/s of a naive Get+Update compare-and-set loop and of
#    internal/budget, 64 concurrent claimers on one job whose budget does not run
#    out, measured in the same run, and their ratio;
#  - storm: 10,000 simultaneous failures against a budget of 50 (time, KV
#    writes, exactly 50 grants), then 10,000 more on the exhausted job.
#
# Usage: scripts/bench-budget.sh [extra go test flags]
# BUDGET_BENCH_DURATION (default 3s) is the length of each contention run.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUDGET_BENCH_DURATION="${BUDGET_BENCH_DURATION:-3s}"
exec go test -run '^$' -bench '^BenchmarkBudget' -benchtime=1x -count=1 "$@" ./internal/budget/
