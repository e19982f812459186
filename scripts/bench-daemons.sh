#!/usr/bin/env bash
# Throughput as users deploy jetfleet: separate processes, default flags.
#
# Builds nats-server (the version go.mod pins), the coordinator, the agent
# and fleetctl; starts the server, one coordinator and two agents as
# separate processes with their default flags; then alternates, on that
# same server:
#
#   raw      scripts/bench -raw-only: async-publish N messages to a
#            WorkQueue stream, consume and ack them (one client process)
#            as the plain pipeline does (`nats bench js`): no Nats-Msg-Id,
#            the client's default pull options. This is the baseline;
#   handicap the same with a Nats-Msg-Id per message and a 256-message
#            prefetch (what jetfleet needs), printed as a second line;
#   jetfleet `fleetctl submit --wait` of an N-item job (input file uploaded
#            by fleetctl, one no-op handler step), timed end to end.
#
# For each run it prints the rates, the server's messages in and out per
# item (from its /varz) and each process's CPU seconds; last, the ratio of
# the medians as "jetfleet/raw ratio: X.XX" (against the plain pipeline),
# after "jetfleet/raw (handicapped) ratio: X.XX".
#
# With -pprof DIR, every process serves its Go profiles (--pprof-addr, the
# server -profile) and each jetfleet run saves a CPU profile of each, for
# its first -pprof-seconds (default 10), to DIR/run-<r>-<process>.pprof:
#   go tool pprof -top DIR/run-1-agent-1.pprof
#
# -timeline prints, per jetfleet run, how long the job took to be accepted
# (the coordinator copies and counts the input), to run, and to be seen
# done by fleetctl.
#
# -coord "FLAGS" passes extra flags to the coordinator (word-split), to
# compare a setting against the defaults: -coord "--job-queue 4096".
#
# -cluster runs a three-node cluster on this machine instead of one server
# (the coordinator with --replicas 3, the raw stream with 3 replicas; every
# client is given all three URLs); -sync-always sets the servers'
# jetstream { sync_interval: always } (an fsync per write). The server
# figures (/varz, CPU) are then the first node's.
#
# -pin runs the server (or the three nodes) on CPU 0 and every client
# (the raw pipeline, the coordinator, the agents, fleetctl) on CPU 1, with
# taskset: the closest this machine comes to a server on a machine of its
# own, where the daemons do not take its CPU.
#
# Usage: scripts/bench-daemons.sh [-n 100000] [-runs 3] [-agents 2] [-cluster] [-sync-always] [-pin] [-coord FLAGS] [-timeline] [-pprof DIR [-pprof-seconds S]] [-- extra agent flags]
set -euo pipefail
cd "$(dirname "$0")/.."

N=100000
RUNS=3
AGENTS=2
AGENT_FLAGS=()
COORD_FLAGS=()
PPROF=""
PPROF_SECONDS=10
TIMELINE=""
CLUSTER=""
SYNC_ALWAYS=""
PIN=""
while [ $# -gt 0 ]; do
  case "$1" in
    -cluster) CLUSTER=1; shift ;;
    -sync-always) SYNC_ALWAYS=1; shift ;;
    -pin) PIN=1; shift ;;
    -n) N=$2; shift 2 ;;
    -runs) RUNS=$2; shift 2 ;;
    -agents) AGENTS=$2; shift 2 ;;
    -coord) read -r -a COORD_FLAGS <<<"$2"; shift 2 ;;
    -pprof) PPROF=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    -pprof-seconds) PPROF_SECONDS=$2; shift 2 ;;
    -timeline) TIMELINE=1; shift ;;
    --) shift; AGENT_FLAGS=("$@"); break ;;
    *) echo "usage: $0 [-n N] [-runs R] [-agents A] [-cluster] [-sync-always] [-pin] [-coord FLAGS] [-timeline] [-pprof DIR [-pprof-seconds S]] [-- agent flags]" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
