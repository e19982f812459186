#!/usr/bin/env bash
# What each thing a jetfleet work message needs costs the JetStream server:
# builds nats-server (the version go.mod pins) and scripts/servercost,
# starts one server and runs every variant (plain, a header, a
# Nats-Msg-Id, a jetfleet-sized body, a filtered consumer, fetches of 256,
# all together) for -rounds alternating rounds of N messages; prints the
# server's CPU seconds per 100,000 messages for each (docs/benchmarks.md).
#
# Usage: scripts/bench-server-cost.sh [-n 100000] [-rounds 3]
set -euo pipefail
cd "$(dirname "$0")/.."

N=100000
ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N=$2; shift 2 ;;
    -rounds) ROUNDS=$2; shift 2 ;;
    *) echo "usage: $0 [-n N] [-rounds R]" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
srv_pid=""
cleanup() {
  [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

ver=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
GOBIN="$work/bin" go install "github.com/nats-io/nats-server/v2@$ver"
go build -o "$work/bin/servercost" ./scripts/servercost

port=$((20000 + RANDOM % 20000))
"$work/bin/nats-server" -js -sd "$work/js" -a 127.0.0.1 -p "$port" -m "$((port + 1))" >"$work/server.log" 2>&1 &
srv_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((port + 1))/healthz" >/dev/null && break; sleep 0.1; done

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); nats-server $ver; N = $N"
"$work/bin/servercost" -server "nats://127.0.0.1:$port" -server-pid "$srv_pid" -n "$N" -rounds "$ROUNDS"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
