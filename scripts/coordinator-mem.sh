#!/usr/bin/env bash
# Peak memory of a coordinator expanding and publishing a large input.
#
# Builds nats-server (from the version go.mod pins), the coordinator and
# fleetctl; starts the server and a coordinator as separate processes;
# submits a job whose input file (N items, uploaded to the object store by
# fleetctl) the coordinator streams; waits until every item is published;
# prints the coordinator's peak RSS (VmHWM). No agents run, so the whole
# input is expanded and published while the coordinator is measured.
#
# Usage: scripts/coordinator-mem.sh [N]   (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
work=$(mktemp -d)
cleanup() { kill "${coord_pid:-}" "${srv_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "building binaries"
go build -o "$work/nats-server" github.com/nats-io/nats-server/v2
go build -o "$work/coordinator" ./cmd/coordinator
go build -o "$work/fleetctl" ./cmd/fleetctl
go run ./scripts/genitems -n "$N" -o "$work/items.json"
ls -l "$work/items.json" | awk '{printf "input: %.1f MB\n", $5/1e6}'

port=$((20000 + RANDOM % 20000))
"$work/nats-server" -js -a 127.0.0.1 -p "$port" -sd "$work/js" >"$work/server.log" 2>&1 &
srv_pid=$!
export NATS_URL="nats://127.0.0.1:$port"
for _ in $(seq 50); do "$work/fleetctl" list >/dev/null 2>&1 && break; sleep 0.1; done
# --job-queue -1: with no agents, the default fair share (1000 of a job's
# messages in the work stream) would stop the publishing at 1000 items.
"$work/coordinator" --log-level warn --max-ack-pending 1000 --job-queue -1 >"$work/coord.log" 2>&1 &
coord_pid=$!
for _ in $(seq 100); do "$work/fleetctl" list >/dev/null 2>&1 && break; sleep 0.1; done

cat >"$work/job.yaml" <<YAML
id: mem-$N
input: items.json
json_path: "\$.items[*]"
group_by: "\${item.region}"
agent_template:
  - handler: noop
YAML
start=$(date +%s.%N)
"$work/fleetctl" submit "$work/job.yaml"
while :; do
  pub=$( { "$work/fleetctl" status "mem-$N" --json 2>/dev/null || true; } | sed -n 's/^  "published": \([0-9]*\).*/\1/p')
  [ "${pub:-0}" -ge "$N" ] && break || true
  kill -0 "$coord_pid" || { echo "coordinator died"; cat "$work/coord.log"; exit 1; }
  sleep 0.5
done
end=$(date +%s.%N)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$coord_pid/status")
printf "published %d items in %.1fs\n" "$N" "$(echo "$end - $start" | bc)"
printf "coordinator peak RSS (VmHWM): %.1f MB (target < 200 MB)\n" "$(echo "$hwm / 1024" | bc -l)"