pids=()
cleanup() {
  local status=$?
  # A run that failed says why: the last lines of every process's log
  # (a daemon that exited, a server that refused), before they go.
  if [ "$status" != 0 ]; then
    for f in "$work"/*.log; do
      [ -s "$f" ] || continue
      echo "== $(basename "$f") (last 20 lines)" >&2
      tail -n 20 "$f" >&2
    done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "building binaries"
ver=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
GOBIN="$work/bin" go install "github.com/nats-io/nats-server/v2@$ver"
for c in coordinator agent fleetctl; do go build -o "$work/bin/$c" "./cmd/$c"; done
go build -o "$work/bin/bench" ./scripts/bench
go run ./scripts/genitems -n "$N" -o "$work/items.json"

# on_server / on_client run a command on the server's CPU or the
# clients' (-pin), or wherever the scheduler puts it.
on_server=()
on_client=()
if [ -n "$PIN" ]; then
  command -v taskset >/dev/null || { echo "-pin needs taskset (util-linux)" >&2; exit 2; }
  [ "$(nproc)" -ge 2 ] || { echo "-pin needs two CPUs" >&2; exit 2; }
  on_server=(taskset -c 0)
  on_client=(taskset -c 1)
fi

port=$((20000 + RANDOM % 20000))
mon=$((port + 1))
# pprof ports, when -pprof: server, coordinator, agent 1, agent 2, ...
pp=$((port + 2))
declare -A pprof_of=()
srv_flags=()
if [ -n "$PPROF" ]; then srv_flags=(-profile "$pp"); pprof_of[server]=$pp; fi
sync_conf=""
[ -n "$SYNC_ALWAYS" ] && sync_conf="sync_interval: always"
replicas=1
if [ -z "$CLUSTER" ]; then
  cat >"$work/server.conf" <<CONF
jetstream {
  store_dir: "$work/js"
  $sync_conf
}
CONF
  "${on_server[@]}" "$work/bin/nats-server" -c "$work/server.conf" -a 127.0.0.1 -p "$port" -m "$mon" "${srv_flags[@]}" >"$work/server.log" 2>&1 &
  srv_pid=$!
  pids+=("$srv_pid")
  export NATS_URL="nats://127.0.0.1:$port"
else
  # Node i listens on $port+10i (clients), $port+10i+1 (monitoring),
  # $port+10i+9 (routes); node 0 is the one measured.
  replicas=3
  routes=""
  for i in 0 1 2; do routes="$routes nats-route://127.0.0.1:$((port + 10 * i + 9))"; done
  urls=()
  for i in 0 1 2; do
    cat >"$work/server-$i.conf" <<CONF
server_name: n$i
jetstream {
  store_dir: "$work/js-$i"
  $sync_conf
}
cluster { name: bench, listen: "127.0.0.1:$((port + 10 * i + 9))", routes: [$(echo $routes | sed 's/ /, /g')] }
CONF
    flags=()
    [ "$i" = 0 ] && flags=("${srv_flags[@]}")
    "${on_server[@]}" "$work/bin/nats-server" -c "$work/server-$i.conf" -a 127.0.0.1 -p "$((port + 10 * i))" -m "$((port + 10 * i + 1))" "${flags[@]}" >"$work/server-$i.log" 2>&1 &
    [ "$i" = 0 ] && srv_pid=$!
    pids+=("$!")
    urls+=("nats://127.0.0.1:$((port + 10 * i))")
  done
  NATS_URL=$(IFS=,; echo "${urls[*]}")
  export NATS_URL
  for i in 0 1 2; do
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$((port + 10 * i + 1))/healthz?js-enabled-only=true" >/dev/null && break; sleep 0.1; done
  done
  COORD_FLAGS+=(--replicas 3)
fi
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$mon/healthz" >/dev/null && break; sleep 0.1; done

pflag=()
pflag() { # pflag NAME: sets pflag to the --pprof-addr of process NAME when -pprof
  pflag=()
  [ -n "$PPROF" ] || return 0
  pp=$((pp + 1)); pprof_of[$1]=$pp; pflag=("--pprof-addr=127.0.0.1:$pp")
}
pflag coordinator
"${on_client[@]}" "$work/bin/coordinator" --log-level warn "${pflag[@]}" "${COORD_FLAGS[@]}" >"$work/coordinator.log" 2>&1 &
coord_pid=$!
pids+=("$coord_pid")
agent_pids=()
for i in $(seq "$AGENTS"); do
  pflag "agent-$i"
  "${on_client[@]}" "$work/bin/agent" --log-level warn --name "bench-agent-$i" "${pflag[@]}" "${AGENT_FLAGS[@]}" >"$work/agent-$i.log" 2>&1 &
  agent_pids+=("$!")
  pids+=("$!")
done
for _ in $(seq 100); do "$work/bin/fleetctl" list >/dev/null 2>&1 && break; sleep 0.1; done

# cpu PID: user+system CPU seconds of a process so far.
cpu() {
  if [ ! -r "/proc/$1/stat" ]; then
    echo "process $1 is gone; of those started (${pids[*]}), these still run:" >&2
    ps -o pid=,args= -p "$(IFS=,; echo "${pids[*]}")" >&2 || true
    return 1
  fi
  awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"
}
varz() { curl -sf "http://127.0.0.1:$mon/varz" | jq -r "[.in_msgs, .out_msgs] | @tsv"; }
agents_cpu() { local s=0 c p; for p in "${agent_pids[@]}"; do c=$(cpu "$p") || return 1; s=$(echo "$s + $c" | bc); done; echo "$s"; }

cat >"$work/job.yaml" <<'YAML'
input: items.json
json_path: "$.items[*]"
agent_template:
  - handler: noop
YAML

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); N = $N; nats-server $ver${CLUSTER:+, a 3-node cluster (R3)}${SYNC_ALWAYS:+, sync_interval: always}; $AGENTS agents with default flags ${AGENT_FLAGS[*]:-}${PIN:+; the server on CPU 0, the clients on CPU 1}"
raws=()
hands=()
fleets=()
for r in $(seq "$RUNS"); do
  read -r in0 out0 < <(varz)
  s0=$(cpu "$srv_pid")
  rate=$("${on_client[@]}" "$work/bin/bench" -raw-only -replicas "$replicas" -server "$NATS_URL" -n "$N" | awk '{print $3}')
  read -r in1 out1 < <(varz)
  s1=$(cpu "$srv_pid")
  printf "run %d raw JetStream: %8.0f msgs/s   server: %.1f in / %.1f out msgs per item, %.2f CPU-s\n" \
    "$r" "$rate" "$(echo "($in1 - $in0) / $N" | bc -l)" "$(echo "($out1 - $out0) / $N" | bc -l)" "$(echo "$s1 - $s0" | bc)"
  raws+=("$rate")
  hrate=$("${on_client[@]}" "$work/bin/bench" -raw-only -raw-mode handicapped -replicas "$replicas" -server "$NATS_URL" -n "$N" | awk '{print $3}')
  printf "run %d raw, handicapped: %8.0f msgs/s   (a Nats-Msg-Id per message, prefetch 256)\n" "$r" "$hrate"
  hands+=("$hrate")
  # The jetfleet run's server figures start here, after both raw runs.
  read -r in1 out1 < <(varz)
  s1=$(cpu "$srv_pid")

  sed "s/^input:/id: bench-$r-$$\ninput:/" "$work/job.yaml" >"$work/job-$r.yaml"
  c0=$(cpu "$coord_pid"); a0=$(agents_cpu)
  profs=()
  if [ -n "$PPROF" ]; then
    for name in "${!pprof_of[@]}"; do
      curl -sf -o "$PPROF/run-$r-$name.pprof" "http://127.0.0.1:${pprof_of[$name]}/debug/pprof/profile?seconds=$PPROF_SECONDS" &
      profs+=("$!")
    done
  fi
  t0=$(date +%s.%N)
  "${on_client[@]}" "$work/bin/fleetctl" submit "$work/job-$r.yaml" --wait >"$work/submit-$r.log" 2>&1 || { cat "$work/submit-$r.log"; exit 1; }
  t1=$(date +%s.%N)
  read -r in2 out2 < <(varz)
  s2=$(cpu "$srv_pid"); c1=$(cpu "$coord_pid"); a1=$(agents_cpu)
  frate=$(echo "$N / ($t1 - $t0)" | bc -l)
  printf "run %d jetfleet job  : %8.0f items/s  server: %.1f in / %.1f out msgs per item, %.2f CPU-s; coordinator %.2f CPU-s; agents %.2f CPU-s\n" \
    "$r" "$frate" "$(echo "($in2 - $in1) / $N" | bc -l)" "$(echo "($out2 - $out1) / $N" | bc -l)" \
    "$(echo "$s2 - $s1" | bc)" "$(echo "$c1 - $c0" | bc)" "$(echo "$a1 - $a0" | bc)"
  fleets+=("$frate")
  if [ -n "$TIMELINE" ]; then
    "$work/bin/fleetctl" status "bench-$r-$$" --json | jq -r --argjson t0 "$t0" --argjson t1 "$t1" '
      def ts: capture("(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z") | ((.s + "Z") | fromdateiso8601) + (("0." + (.f // "0")) | tonumber);
      (.submitted_at | ts) as $sub | (.started_at | ts) as $st | (.finished_at | ts) as $fin |
      "  timeline: fleetctl to accepting \($sub - $t0 | . * 100 | round / 100) s, accepting (copy and count the input) \($st - $sub | . * 100 | round / 100) s, running \($fin - $st | . * 100 | round / 100) s, to fleetctl done \($t1 - $fin | . * 100 | round / 100) s"'
  fi
  for p in "${profs[@]}"; do wait "$p" || echo "a CPU profile of run $r failed" >&2; done
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
rm_=$(median "${raws[@]}")
hm_=$(median "${hands[@]}")
fm_=$(median "${fleets[@]}")
printf "median raw %.0f msgs/s (handicapped %.0f), median jetfleet %.0f items/s over %d runs\n" "$rm_" "$hm_" "$fm_" "$RUNS"
printf "jetfleet/raw (handicapped) ratio: %.2f\n" "$(echo "$fm_ / $hm_" | bc -l)"
printf "jetfleet/raw ratio: %.2f\n" "$(echo "$fm_ / $rm_" | bc -l)"
