#!/usr/bin/env bash
# Partitions and pauses on the secured docker-compose cluster (the faults
# Jepsen used on NATS 2.12.1), one after the other against one job:
#
#   1. build the images, auth init, compose up (3 NATS nodes R3, two
#      coordinators, 3 agents), as scripts/compose-e2e.sh does
#   2. submit a 3,000-item job (a 2 s busybox step, then the flaky handler)
#   3. at 5 %, 15 %, 30 %, 45 % and 60 % done, one fault each:
#        pause     docker pause of the leading coordinator for 12 s (its
#                  lease is 4 s): the other takes over
#        node      a NATS node that is not the meta leader cut off the
#                  cluster network for 20 s
#        meta      the JetStream meta leader cut off the cluster network
#                  for 20 s
#        clients   the leading coordinator cut off the clients' network for 20 s
#        killall   all three NATS nodes SIGKILLed at once, then started
#      while each fault lasts and 15 s after, `composecheck probe` asks for
#      the job's status every 0.5 s with a 3 s timeout: at most 2 probes
#      may fail per fault, and the done count must never go back
#   4. wait for the end; check exact counts against the results, DLQ and
#      work streams (no item lost, none counted twice) and that every node
#      holds the same copy of every stream
#   5. print a line per fault (probes, failures, time to resume) and the
#      coordinator takeover times; docker compose down -v on every exit path
#
# Usage: scripts/compose-faults.sh [--keep]   (--keep leaves the cluster up)
# Env:   FAULTS_ITEMS (default 3000)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }
say() { echo "== [$(elapsed)] $*"; }

keep=false
[ "${1:-}" = "--keep" ] && keep=true
items=${FAULTS_ITEMS:-3000}

if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose_cmd=(docker-compose)
else
  echo "compose-faults: neither 'docker compose' nor 'docker-compose' answers" >&2
  exit 1
fi

project="jetfleet-faults-$(date +%s)-$$"
work=$(mktemp -d /tmp/jetfleet-faults.XXXXXX)
chmod 755 "$work"
export JETFLEET_TAG=${JETFLEET_TAG:-dev}
export JETFLEET_DIST=${JETFLEET_DIST:-$root/dist/images}
export FLEET_AUTH_DIR="$work/auth"
export FLEET_NATS_PUBLISH="127.0.0.1:" # a free host port: CI may already use 4222
export FLEET_ACK_WAIT=10s               # items of a paused or cut-off agent come back after 10s
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
  rm -rf "$work"
  if [ "$rc" -eq 0 ]; then
    echo "== compose-faults: PASS in $(elapsed)"; [ -f "$work/report.txt" ] && cat "$work/report.txt"
  else
    echo "== compose-faults: FAIL (exit $rc) after $(elapsed)"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "compose: ${compose_cmd[*]} ($("${compose_cmd[@]}" version --short 2>/dev/null || "${compose_cmd[@]}" version | head -1)), project $project"
say "building images"
bash scripts/images.sh
CGO_ENABLED=0 go build -trimpath -o "$JETFLEET_DIST/bin/composecheck" ./scripts/composecheck
say "images built"

"$JETFLEET_DIST/bin/fleetctl" auth init "$FLEET_AUTH_DIR" --tls --server-dir /etc/nats/auth >/dev/null
chmod -R a+rX "$FLEET_AUTH_DIR" # the containers' users need to read their nkey

job="faults-$(date +%s)"
{
  echo "id: $job"
  echo "pool: default"
  echo "retry_budget: \"100%\""
  echo "agent_template:"
  echo "  - name: work"
  echo "    shell: 'sleep 2; test -n \"\$ITEM_ID\"'" # busybox sh in the agent image
  echo "    timeout: 10s"
  echo "  - name: flaky"
  echo "    handler: flaky"
  echo "    with: {fail_rate: 0.25, permanent_rate: 0.02, seed: 42}"
  echo "    retry_config: {attempts: 6, backoff: exponential, initial_delay: 200ms, max_delay: 2s, jitter: true}"
  echo "items:"
  for ((i = 0; i < items; i++)); do printf '  - {id: item-%05d}\n' "$i"; done
} >"$work/job.yaml"

say "starting 3 NATS nodes, two coordinators and 3 agents"
if ! compose up -d --scale agent=3 >"$work/up.log" 2>&1; then
  cat "$work/up.log" >&2
  exit 1
fi
# The coordinator's one network is where clients and agents are; the NATS
# nodes' monitoring ports are on the monitoring network only.
net=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$(compose ps -q coordinator-1)")
mon=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(compose ps -q nats-1)" | tr ' ' '\n' | grep '_monitoring$')
urls="tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222"
monitoring="http://nats-1-monitoring:8222 http://nats-2-monitoring:8222 http://nats-3-monitoring:8222"

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

say "waiting for the cluster and the coordinator's API"
ready=false
for _ in $(seq 90); do
  if fleetctl operator list --json --timeout 2s >/dev/null 2>&1; then ready=true; break; fi
  sleep 1
