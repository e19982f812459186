# Shared by scripts/compose-e2e.sh and scripts/compose-faults.sh (sourced,
# not run): the secured docker-compose cluster they both run a job on.
#
# Before sourcing, set: lib_name (e2e, faults: names the project and the
# messages) and, optionally, lib_report (a file printed after the result),
# lib_auth_args (more `fleetctl auth init` flags) and lib_up_args (more
# `compose up` flags).
# After sourcing: root, work, project, keep (--keep leaves the cluster up),
# compose, say, elapsed; then
#   lib_build                 images, composecheck, auth init
#   lib_job ID ITEMS SLEEP    writes $work/job.yaml: a busybox step of SLEEP s, then the flaky handler
#   lib_up                    compose up (3 NATS nodes R3, two coordinators, 3 agents), waits
#                             for the API, checks the agents' network cannot reach monitoring or routes
#   fleetctl NKEY ARGS, check NKEY ARGS (composecheck), monitor ARGS (on the monitoring network)
#   lib_audit JOB ITEMS CONVERGE_TIMEOUT   final status, replicas converged, exact counts
# Set status=0 at the end of a passing run; cleanup (on EXIT) prints the
# logs of a failed run and takes the cluster down (docker compose down -v).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }
say() { echo "== [$(elapsed)] $*"; }

keep=false
[ "${1:-}" = "--keep" ] && keep=true

if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose_cmd=(docker-compose)
else
  echo "compose-$lib_name: neither 'docker compose' nor 'docker-compose' answers" >&2
  exit 1
fi

project="jetfleet-$lib_name-$(date +%s)-$$"
work=$(mktemp -d "/tmp/jetfleet-$lib_name.XXXXXX")
chmod 755 "$work"
export JETFLEET_TAG=${JETFLEET_TAG:-dev}
export JETFLEET_DIST=${JETFLEET_DIST:-$root/dist/images}
export FLEET_AUTH_DIR="$work/auth"
export FLEET_NATS_PUBLISH="127.0.0.1:" # a free host port: CI may already use 4222
export FLEET_ACK_WAIT=10s               # a killed, paused or cut-off agent's items come back after 10s
compose() { "${compose_cmd[@]}" -p "$project" -f "$root/docker-compose.yml" "$@"; }

