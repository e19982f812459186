#!/usr/bin/env bash
# The dashboard's page latency on a large fleet: 10,000 job records and
# 100,000 dead letters on an embedded server; p50/p99 of every page and of
# the API calls behind them. See docs/ui.md.
# Usage: scripts/bench-ui.sh [-jobs 10000] [-dlq 100000] [-n 200]
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./scripts/benchui "$@"
