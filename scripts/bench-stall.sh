#!/usr/bin/env bash
# Fresh fleets' first jobs: does any of them stall?
#
# For each of -fleets fleets: starts a fresh nats-server (an empty store),
# a coordinator and -agents agents with --concurrency C (default flags
# otherwise), submits two N-item no-op jobs one after the other
# (`fleetctl submit --wait`, input file uploaded by fleetctl), prints each
# job's time, and stops the fleet. A newcomer's first jobs are exactly
# this case.
#
# A job is a straggler when it takes more than 3x the other job's time
# + 2 s; the last line says how many fleets had one ("stalled fleets: K of
# F"), and the script exits 1 when any had. Each fleet's line also counts
# the agents' failed pulls and the pull requests they gave up (they log at
# info). -idle S leaves each fleet idle for S seconds before its first job
# (agents waiting in pull requests); with -logs DIR each fleet's logs are
# kept in DIR/fleet-<f>/.
#
# Usage: scripts/bench-stall.sh [-fleets 20] [-n 30000] [-agents 2] [-concurrency 64] [-idle S] [-logs DIR]
source "$(dirname "$0")/bench-lib.sh"

FLEETS=20
N=30000
AGENTS=2
CONC=64
LOGS=""
IDLE=0
while [ $# -gt 0 ]; do
  case "$1" in
    -fleets) FLEETS=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -agents) AGENTS=$2; shift 2 ;;
    -concurrency) CONC=$2; shift 2 ;;
    -idle) IDLE=$2; shift 2 ;;
    -logs) LOGS=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    *) echo "usage: $0 [-fleets F] [-n N] [-agents A] [-concurrency C] [-idle S] [-logs DIR]" >&2; exit 2 ;;
  esac
done

bench_build
go run ./scripts/genitems -n "$N" -o "$work/items.json"

now() { date +%s.%N; }

# fleet_down stops every process bench_up started and empties the store,
# so that the next fleet starts as a newcomer's does.
fleet_down() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$work/js"
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $FLEETS fresh fleets x two $N-item no-op jobs; $AGENTS agents x --concurrency $CONC; nats-server $ver"
stalled=0
all=()
for f in $(seq "$FLEETS"); do
  bench_up "$AGENTS" stall-agent --concurrency "$CONC" --log-level info
  # bench_up waits 10 s at most; a loaded machine may need longer.
  for _ in $(seq 600); do "$work/bin/fleetctl" list >/dev/null 2>&1 && break; sleep 0.1; done
  sleep "$IDLE"
  times=()
  for j in 1 2; do
    cat >"$work/job-$j.yaml" <<YAML
id: stall-$f-$j-$$
input: items.json
json_path: "\$.items[*]"
agent_template:
  - handler: noop
YAML
    t0=$(now)
    "$work/bin/fleetctl" submit "$work/job-$j.yaml" --wait >"$work/submit-$j.log" 2>&1 || { cat "$work/submit-$j.log"; exit 1; }
    t1=$(now)
    times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  verdict=ok
  if [ "$(echo "${times[0]} > 3 * ${times[1]} + 2 || ${times[1]} > 3 * ${times[0]} + 2" | bc -l)" = 1 ]; then
    verdict=STALLED
    stalled=$((stalled + 1))
  fi
  failed=$(cat "$work"/agent-*.log | grep -c '"pull failed' || true)
  givenup=$(cat "$work"/agent-*.log | grep -c '"pull request' || true)
  printf "fleet %2d: job 1 %6.2f s   job 2 %6.2f s   %s   (agents' pulls failed: %d, given up: %d)\n" "$f" "${times[0]}" "${times[1]}" "$verdict" "$failed" "$givenup"
  all+=("${times[@]}")
  if [ -n "$LOGS" ]; then
    mkdir -p "$LOGS/fleet-$f"
    cp "$work"/*.log "$LOGS/fleet-$f/"
  fi
  fleet_down
done
max=$(printf '%s\n' "${all[@]}" | sort -g | tail -n 1)
printf "slowest job: %.2f s\n" "$max"
echo "stalled fleets: $stalled of $FLEETS"
[ "$stalled" = 0 ]
