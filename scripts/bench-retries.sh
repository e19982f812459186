#!/usr/bin/env bash
# What a retry costs against a run: a job whose items fail now and then
# against the same job without failures.
#
# Starts nats-server, a coordinator and -agents agent daemons with
# --concurrency C each (default flags otherwise), then alternates, -runs
# times, `fleetctl submit --wait` (timed end to end) of two N-item jobs of
# the flaky handler, the input uploaded from a file:
#
#   clean  fail_rate 0: every item succeeds at its first run
#   flaky  fail_rate -rate (default 0.3): each run fails with that chance and
#          is retried after a fixed 10ms, the job's retry budget 100% of its
#          items, attempts 50 (so that none runs out)
#
# and prints each run's rates, the retries and runs the flaky job took, and
# last "flaky/clean ratio: X.XX", the ratio of the median rates in items/s.
# A flaky job with rate p does 1/(1-p) runs per item (1.43 at 0.3), so
# 1-p (0.7) is the ratio's ceiling.
#
# Per run it also prints the server's messages in and out per item (its
# /varz), and the writes to the items and budget buckets (their streams'
# last sequences, /jsz): a retry's cost in server work.
#
# With -timeline, each run also prints when the job reached 50, 90, 99 and
# 100 % of its items (fleetctl status every 50 ms): where the tail is.
#
# With -pprof DIR, each flaky run saves a CPU profile of every process over
# its first -pprof-seconds (default 3) to DIR/run-<r>-<process>.pprof.
#
# Usage: scripts/bench-retries.sh [-n 30000] [-runs 3] [-rate 0.3] [-agents 2] [-concurrency 64] [-timeline] [-pprof DIR [-pprof-seconds S]]
source "$(dirname "$0")/bench-lib.sh"

N=30000
RUNS=3
RATE=0.3
AGENTS=2
CONC=64
PPROF=
PPROF_SECONDS=3
TIMELINE=
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N=$2; shift 2 ;;
    -runs) RUNS=$2; shift 2 ;;
    -rate) RATE=$2; shift 2 ;;
    -agents) AGENTS=$2; shift 2 ;;
    -concurrency) CONC=$2; shift 2 ;;
    -pprof) PPROF=$(mkdir -p "$2" && cd "$2" && pwd); export BENCH_PPROF=1; shift 2 ;;
    -pprof-seconds) PPROF_SECONDS=$2; shift 2 ;;
    -timeline) TIMELINE=1; shift ;;
    *) echo "usage: $0 [-n N] [-runs R] [-rate P] [-agents A] [-concurrency C] [-timeline] [-pprof DIR [-pprof-seconds S]]" >&2; exit 2 ;;
  esac
done

bench_build
go run ./scripts/genitems -n "$N" -o "$work/items.json"
bench_up "$AGENTS" retry-agent --concurrency "$CONC"

# cpus: the user+system CPU seconds so far of the server, the coordinator
# and the agents together (bench_up started them in that order).
cpus() {
  local t a=0 i
  t=$(getconf CLK_TCK)
  c() { awk -v t="$t" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
  for i in "${pids[@]:2}"; do a=$(echo "$a + $(c "$i")" | bc); done
  echo "$(c "${pids[0]}") $(c "${pids[1]}") $a"
}
# counts: the server's messages in and out, and the last sequences of the
# items and budget buckets' streams (every write, deletes included).
counts() {
  local v j
  v=$(curl -sf "http://127.0.0.1:$mon_port/varz" | jq -r '"\(.in_msgs) \(.out_msgs)"')
  j=$(curl -sf "http://127.0.0.1:$mon_port/jsz?streams=true" |
    jq -r '[.account_details[].stream_detail[]? | {(.name): .state.last_seq}] | add // {} | "\(.KV_fleet_items // 0) \(.KV_fleet_budget // 0)"')
  echo "$v $j"
}
# progress ID START: polls the job's status every 50 ms until it ends and
# prints when it reached 50, 90, 99 and 100 % of its items.
progress() {
  local id=$1 t0=$2 out=$work/$1.progress
  while :; do
    st=$("$work/bin/fleetctl" status "$id" --json 2>/dev/null) || { sleep 0.05; continue; }
    echo "$(now) $(jq -r '"\(.succeeded + .failed + .dead_lettered + .skipped + .not_run) \(.state)"' <<<"$st")" >>"$out"
    case "$(jq -r .state <<<"$st")" in running|pending) sleep 0.05 ;; *) break ;; esac
  done
  awk -v n="$N" -v t0="$t0" 'BEGIN { split("0.5 0.9 0.99 1", q, " ") }
    { for (i = 1; i <= 4; i++) if (!(i in at) && $2 >= q[i] * n) at[i] = $1 - t0 }
    END { printf "  timeline:"; for (i = 1; i <= 4; i++) printf " %g%% at %.2f s", q[i] * 100, at[i]; print "" }' "$out"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }

