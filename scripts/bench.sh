#!/usr/bin/env bash
# Throughput of jetfleet against raw JetStream, same embedded server, one run.
# Usage: scripts/bench.sh [-n 100000] [-agents 2] [-concurrency 64]
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./scripts/bench "$@"