done
$ready || { echo "compose-faults: the coordinator's API did not answer within 90s" >&2; exit 1; }
say "where agents run, the NATS monitoring and cluster ports are out of reach"
check operator unreachable http://nats-1:8222 http://nats-2:8222 http://nats-3:8222 \
  tcp://nats-1:6222 tcp://nats-2:6222 tcp://nats-3:6222
say "ready; submitting $job ($items items) as the submitter"
fleetctl submitter submit /work/job.yaml >/dev/null
clusternet=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(compose ps -q nats-1)" | tr ' ' '\n' | grep '_cluster$')
report="$work/report.txt"
: >"$report"

# probe_during LABEL SECONDS: status probes in the background for SECONDS.
probe_during() {
  local label=$1 secs=$2
  check operator probe "$job" --label "$label" --for "${secs}s" >>"$report" 2>"$work/probe-$label.err" &
  probe_pid=$!
}
probe_failed=""
probe_result() {
  if ! wait "$probe_pid"; then
    cat "$work/probe-$1.err" >&2
    probe_failed+=" $1"
  fi
  tail -1 "$report"
}
leading_coordinator() { check coordinator holder | cut -d- -f1-2; }
# takeover COORD: seconds until a coordinator other than COORD holds the lease.
takeover() {
  local t=$(date +%s)
  local by
  by=$(check coordinator holder --wait-not "$1-" --timeout 2m)
  echo "$(( $(date +%s) - t ))s (by $(echo "$by" | cut -d- -f1-2))"
}
# disconnect_for NODE_SERVICE NETWORK ALIAS SECONDS: disconnect, wait, reconnect.
disconnect_for() {
  local id; id=$(compose ps -q "$1")
  docker network disconnect "$2" "$id"
  sleep "$4"
  if [ -n "$3" ]; then docker network connect --alias "$3" "$2" "$id"; else docker network connect "$2" "$id"; fi
}

check operator wait "$job" --done $((items * 5 / 100)) --timeout 5m
coord=$(leading_coordinator)
say "fault 1 (pause): docker pause $coord, the leading coordinator, for 12 s"
probe_during pause 30
docker pause "$(compose ps -q "$coord")" >/dev/null
echo "pause: lease taken over after $(takeover "$coord")" >>"$report"
sleep 8 # the pause lasts 12 s or more, the takeover's wait included
docker unpause "$(compose ps -q "$coord")" >/dev/null
probe_result pause

check operator wait "$job" --done $((items * 15 / 100)) --timeout 5m
meta=$(monitor leader $monitoring)
node=nats-1; [ "$meta" = nats-1 ] && node=nats-2
say "fault 2 (node): $node (not the meta leader, $meta) cut off the cluster network for 20 s"
probe_during node 35
disconnect_for "$node" "$clusternet" "$node-cluster" 20
probe_result node

check operator wait "$job" --done $((items * 30 / 100)) --timeout 5m
meta=$(monitor leader $monitoring)
say "fault 3 (meta): the meta leader, $meta, cut off the cluster network for 20 s"
probe_during meta 35
disconnect_for "$meta" "$clusternet" "$meta-cluster" 20
probe_result meta

check operator wait "$job" --done $((items * 45 / 100)) --timeout 5m
coord=$(leading_coordinator)
say "fault 4 (clients): the leading coordinator, $coord, cut off the clients' network for 20 s"
probe_during clients 35
( sleep 1; echo "clients: lease taken over after $(takeover "$coord")" >>"$report" ) &
disconnect_for "$coord" "$net" "" 20
probe_result clients

check operator wait "$job" --done $((items * 60 / 100)) --timeout 5m
say "fault 5 (killall): SIGKILL of nats-1, nats-2 and nats-3 at once"
probe_during killall 45
docker kill "$(compose ps -q nats-1)" "$(compose ps -q nats-2)" "$(compose ps -q nats-3)" >/dev/null
docker start "$(compose ps -q nats-1)" "$(compose ps -q nats-2)" "$(compose ps -q nats-3)" >/dev/null
probe_result killall

check operator wait "$job" --timeout 10m
say "job ended"
for _ in $(seq 10); do
  fleetctl operator status "$job" --json >"$work/status.json" 2>"$work/status.err" || true
  grep -q '"id"' "$work/status.json" && break
  cat "$work/status.err" >&2
  sleep 2
done
echo "== final job status (fleetctl status $job --json):"
cat "$work/status.json"
say "checking that the replicas converged: every node holds the same copy of every stream"
monitor converged --timeout 120s $monitoring
say "auditing the streams (coordinator's role: results, DLQ, work)"
check coordinator verify "$job" --items "$items" --status /work/status.json
echo "== per fault:"
cat "$report"
if [ -n "$probe_failed" ]; then
  echo "compose-faults: more than 2 status probes failed, or counts went back, during:$probe_failed" >&2
  exit 1
fi
status=0
