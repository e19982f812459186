# Shared by scripts/bench-latency.sh and scripts/bench-shell.sh (sourced,
# not run): a fleet as users deploy it, in separate processes with their
# default flags, on this machine.
#
# Sourcing it goes to the repo root and makes work (a temporary directory,
# removed on exit with every process started here); then
#   bench_build                   nats-server (the version go.mod pins: $ver), the coordinator,
#                                 the agent and fleetctl, into $work/bin
#   bench_up AGENTS NAME [FLAGS]  nats-server with JetStream on a random port (exports NATS_URL),
#                                 one coordinator and AGENTS agents named NAME-1, NAME-2, ...
#                                 with FLAGS; returns once fleetctl list answers. With
#                                 BENCH_PPROF set, the server serves its profiles on port
#                                 $pprof_port, the coordinator on +1, agent i on +1+i;
#                                 the server's monitoring port is $mon_port
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

bench_build() {
  echo "building binaries"
  ver=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
  GOBIN="$work/bin" go install "github.com/nats-io/nats-server/v2@$ver"
  for c in coordinator agent fleetctl; do go build -o "$work/bin/$c" "./cmd/$c"; done
}

bench_up() {
  local agents=$1 name=$2
  shift 2
  local port=$((20000 + RANDOM % 20000))
  local mon=$((port + 1))
  mon_port=$mon
  pprof_port=$((port + 2))
  local sp=() cp=() ap=()
  if [ -n "${BENCH_PPROF:-}" ]; then sp=(-profile "$pprof_port"); cp=(--pprof-addr "127.0.0.1:$((pprof_port + 1))"); fi
  "$work/bin/nats-server" -js -a 127.0.0.1 -p "$port" -m "$mon" -sd "$work/js" "${sp[@]}" >"$work/server.log" 2>&1 &
  pids+=("$!")
  export NATS_URL="nats://127.0.0.1:$port"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$mon/healthz" >/dev/null && break; sleep 0.1; done
  "$work/bin/coordinator" --log-level warn "${cp[@]}" >"$work/coordinator.log" 2>&1 &
  pids+=("$!")
  for i in $(seq "$agents"); do
    if [ -n "${BENCH_PPROF:-}" ]; then ap=(--pprof-addr "127.0.0.1:$((pprof_port + 1 + i))"); fi
    "$work/bin/agent" --log-level warn --name "$name-$i" "${ap[@]}" "$@" >"$work/agent-$i.log" 2>&1 &
    pids+=("$!")
  done
  for _ in $(seq 100); do "$work/bin/fleetctl" list >/dev/null 2>&1 && break; sleep 0.1; done
}
