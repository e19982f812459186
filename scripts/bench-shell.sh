#!/usr/bin/env bash
# Shell steps against the machine's ceiling for spawning processes.
#
# Starts nats-server, a coordinator and -agents agent daemons with
# --concurrency C each (default flags otherwise), then for each step
# (`true` and `sleep 0.05`) alternates, -runs times:
#
#   xargs     seq N | xargs -P (agents x C) -n 1 sh -c STEP _   (the ceiling:
#             the same number of processes at once, nothing else)
#   jetfleet  fleetctl submit --wait of an N-item job whose one step is
#             `shell: STEP` (inline items), timed end to end.
#
# and prints the medians, "shell STEP: jetfleet/xargs ratio: X.XX" and the
# overhead per item: how much longer than xargs a slot spends on each item
# (slots/rate, jetfleet's less xargs', in milliseconds). Each run also
# prints the CPU time per item (user+system, milliseconds): xargs' with its
# shells; the agents' with their steps' shells, and the nats-server's and
# the coordinator's; and the load average. On a machine whose cores the
# spawning fills, the ratio is about xargs' CPU per item over jetfleet's.
#
# Usage: scripts/bench-shell.sh [-n 600] [-runs 3] [-agents 2] [-concurrency 16]
source "$(dirname "$0")/bench-lib.sh"

N=600
RUNS=3
AGENTS=2
CONC=16
PPROF=
PPROF_SECONDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N=$2; shift 2 ;;
    -runs) RUNS=$2; shift 2 ;;
    -agents) AGENTS=$2; shift 2 ;;
    -concurrency) CONC=$2; shift 2 ;;
    -pprof) PPROF=$(mkdir -p "$2" && cd "$2" && pwd); export BENCH_PPROF=1; shift 2 ;;
    -pprof-seconds) PPROF_SECONDS=$2; shift 2 ;;
    *) echo "usage: $0 [-n N] [-runs R] [-agents A] [-concurrency C] [-pprof DIR [-pprof-seconds S]]" >&2; exit 2 ;;
  esac
done
SLOTS=$((AGENTS * CONC))

bench_build
bench_up "$AGENTS" shell-agent --concurrency "$CONC" --work-dir "$work"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }
# overhead XARGS JETFLEET: the milliseconds a slot spends per item beyond
# what xargs' slots spend, at these rates (items/s over SLOTS slots).
overhead() { echo "1000 * $SLOTS / $2 - 1000 * $SLOTS / $1" | bc -l; }
# ticks PID...: CPU clock ticks of the processes and their reaped children.
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15+$16+$17}' "/proc/$p/stat"))); done; echo "$t"; }
hz=$(getconf CLK_TCK)
perItem() { echo "1000 * $1 / $hz / $N" | bc -l; }
load() { cut -d' ' -f1 /proc/loadavg; }

echo "machine: $(nproc) CPUs; N = $N; $AGENTS agents x $CONC slots = xargs -P $SLOTS; nats-server $ver"
for step in "true" "sleep 0.05"; do
  xs=()
  fs=()
  for r in $(seq "$RUNS"); do
    t0=$(now)
    xcpu=$( { TIMEFORMAT='%U %S'; time (seq "$N" | xargs -P "$SLOTS" -n 1 sh -c "$step" _); } 2>&1 | awk '{printf "%.3f", 1000 * ($1 + $2) / '"$N"'}')
    t1=$(now)
    x=$(echo "$N / ($t1 - $t0)" | bc -l)
    xs+=("$x")

    job="$work/job-$r.json"
    jq -n --arg id "shell-$r-$RANDOM" --arg step "$step" --argjson n "$N" \
      '{id: $id, items: [range(0; $n) | {id: ("i" + tostring)}], agent_template: [{shell: $step}]}' >"$job"
    profs=()
    if [ -n "$PPROF" ]; then
      names=(server coordinator)
      for i in $(seq "$AGENTS"); do names+=("agent-$i"); done
      for i in "${!names[@]}"; do
        curl -sf -o "$PPROF/${step%% *}-$r-${names[$i]}.pprof" "http://127.0.0.1:$((pprof_port + i))/debug/pprof/profile?seconds=$PPROF_SECONDS" &
        profs+=("$!")
      done
    fi
    a0=$(ticks "${pids[@]:2}")
    s0=$(ticks "${pids[0]}" "${pids[1]}")
    t0=$(now)
    "$work/bin/fleetctl" submit "$job" --wait >"$work/submit-$r.log" 2>&1 || { cat "$work/submit-$r.log"; exit 1; }
    t1=$(now)
    acpu=$(perItem $(($(ticks "${pids[@]:2}") - a0)))
    scpu=$(perItem $(($(ticks "${pids[0]}" "${pids[1]}") - s0)))
    [ ${#profs[@]} -eq 0 ] || wait "${profs[@]}" || true
    f=$(echo "$N / ($t1 - $t0)" | bc -l)
    fs+=("$f")
    printf "%-11s run %d: xargs -P %d %6.1f/s   jetfleet %6.1f/s   overhead %5.1f ms/item   CPU ms/item: xargs %.2f, agents %.2f + server/coordinator %.2f   load %s\n" \
      "$step" "$r" "$SLOTS" "$x" "$f" "$(overhead "$x" "$f")" "$xcpu" "$acpu" "$scpu" "$(load)"
  done
  xm=$(median "${xs[@]}")
  fm=$(median "${fs[@]}")
  printf "shell %s: median xargs %.1f/s, jetfleet %.1f/s; jetfleet/xargs ratio: %.2f; overhead %.1f ms/item\n" \
    "$step" "$xm" "$fm" "$(echo "$fm / $xm" | bc -l)" "$(overhead "$xm" "$fm")"
done