# job ID RATE: the job's spec, its input beside it.
job() {
  cat >"$work/$1.yaml" <<YAML
id: $1
input: items.json
json_path: "\$.items[*]"
retry_budget: "100%"
agent_template:
  - handler: flaky
    with: { fail_rate: $2, seed: 7 }
    retry_config: { attempts: 50, backoff: fixed, initial_delay: 10ms, jitter: false }
YAML
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); N = $N; fail_rate $RATE; $AGENTS agents x $CONC; nats-server $ver"
cleans=()
flakies=()
for r in $(seq "$RUNS"); do
  for kind in clean flaky; do
    rate=0
    [ "$kind" = flaky ] && rate=$RATE
    id="$kind-$r-$$"
    job "$id" "$rate"
    profs=()
    if [ -n "$PPROF" ] && [ "$kind" = flaky ]; then
      names=(server coordinator)
      for i in $(seq "$AGENTS"); do names+=("agent-$i"); done
      for i in "${!names[@]}"; do
        curl -sf -o "$PPROF/run-$r-${names[$i]}.pprof" "http://127.0.0.1:$((pprof_port + i))/debug/pprof/profile?seconds=$PPROF_SECONDS" &
        profs+=("$!")
      done
    fi
    read -r s0 c0 a0 < <(cpus)
    read -r in0 out0 kv0 bu0 < <(counts)
    t0=$(now)
    prog=
    if [ -n "$TIMELINE" ]; then progress "$id" "$t0" & prog=$!; fi
    "$work/bin/fleetctl" submit "$work/$id.yaml" --wait >"$work/$id.log" 2>&1 || { cat "$work/$id.log"; exit 1; }
    t1=$(now)
    read -r s1 c1 a1 < <(cpus)
    read -r in1 out1 kv1 bu1 < <(counts)
    st=$("$work/bin/fleetctl" status "$id" --json)
    ok=$(jq -r .succeeded <<<"$st")
    retries=$(jq -r .retries <<<"$st")
    [ "$ok" = "$N" ] || { echo "$id: $ok of $N items succeeded" >&2; jq . <<<"$st" >&2; exit 1; }
    f=$(echo "$N / ($t1 - $t0)" | bc -l)
    printf "run %d %-5s %8.0f items/s  %6.2f s  retries %6d (%.2f runs per item)  CPU-s server %.2f, coordinator %.2f, agents %.2f\n" \
      "$r" "$kind" "$f" "$(echo "$t1 - $t0" | bc -l)" "$retries" "$(echo "1 + $retries / $N" | bc -l)" \
      "$(echo "$s1 - $s0" | bc)" "$(echo "$c1 - $c0" | bc)" "$(echo "$a1 - $a0" | bc)"
    printf "  server messages per item in %.2f, out %.2f; items bucket writes %d, budget writes %d\n" \
      "$(echo "($in1 - $in0) / $N" | bc -l)" "$(echo "($out1 - $out0) / $N" | bc -l)" "$((kv1 - kv0))" "$((bu1 - bu0))"
    [ -n "$prog" ] && wait "$prog"
    if [ "$kind" = clean ]; then cleans+=("$f"); else flakies+=("$f"); fi
    for p in "${profs[@]}"; do wait "$p" || true; done
  done
done
cm=$(median "${cleans[@]}")
fm=$(median "${flakies[@]}")
printf "median clean %.0f items/s, flaky %.0f items/s; flaky/clean ratio: %.2f (load average %s)\n" "$cm" "$fm" "$(echo "$fm / $cm" | bc -l)" "$(cut -d' ' -f1-3 /proc/loadavg)"
