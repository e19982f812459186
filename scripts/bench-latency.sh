#!/usr/bin/env bash
# Latency of a one-item job as a user sees it: `fleetctl submit --wait`.
#
# Builds nats-server (the version go.mod pins), the coordinator, the agent
# and fleetctl; starts the server, one coordinator and one agent as
# separate processes with their default flags; then submits -jobs one-item
# no-op jobs one after the other, each with `fleetctl submit --wait --json`,
# and prints for each percentile:
#
#   wall  the fleetctl process, from its start to its exit (what a script
#         calling it waits), timed here;
#   job   the job's own submitted_at to finished_at, from the status
#         fleetctl printed (the coordinator's clock).
#
# The first -warmup jobs are run and not counted (the page cache, the
# server's first stream writes).
#
# Usage: scripts/bench-latency.sh [-jobs 40] [-warmup 3]
source "$(dirname "$0")/bench-lib.sh"

JOBS=40
WARMUP=3
while [ $# -gt 0 ]; do
  case "$1" in
    -jobs) JOBS=$2; shift 2 ;;
    -warmup) WARMUP=$2; shift 2 ;;
    *) echo "usage: $0 [-jobs N] [-warmup N]" >&2; exit 2 ;;
  esac
done

bench_build
bench_up 1 bench-latency

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); nats-server $ver; $JOBS jobs after $WARMUP"
: >"$work/wall"
: >"$work/job"
for i in $(seq $((JOBS + WARMUP))); do
  printf 'id: lat-%d-%d\nitems: [{"id": "a"}]\nagent_template:\n  - handler: noop\n' "$i" "$$" >"$work/job-$i.yaml"
  t0=$(date +%s%N)
  "$work/bin/fleetctl" submit "$work/job-$i.yaml" --wait --json >"$work/out-$i.json" 2>/dev/null
  t1=$(date +%s%N)
  [ "$i" -le "$WARMUP" ] && continue
  echo $(((t1 - t0) / 1000)) >>"$work/wall"
  jq -r '
    def ts: capture("(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z") | ((.s + "Z") | fromdateiso8601) + (("0." + (.f // "0")) | tonumber);
    ((.finished_at | ts) - (.submitted_at | ts)) * 1e6 | round' "$work/out-$i.json" >>"$work/job"
done
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int((NR-1)*p/100)+1; printf "%.1f", a[i]/1000}'; }
for f in wall job; do
  printf "%-4s p50 %6s ms   p90 %6s ms   min %6s ms   max %6s ms\n" "$f" "$(pct "$work/$f" 50)" "$(pct "$work/$f" 90)" "$(pct "$work/$f" 0)" "$(pct "$work/$f" 100)"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