status=1
cleanup() {
  local rc=$?
  [ "$status" -eq 0 ] || rc=${rc/#0/1}
  if [ "$rc" -ne 0 ] && [ -n "${net:-}" ]; then
    echo "== logs (last lines of each service)"
    compose logs --no-color --tail 15 2>&1 | tail -120 || true
  fi
  if $keep; then
    echo "== --keep: cluster left up; stop it with: ${compose_cmd[*]} -p $project down -v"
  else
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  if [ "$rc" -eq 0 ]; then
    echo "== compose-$lib_name: PASS in $(elapsed)"
  else
    echo "== compose-$lib_name: FAIL (exit $rc) after $(elapsed)"
  fi
  if [ -n "${lib_report:-}" ] && [ -s "$lib_report" ]; then echo "== report:"; cat "$lib_report"; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

lib_build() {
  say "compose: ${compose_cmd[*]} ($("${compose_cmd[@]}" version --short 2>/dev/null || "${compose_cmd[@]}" version | head -1)), project $project"
  say "building images"
  bash scripts/images.sh
  CGO_ENABLED=0 go build -trimpath -o "$JETFLEET_DIST/bin/composecheck" ./scripts/composecheck
  say "images built"
  # shellcheck disable=SC2086 # lib_auth_args is a list of flags
  "$JETFLEET_DIST/bin/fleetctl" auth init "$FLEET_AUTH_DIR" --tls --server-dir /etc/nats/auth ${lib_auth_args:-} >/dev/null
  chmod -R a+rX "$FLEET_AUTH_DIR" # the containers' users need to read their nkey
}

# lib_job ID ITEMS SLEEP
lib_job() {
  local id=$1 n=$2 secs=$3 i
  {
    echo "id: $id"
    echo "pool: default"
    echo "retry_budget: \"100%\""
    echo "agent_template:"
    echo "  - name: work"
    echo "    shell: 'sleep $secs; test -n \"\$ITEM_ID\"'" # busybox sh in the agent image
    echo "    timeout: 10s"
    echo "  - name: flaky"
    echo "    handler: flaky"
    echo "    with: {fail_rate: 0.25, permanent_rate: 0.02, seed: 42}"
    echo "    retry_config: {attempts: 6, backoff: exponential, initial_delay: 200ms, max_delay: 2s, jitter: true}"
    echo "items:"
    for ((i = 0; i < n; i++)); do printf '  - {id: item-%05d}\n' "$i"; done
  } >"$work/job.yaml"
}

# tool NKEY [docker run options...] -- ARGS: fleetctl's image on the
# clients' network (or $tool_net), as the user whose seed is /auth/NKEY.nk.
tool() {
  local nk=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  docker run --rm --network "${tool_net:-$net}" \
    -v "$work:/work:ro" -v "$FLEET_AUTH_DIR:/auth:ro" -v "$JETFLEET_DIST/bin/composecheck:/composecheck:ro" \
    -e NATS_URL="$urls" -e NATS_TLS_CA=/auth/ca.pem -e NATS_NKEY="/auth/$nk.nk" \
    "${opts[@]}" "jetfleet/fleetctl:$JETFLEET_TAG" "$@"
}
fleetctl() { local nk=$1; shift; tool "$nk" -- "$@"; }
check() { local nk=$1; shift; tool "$nk" --entrypoint /composecheck -- "$@"; }
# monitor ARGS: composecheck on the monitoring network (leader, converged).
monitor() { tool_net=$mon check operator "$@"; }

lib_up() {
  say "starting 3 NATS nodes, two coordinators and 3 agents"
  # shellcheck disable=SC2086 # lib_up_args is a list of flags
  if ! compose up -d --scale agent=3 ${lib_up_args:-} >"$work/up.log" 2>&1; then
    cat "$work/up.log" >&2
    exit 1
  fi
  # The coordinator's one network is where clients and agents are; the NATS
  # nodes' monitoring ports are on the monitoring network only, their
  # routes on the cluster network only.
  net=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$(compose ps -q coordinator-1)")
  local nets
  nets=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(compose ps -q nats-1)" | tr ' ' '\n')
  mon=$(echo "$nets" | grep '_monitoring$')
  clusternet=$(echo "$nets" | grep '_cluster$')
  urls="tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222"
  monitoring="http://nats-1-monitoring:8222 http://nats-2-monitoring:8222 http://nats-3-monitoring:8222"

  say "waiting for the cluster and the coordinator's API"
  local ready=false
  for _ in $(seq 90); do
    if fleetctl operator list --json --timeout 2s >/dev/null 2>&1; then ready=true; break; fi
    sleep 1
  done
  $ready || { echo "compose-$lib_name: the coordinator's API did not answer within 90s" >&2; exit 1; }
  say "where agents run, the NATS monitoring and cluster ports are out of reach"
  check operator unreachable http://nats-1:8222 http://nats-2:8222 http://nats-3:8222 \
    tcp://nats-1:6222 tcp://nats-2:6222 tcp://nats-3:6222
}

# lib_audit JOB ITEMS CONVERGE_TIMEOUT: the job's final status (exit 1 of
# fleetctl status means the job failed, some items dead-lettered: retried
# only when no status came back, the cluster may still be settling), every
# node holding the same copy of every stream, and exact counts against the
# results, DLQ and work streams (none lost, none counted twice).
lib_audit() {
  local job=$1 n=$2 converge=$3
  for _ in $(seq 10); do
    fleetctl operator status "$job" --json >"$work/status.json" 2>"$work/status.err" || true
    grep -q '"id"' "$work/status.json" && break
    cat "$work/status.err" >&2
    sleep 2
  done
  echo "== final job status (fleetctl status $job --json):"
  cat "$work/status.json"
  if fleetctl operator dlq stats --job "$job" >"$work/dlq-stats.txt" 2>/dev/null; then
    echo "== fleetctl dlq stats --job $job:"
    cat "$work/dlq-stats.txt"
  fi
  say "checking that the replicas converged: every node holds the same copy of every stream"
  monitor converged --timeout "$converge" $monitoring
  say "auditing the streams (coordinator's role: results, DLQ, work)"
  check coordinator verify "$job" --items "$n" --status /work/status.json
}
